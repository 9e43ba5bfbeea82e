//! Each uid's share of the streams an agent serves
//! (`lock.max_streams_per_uid`), on real masters: with a share of 2, an
//! observer and a hold are served; one more stream of any kind (an
//! observer, a campaign, a lock's or a permit's hold) is refused `429
//! too_many_streams` naming the setting, before it touches the masters;
//! once a stream closes, its slot serves the next.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, Hold, TestAgent};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const CONFIG: &str = "lock:\n  max_streams_per_uid: 2\n";

/// Opens a stream of `kind` on `agent`.
async fn open(agent: &TestAgent, kind: &str) -> Hold {
    let (method, path, body): (Method, &str, Option<Value>) = match kind {
        "observer" => (Method::GET, "/v1/elections/e1/observe", None),
        "campaign" => (
            Method::POST,
            "/v1/elections/e2/campaign",
            Some(json!({"ttl_ms": 5000})),
        ),
        "hold" => (
            Method::POST,
            "/v1/locks/h1/hold",
            Some(json!({"ttl_ms": 5000})),
        ),
        "permit hold" => (
            Method::POST,
            "/v1/semaphores/s1/hold",
            Some(json!({"limit": 2, "ttl_ms": 5000})),
        ),
        other => panic!("no stream kind {other}"),
    };
    agent.stream(method, path, body).await
}

#[tokio::test]
async fn a_uid_gets_its_share_of_streams_and_a_closed_one_frees_its_slot() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    let mut observer = open(&agent, "observer").await;
    assert_eq!(observer.status, StatusCode::OK, "{:?}", observer.error);
    assert!(observer.next(Duration::from_secs(10)).await.is_some());
    let mut hold = open(&agent, "hold").await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    assert_eq!(
        hold.next(Duration::from_secs(10)).await.unwrap()["event"],
        "acquired"
    );

    for kind in ["observer", "campaign", "hold", "permit hold"] {
        let refused = open(&agent, kind).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{kind}");
        let error = refused.error.unwrap();
        assert_eq!(
            error["error"]["code"], "too_many_streams",
            "{kind}: {error}"
        );
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("(lock.max_streams_per_uid)"),
            "{kind}: {message}"
        );
    }
    // Refused before the masters: the third stream's lock and permit were
    // never taken.
    let (status, view) = agent.get("/v1/semaphores/s1").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["permits"], json!([]), "{view}");

    drop(observer);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut campaign = loop {
        let stream = open(&agent, "campaign").await;
        if stream.status == StatusCode::OK {
            break stream;
        }
        assert!(
            Instant::now() < deadline,
            "the closed observer's slot never served a campaign: {:?}",
            stream.error
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        campaign.next(Duration::from_secs(10)).await.unwrap()["event"],
        "elected"
    );
    drop(campaign);
    drop(hold);
    agent.stop().await;
}

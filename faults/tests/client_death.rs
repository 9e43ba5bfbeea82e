//! A client that dies in the middle of a hold: the kernel closes its
//! connection, and the agent must release the lock on every master at once
//! (docs/api.md, the hold: "closing the connection ... releases it on every
//! master at once"), not when the TTL runs out
//! or at the next renewal.

use std::process::Stdio;
use std::time::{Duration, Instant};

use faults::cluster::{AgentSettings, Cluster};
use faults::observer;
use tokio::io::{AsyncBufReadExt, BufReader};

/// SIGKILL a `faults hold-client` holding a 9s-TTL lock (renewed every
/// 3s): its key is gone from every master within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_hold_client_releases_at_once() {
    let settings = AgentSettings {
        key_prefix: "death:".into(),
        default_ttl: Duration::from_secs(9),
        max_ttl: Duration::from_secs(9),
        restart_extra: Duration::from_millis(200),
        ..AgentSettings::default()
    };
    let cluster = Cluster::start(3, 1, settings)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .wait_usable(3, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let socket = cluster.agents[0].lock().await.socket.clone();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_faults"))
        .args([
            "hold-client",
            "--resource",
            "doomed",
            "--ttl-ms",
            "9000",
            "--wait-ms",
            "0",
        ])
        .args(["--hold-ms", "60000", "--owner", "doomed", "--socket"])
        .arg(&socket)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap_or_default();
    let token = match line.split(' ').collect::<Vec<_>>().as_slice() {
        ["acquired", _, token, ..] => token.to_string(),
        _ => panic!("no hold: {line}"),
    };
    assert!(observer::token_present(&cluster.masters, "death:", &token).await);
    // Let the hold settle past its first write, as a long-running job would.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    child.start_kill().unwrap();
    let _ = child.wait().await;
    let mut gone = None;
    while killed.elapsed() < Duration::from_secs(15) {
        if !observer::token_present(&cluster.masters, "death:", &token).await {
            gone = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!("killed client's lock released after {gone:?}");
    let gone = gone.expect("the lock of the killed client was never released");
    assert!(
        gone < Duration::from_secs(1),
        "the lock of a killed client was released only after {gone:?}"
    );
}

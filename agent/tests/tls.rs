//! TLS masters, proven: real `redis-server` TLS listeners (`--tls-port`)
//! with a CA and certificates the test makes with the `openssl` CLI,
//! requiring client certificates (`tls-auth-clients yes`). The agent locks
//! through them with `tls_ca_file`, `tls_cert_file` and `tls_key_file`; a
//! wrong CA and a missing client certificate are refused.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{wait_for, TestAgent};
use hyper::StatusCode;
use redlock_testkit::RedisServer;
use serde_json::json;

/// Three masters, each with a plain port (for the test's own look and the
/// harness's PING) and a TLS port that demands a client certificate.
struct TlsCluster {
    masters: Vec<RedisServer>,
    certs: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsCluster {
    fn start() -> TlsCluster {
        let dir = tempfile::tempdir().unwrap();
        let certs = common::tls::certs_dir(dir.path());
        let masters = (1..=3)
            .map(|i| common::tls::master(dir.path(), &format!("r{i}"), &certs, true))
            .collect();
        TlsCluster {
            masters,
            certs,
            _dir: dir,
        }
    }

    /// Agent config YAML: every master over TLS with `fields` (file names
    /// in the certs dir) as its TLS settings.
    fn yaml(&self, socket: &Path, fields: &[(&str, &str)]) -> String {
        let mut yaml = format!(
            "socket:\n  path: {:?}\nmetrics:\n  listen: \"127.0.0.1:0\"\nhealth:\n  interval: 100ms\nmasters:\n",
            socket.display().to_string()
        );
        for server in &self.masters {
            let tls_port = server.tls_port().expect("a TLS port");
            yaml.push_str(&format!(
                "  - name: {}\n    url: rediss://127.0.0.1:{tls_port}\n",
                server.name()
            ));
            for (key, file) in fields {
                yaml.push_str(&format!(
                    "    {key}: {:?}\n",
                    self.certs.join(file).display().to_string()
                ));
            }
        }
        yaml
    }

    /// `GET key` over master `i`'s plain port.
    async fn get(&self, i: usize, key: &str) -> Option<String> {
        let mut conn = common::redis_at(&self.masters[i].url()).await;
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap()
    }
}

const CLIENT_CERT: [(&str, &str); 3] = [
    ("tls_ca_file", "ca.crt"),
    ("tls_cert_file", "client.crt"),
    ("tls_key_file", "client.key"),
];

/// With the CA and a client certificate the agent locks through TLS on
/// every master; the keys land on the masters.
#[tokio::test]
async fn locks_through_tls_masters_with_client_certificates() {
    let cluster = TlsCluster::start();
    let agent = TestAgent::start_with(|socket| cluster.yaml(socket, &CLIENT_CERT)).await;
    agent.wait_usable(3).await;
    let token = agent.acquire_ok("tls", json!({"ttl_ms": 5000})).await;
    for i in 0..3 {
        assert_eq!(
            cluster.get(i, "redlock:tls").await.as_deref(),
            Some(token.as_str())
        );
    }
    let (status, body) = agent
        .post(
            "/v1/locks/tls/extend",
            json!({"token": token, "ttl_ms": 6000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = agent
        .post("/v1/locks/tls/release", json!({"token": token}))
        .await;
    assert_eq!(body["released"], true);
    assert!(cluster.get(0, "redlock:tls").await.is_none());
}

/// A CA that did not sign the masters' certificates is refused, and so is
/// a connection without the client certificate the masters demand: every
/// master stays down with the reason, and nothing can be locked.
#[tokio::test]
async fn a_wrong_ca_or_no_client_certificate_is_refused() {
    let cluster = TlsCluster::start();
    let cases: [(&[(&str, &str)], &str); 2] = [
        (
            &[
                ("tls_ca_file", "other-ca.crt"),
                ("tls_cert_file", "client.crt"),
                ("tls_key_file", "client.key"),
            ],
            "invalid peer certificate: UnknownIssuer",
        ),
        (&[("tls_ca_file", "ca.crt")], "CertificateRequired"),
    ];
    for (fields, reason) in cases {
        let agent = TestAgent::start_with(|socket| cluster.yaml(socket, fields)).await;
        wait_for(
            &format!("every master down with {reason:?}"),
            Duration::from_secs(10),
            || async {
                let nodes = agent.nodes().await;
                nodes["nodes"].as_array().unwrap().iter().all(|n| {
                    n["state"] == "down"
                        && n["last_error"].as_str().is_some_and(|e| e.contains(reason))
                })
            },
        )
        .await;
        let nodes = agent.nodes().await;
        assert_eq!(nodes["usable"], 0, "{fields:?}: {nodes}");
        let (status, body) = agent.post("/v1/locks/x/acquire", json!({})).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["error"]["code"], "no_quorum");
        agent.stop().await;
    }
    assert!(cluster.get(0, "redlock:x").await.is_none());
}

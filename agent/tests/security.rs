//! Who may use which socket, proven with real clients under other uids:
//! `curl` run through `setpriv` as uid 65534 (and 65533) against the real
//! agent, which reads their credentials with `SO_PEERCRED`. Needs root
//! (to switch uids), as on the test machine and in CI.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NOBODY: u32 = 65534;
/// A uid with no account at all: the kernel does not care.
const STRANGER: u32 = 65533;

fn require_root() {
    // SAFETY: geteuid cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests switch uids with setpriv; run them as root (as CI does)"
    );
}

/// Lets other uids reach the agent's sockets: the temp dir is 0700.
fn open_dir(agent: &TestAgent) {
    let dir = agent.socket.parent().expect("the socket is in a dir");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `curl` as `uid` (and gid `uid`, no groups): status and JSON body.
async fn curl_as(uid: u32, socket: &Path, method: &str, path: &str, body: &str) -> (u16, Value) {
    let uid = uid.to_string();
    let output = tokio::process::Command::new("setpriv")
        .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "--"])
        .args(["curl", "-sS", "--max-time", "10", "--unix-socket"])
        .arg(socket)
        .args(["-X", method, "-H", "content-type: application/json"])
        .args(["--data-binary", body, "-w", "\n%{http_code}"])
        .arg(format!("http://localhost{path}"))
        .output()
        .await
        .expect("run setpriv and curl");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "curl as {uid} failed: {}{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (body, code) = text.rsplit_once('\n').expect("the status line");
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (code.parse().expect("a status code"), body)
}

fn refused_metric(text: &str, listener: &str, reason: &str) -> f64 {
    let series = format!(
        "redlock_connections_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series}in\n{text}"))
}

/// `socket.allow_uids` admits the listed uid and refuses another with 403
/// `forbidden` before reading its request; the refusal is counted.
#[tokio::test]
async fn a_uid_outside_socket_allow_uids_is_refused() {
    require_root();
    let cluster = Cluster::start(1);
    let agent = TestAgent::start_with(|socket| {
        cluster.config_yaml(socket, "").replacen(
            "socket:\n",
            &format!("socket:\n  mode: \"0666\"\n  allow_uids: [0]\n  allow_gids: [{STRANGER}]\n"),
            1,
        )
    })
    .await;
    open_dir(&agent);

    let (status, body) = curl_as(NOBODY, &agent.socket, "GET", "/v1/nodes", "").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("uid {NOBODY}")),
        "{body}"
    );
    // Admitted by its gid.
    let (status, body) = curl_as(STRANGER, &agent.socket, "GET", "/v1/nodes", "").await;
    assert_eq!(status, 200, "{body}");
    // Root is listed.
    assert_eq!(agent.get("/v1/nodes").await.unwrap().0, StatusCode::OK);

    let (_, metrics) = agent.get_tcp("/metrics").await;
    assert_eq!(refused_metric(&metrics, "app", "forbidden"), 1.0);
    assert_eq!(refused_metric(&metrics, "admin", "forbidden"), 0.0);
}

/// Force release is refused on the application socket, to every uid, with
/// a message naming the admin socket; the admin socket serves it only to
/// the uids in `admin.allow_uids`, and serves no lock operations.
#[tokio::test]
async fn force_release_only_on_the_admin_socket_and_only_for_listed_uids() {
    require_root();
    let cluster = Cluster::start(3);
    let agent = TestAgent::start_with(|socket| {
        cluster
            .config_yaml(
                socket,
                &format!("admin:\n  allow_uids: [{NOBODY}]\n  socket:\n    mode: \"0666\"\n"),
            )
            .replacen("socket:\n", "socket:\n  mode: \"0666\"\n", 1)
    })
    .await;
    open_dir(&agent);
    agent.acquire_ok("victim", json!({"ttl_ms": 30000})).await;
    let path = "/v1/locks/victim/force-release";

    // The application socket: refused to nobody and to root alike.
    let (status, body) = curl_as(NOBODY, &agent.socket, "POST", path, "").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&agent.admin.display().to_string()),
        "names the admin socket: {message}"
    );
    let (status, body) = agent.post(path, json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        cluster.get(0, "redlock:victim").await.is_some(),
        "nothing was deleted"
    );

    // The admin socket: root and a stranger are not listed.
    let (status, body) = agent.admin_post(path, json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    let (status, body) = curl_as(STRANGER, &agent.admin, "POST", path, "").await;
    assert_eq!(status, 403, "{body}");
    // Read-only views are served there to a listed uid, lock operations not.
    let (status, body) = curl_as(NOBODY, &agent.admin, "GET", "/v1/locks", "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["locks"][0]["resource"], "victim", "{body}");
    let (status, body) = curl_as(NOBODY, &agent.admin, "POST", "/v1/locks/x/acquire", "{}").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (403, &json!("forbidden")),
        "{body}"
    );
    // The listed uid force-releases.
    let (status, body) = curl_as(NOBODY, &agent.admin, "POST", path, "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deleted"], 3, "{body}");
    assert!(cluster.get(0, "redlock:victim").await.is_none());

    let (_, metrics) = agent.get_tcp("/metrics").await;
    assert_eq!(refused_metric(&metrics, "admin", "forbidden"), 2.0);
    assert!(
        metrics.contains("redlock_force_releases_total 1"),
        "{metrics}"
    );
}

/// With the default admin settings (mode 0600, no list) the file mode
/// decides: another uid cannot even connect, root can.
#[tokio::test]
async fn the_default_admin_socket_is_for_its_owner_only() {
    require_root();
    let cluster = Cluster::start(1);
    let agent = TestAgent::start_with(|socket| {
        cluster
            .config_yaml(socket, "")
            .replacen("socket:\n", "socket:\n  mode: \"0666\"\n", 1)
    })
    .await;
    open_dir(&agent);
    let mode = std::fs::metadata(&agent.admin)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let output = tokio::process::Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .args(["curl", "-sS", "--unix-socket"])
        .arg(&agent.admin)
        .arg("http://localhost/v1/locks")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success(), "nobody cannot connect");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("Permission denied")
            || String::from_utf8_lossy(&output.stderr).contains("Couldn't connect"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    agent.acquire_ok("a", json!({})).await;
    let (status, body) = agent
        .admin_post("/v1/locks/a/force-release", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["deleted"], 1);
}

/// One uid gets at most `socket.max_connections_per_uid` connections; the
/// refusal says which limit; another uid still gets in.
#[tokio::test]
async fn one_uid_cannot_take_every_connection() {
    require_root();
    let cluster = Cluster::start(1);
    let agent = TestAgent::start_with(|socket| {
        cluster.config_yaml(socket, "").replacen(
            "socket:\n",
            "socket:\n  mode: \"0666\"\n  max_connections: 10\n  max_connections_per_uid: 2\n",
            1,
        )
    })
    .await;
    open_dir(&agent);
    // The readiness probe's connection may still be closing: wait until
    // root has no connection open, then take two and keep them.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let kept = loop {
        let mut kept = Vec::new();
        for _ in 0..2 {
            let mut stream = tokio::net::UnixStream::connect(&agent.socket)
                .await
                .unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 12];
            if stream.read_exact(&mut buf).await.is_ok() && &buf == b"HTTP/1.1 200" {
                kept.push(stream);
            }
        }
        if kept.len() == 2 {
            break kept;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for two connections for root"
        );
        drop(kept);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut third = tokio::net::UnixStream::connect(&agent.socket)
        .await
        .unwrap();
    let mut answer = String::new();
    third.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too_many_connections"), "{answer}");
    assert!(
        answer.contains("socket.max_connections_per_uid"),
        "{answer}"
    );
    assert!(answer.contains("uid 0 "), "{answer}");

    let (status, body) = curl_as(NOBODY, &agent.socket, "GET", "/healthz", "").await;
    assert_eq!(status, 200, "another uid has its own share: {body}");
    let (_, metrics) = agent.get_tcp("/metrics").await;
    assert_eq!(
        refused_metric(&metrics, "app", "max_connections_per_uid"),
        1.0
    );
    drop(kept);
}

/// `/v1/locks` shows the holding process (pid, uid, gid, from the kernel)
/// and the agent's name for a lock taken through this agent, and only the
/// agent's name on another agent over the same masters; never the token.
#[tokio::test]
async fn locks_show_the_holding_process_and_agent() {
    let cluster = Cluster::start(3);
    let here = TestAgent::start(&cluster, "agent:\n  name: agent-here\n").await;
    let there = TestAgent::start(&cluster, "agent:\n  name: agent-there\n").await;
    let token = here.acquire_ok("who", json!({"owner": "billing"})).await;
    // `rl2-<40 hex random>-<16 hex check>`, then the agent and the owner.
    assert!(token.starts_with("rl2-"), "{token}");
    assert!(
        token[4..44].bytes().all(|b| b.is_ascii_hexdigit()),
        "{token}"
    );
    assert!(
        token[45..61].bytes().all(|b| b.is_ascii_hexdigit()),
        "{token}"
    );
    assert!(token.ends_with("@agent-here.billing"), "{token}");

    let locks = here.get("/v1/locks").await.unwrap().1;
    let lock = &locks["locks"][0];
    assert_eq!(lock["resource"], "who");
    assert_eq!(lock["agent"], "agent-here", "{locks}");
    assert_eq!(lock["owner"], "billing");
    assert_eq!(
        lock["pid"],
        std::process::id(),
        "this test process: {locks}"
    );
    // SAFETY: getuid/getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    assert_eq!(lock["uid"], uid);
    assert_eq!(lock["gid"], gid);
    assert!(
        !locks.to_string().contains(&token[4..44]),
        "never the token"
    );

    let locks = there.get("/v1/locks").await.unwrap().1;
    let lock = &locks["locks"][0];
    assert_eq!(lock["agent"], "agent-here", "{locks}");
    assert_eq!(lock["held_here"], false);
    assert!(lock.get("pid").is_none(), "{locks}");

    // A hold carries the name too, and the extend and release compare the
    // whole value.
    let (status, body) = here
        .post(
            "/v1/locks/who/extend",
            json!({"token": token, "ttl_ms": 20000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = here
        .post("/v1/locks/who/release", json!({"token": token}))
        .await;
    assert_eq!(body["released"], true);
}

/// The real binary, logging JSON to a file: a forbidden peer is logged
/// with its uid and pid, and a force release with the caller's uid and pid
/// and the holder it removed (agent, owner, uid, pid).
#[tokio::test]
async fn refusals_and_force_releases_are_logged_with_who() {
    require_root();
    let cluster = Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("agent.sock");
    let config = dir.path().join("config.yaml");
    let yaml = cluster
        .config_yaml(
            &socket,
            &format!(
                // The masters are fresh: no quarantine for their low uptime.
                "agent:\n  name: logged\nadmin:\n  allow_uids: [{NOBODY}]\n  socket:\n    mode: \"0666\"\ndelayed_restart:\n  enabled: false\n"
            ),
        )
        .replace("level: debug", "level: info")
        .replacen(
            "socket:\n",
            &format!("socket:\n  mode: \"0666\"\n  allow_uids: [0, {STRANGER}]\n"),
            1,
        );
    std::fs::write(&config, yaml).unwrap();
    let log = dir.path().join("agent.log");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlock-agent"))
        .arg("--config")
        .arg(&config)
        .args(["--log-format", "json"])
        .env_remove("REDLOCK_LOG")
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let admin = dir.path().join("admin.sock");
    common::wait_for("the agent to serve", Duration::from_secs(10), || async {
        matches!(
            common::request(&socket, hyper::Method::GET, "/healthz", bytes::Bytes::new()).await,
            Ok((StatusCode::OK, _))
        )
    })
    .await;

    // A forbidden peer.
    let (status, _) = curl_as(NOBODY, &socket, "GET", "/v1/nodes", "").await;
    assert_eq!(status, 403);
    // This process takes a lock; nobody force-releases it on the admin socket.
    let (status, body) = common::request(
        &socket,
        hyper::Method::POST,
        "/v1/locks/logged/acquire",
        bytes::Bytes::from(json!({"owner": "billing", "ttl_ms": 30000}).to_string()),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) =
        curl_as(NOBODY, &admin, "POST", "/v1/locks/logged/force-release", "").await;
    assert_eq!(status, 200, "{body}");

    let lines = || -> Vec<Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let find = |message: &str| {
        lines().into_iter().find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message))
        })
    };
    common::wait_for("both log lines", Duration::from_secs(10), || async {
        find("connection refused").is_some() && find("force release by an operator").is_some()
    })
    .await;
    let refused = find("connection refused").unwrap();
    assert_eq!(refused["fields"]["uid"], NOBODY.to_string(), "{refused}");
    assert!(
        refused["fields"]["pid"]
            .as_str()
            .unwrap()
            .parse::<u32>()
            .is_ok(),
        "{refused}"
    );
    let released = find("force release by an operator").unwrap();
    let f = &released["fields"];
    assert_eq!(f["caller_uid"], NOBODY.to_string(), "{released}");
    assert!(
        f["caller_pid"].as_str().unwrap().parse::<u32>().is_ok(),
        "{released}"
    );
    assert_eq!(f["holder_agent"], "logged", "{released}");
    assert_eq!(f["holder_owner"], "billing", "{released}");
    assert_eq!(f["holder_uid"], "0", "{released}");
    assert_eq!(
        f["holder_pid"],
        std::process::id().to_string(),
        "{released}"
    );
    let _ = child.kill().await;
}

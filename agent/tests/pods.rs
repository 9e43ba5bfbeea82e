//! Node mode on real masters: one agent serves every pod of a host on one
//! socket and keeps each pod's tokens to that pod (`socket.isolate: pod`).
//!
//! Two pods are made on this machine: each client process (`curl`, through
//! a shell that moves itself first) enters a cgroup laid out as the
//! kubelet's (one pod by the systemd driver, one by cgroupfs) before it
//! connects, so the agent tells them apart from `/proc/<pid>/cgroup` as it
//! would on a node. Where the cgroup v2 tree cannot be written (not root,
//! mounted read-only), the agent reads a fake proc tree instead (the
//! `REDLOCK_TEST_PROC_ROOT` switch) holding the same line for each client's
//! real pid; each test prints which it used. The cgroups are made at the
//! top of this machine's tree, `kubepods...` as on a node: run these tests
//! in a container or a VM, never on a node whose kubelet owns that tree.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::{Cluster, Switch, TestAgent};
use hyper::{Method, StatusCode};
use redlock_testkit::switches::PROC_ROOT;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const MASTERS: usize = 3;

/// Where the clients are put into pods.
enum Placement {
    /// Real cgroups under this cgroup v2 mount.
    Cgroups(PathBuf),
    /// `<dir>/<pid>/cgroup` files the agent reads through the switch.
    FakeProc(tempfile::TempDir),
}

/// One pod, or a cgroup that is no pod's.
struct Pod {
    /// Its UID, as the API shows it; empty for a cgroup outside pods.
    uid: String,
    /// Its container's ID.
    container: String,
    /// The cgroup path, as `/proc/<pid>/cgroup` shows it.
    cgroup: String,
}

/// This machine as a node: where its pods are, and an operators'
/// directory for the admin socket (outside the application socket's, as an
/// isolating agent demands).
struct Node {
    placement: Placement,
    ops: tempfile::TempDir,
    /// Cgroup directories made, deepest last.
    made: Vec<PathBuf>,
    _switch: Option<Switch>,
}

impl Node {
    /// Real cgroups when a probe process can be moved into one and shows
    /// there; the fake proc tree otherwise.
    async fn new() -> Node {
        let ops = tempfile::tempdir().unwrap();
        if let Some(mount) = cgroup2_mount() {
            let mut node = Node {
                placement: Placement::Cgroups(mount),
                ops,
                made: Vec::new(),
                _switch: None,
            };
            if node.probe().await {
                eprintln!("pods: real cgroups");
                return node;
            }
            node.remove_cgroups();
            let ops = std::mem::replace(&mut node.ops, tempfile::tempdir().unwrap());
            return Node::fake(ops);
        }
        Node::fake(ops)
    }

    fn fake(ops: tempfile::TempDir) -> Node {
        let root = tempfile::tempdir().unwrap();
        eprintln!("pods: a fake proc tree (the cgroup tree cannot be written here)");
        let switch = Switch::set(PROC_ROOT, &root.path().display().to_string());
        Node {
            placement: Placement::FakeProc(root),
            ops,
            made: Vec::new(),
            _switch: Some(switch),
        }
    }

    /// Whether a process moved into a pod's cgroup shows that cgroup.
    async fn probe(&mut self) -> bool {
        let pod = self.pod(Layout::Systemd);
        let Ok(mut child) = Command::new("sleep").arg("30").kill_on_drop(true).spawn() else {
            return false;
        };
        let pid = child.id().unwrap_or(0);
        let moved = std::fs::write(self.procs(&pod), pid.to_string()).is_ok();
        let seen = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let _ = child.kill().await;
        moved && seen.lines().any(|l| l == format!("0::{}", pod.cgroup))
    }

    /// A new pod with one container, laid out as `layout`.
    fn pod(&mut self, layout: Layout) -> Pod {
        let uid = uuid(rand::random());
        let container = hex(&rand::random::<[u8; 32]>());
        let cgroup = match layout {
            Layout::Systemd => {
                let underscored = uid.replace('-', "_");
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{underscored}.slice/cri-containerd-{container}.scope"
                )
            }
            Layout::Cgroupfs => format!("/kubepods/burstable/pod{uid}/{container}"),
            Layout::Host => format!(
                "/redlock-test-{}-{}.service",
                std::process::id(),
                &container[..8]
            ),
        };
        self.make(&cgroup);
        Pod {
            uid: if layout == Layout::Host {
                String::new()
            } else {
                uid
            },
            container,
            cgroup,
        }
    }

    /// Makes the cgroup (with real cgroups), retrying while another test
    /// removes a parent it found empty.
    fn make(&mut self, cgroup: &str) {
        let Placement::Cgroups(mount) = &self.placement else {
            return;
        };
        let dir = mount.join(cgroup.trim_start_matches('/'));
        for _ in 0..10 {
            let parent = dir.parent().unwrap();
            let _ = std::fs::create_dir_all(parent);
            match std::fs::create_dir(&dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("mkdir {}: {e}", dir.display()),
            }
        }
        // Its own directories, up to the mount, for removal.
        let mut ancestors: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| *d != mount.as_path())
            .map(Path::to_path_buf)
            .collect();
        ancestors.reverse();
        self.made.extend(ancestors);
    }

    fn procs(&self, pod: &Pod) -> PathBuf {
        match &self.placement {
            Placement::Cgroups(mount) => mount
                .join(pod.cgroup.trim_start_matches('/'))
                .join("cgroup.procs"),
            Placement::FakeProc(_) => PathBuf::new(),
        }
    }

    /// `program args...` run as a process of `pod`: a shell puts itself
    /// there, then becomes the program.
    fn command(&self, pod: &Pod, program: &str) -> Command {
        let mut command = Command::new("sh");
        match &self.placement {
            Placement::Cgroups(_) => {
                command
                    .args(["-c", r#"echo $$ > "$1" && shift && exec "$@""#, "sh"])
                    .arg(self.procs(pod));
            }
            Placement::FakeProc(root) => {
                command
                    .args([
                        "-c",
                        r#"mkdir -p "$1/$$" && printf '0::%s\n' "$2" > "$1/$$/cgroup" && shift 2 && exec "$@""#,
                        "sh",
                    ])
                    .arg(root.path())
                    .arg(&pod.cgroup);
            }
        }
        command.arg(program).kill_on_drop(true);
        command
    }

    /// One request from `pod` on `socket`: the status and the JSON answer,
    /// with the answer's text.
    async fn request(
        &self,
        pod: &Pod,
        socket: &Path,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value, String) {
        let mut command = self.command(pod, "curl");
        command
            .args(["--silent", "--show-error", "--unix-socket"])
            .arg(socket)
            .args(["--write-out", "\n%{http_code}", "-X", method.as_str()]);
        if let Some(body) = body {
            command
                .args(["-H", "content-type: application/json", "--data"])
                .arg(body.to_string());
        }
        let output = command
            .arg(format!("http://agent{path}"))
            .output()
            .await
            .expect("sh and curl run");
        let text = String::from_utf8(output.stdout).unwrap();
        let (answer, status) = text
            .rsplit_once('\n')
            .unwrap_or_else(|| panic!("{text}{}", String::from_utf8_lossy(&output.stderr)));
        let status = status.trim().parse().unwrap_or_else(|_| panic!("{text}"));
        let json = serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
        (status, json, answer.to_string())
    }

    /// A hold of `resource` from `pod`: the running client and the token
    /// of its `acquired` event.
    async fn hold(&self, pod: &Pod, socket: &Path, resource: &str) -> (Child, String) {
        let mut child = self
            .command(pod, "curl")
            .args(["--silent", "--no-buffer", "--unix-socket"])
            .arg(socket)
            .args([
                "-X",
                "POST",
                "-H",
                "content-type: application/json",
                "--data",
            ])
            .arg(json!({"ttl_ms": 20_000}).to_string())
            .arg(format!("http://agent/v1/locks/{resource}/hold"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh and curl run");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("the hold's first event in time")
            .unwrap()
            .expect("a first event");
        let event: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
        assert_eq!(event["event"], "acquired", "{event}");
        // Keep reading, so that the client never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (child, event["token"].as_str().unwrap().to_string())
    }

    /// An agent config over `cluster` with `socket.isolate: isolate` and
    /// the admin socket in the operators' directory.
    fn config(&self, cluster: &Cluster, socket: &Path, isolate: &str) -> String {
        let admin = self.ops.path().join("admin.sock");
        cluster
            .config_yaml(
                socket,
                &format!(
                    "admin:\n  socket:\n    path: {:?}\n",
                    admin.display().to_string()
                ),
            )
            .replacen("socket:\n", &format!("socket:\n  isolate: {isolate}\n"), 1)
    }

    fn remove_cgroups(&mut self) {
        // Deepest first; a parent another test still uses stays.
        for dir in self.made.drain(..).rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.remove_cgroups();
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The kubelet's systemd cgroup driver.
    Systemd,
    /// The kubelet's cgroupfs driver.
    Cgroupfs,
    /// A service of the host, in no pod.
    Host,
}

/// The mount point of the cgroup v2 tree, if any.
fn cgroup2_mount() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let fields: Vec<&str> = mount.split(' ').collect();
        (fs.split(' ').next() == Some("cgroup2") && fields.get(3) == Some(&"/"))
            .then(|| PathBuf::from(fields[4]))
    })
}

fn uuid(n: u128) -> String {
    let h = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How many masters hold `key` with `token`.
async fn held_with(cluster: &Cluster, key: &str, token: &str) -> usize {
    let mut n = 0;
    for i in 0..MASTERS {
        if cluster.get(i, key).await.as_deref() == Some(token) {
            n += 1;
        }
    }
    n
}

/// `redlock_connections_refused_total{listener="app",reason="unidentified"}`.
async fn unidentified(agent: &TestAgent) -> u64 {
    let (_, metrics) = agent.get_tcp("/metrics").await;
    let line = "redlock_connections_refused_total{listener=\"app\",reason=\"unidentified\"} ";
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {line}in {metrics}"))
}

/// The lock on `resource` in a `GET /v1/locks` answer.
fn listed<'a>(answer: &'a Value, resource: &str) -> &'a Value {
    answer["locks"]
        .as_array()
        .and_then(|locks| locks.iter().find(|l| l["resource"] == resource))
        .unwrap_or_else(|| panic!("{resource} not listed: {answer}"))
}

/// Pod B, with pod A's token, is refused extend, release and re-entry
/// with one answer, the same as for a token never granted, and the lock
/// stays on every master; the listings (from B, and on the admin socket)
/// show A's pod and container and never the token; A (another process of
/// it) extends and releases it, and is refused a re-entry only for being
/// another process.
#[tokio::test]
async fn a_pod_cannot_use_another_pods_token() {
    let cluster = Cluster::start(MASTERS);
    let mut node = Node::new().await;
    let (a, b) = (node.pod(Layout::Systemd), node.pod(Layout::Cgroupfs));
    let agent = TestAgent::start_with(|socket| node.config(&cluster, socket, "pod")).await;
    let socket = agent.socket.clone();
    let acquire = |token: Option<&str>| {
        let mut body = json!({"ttl_ms": 20_000});
        if let Some(token) = token {
            body["token"] = token.into();
        }
        body
    };

    let (status, grant, _) = node
        .request(
            &a,
            &socket,
            Method::POST,
            "/v1/locks/orders/acquire",
            Some(acquire(None)),
        )
        .await;
    assert_eq!(status, 200, "{grant}");
    let token = grant["token"].as_str().unwrap().to_string();
    // The same shape, never granted: one digit of the random part changed.
    let mut unknown = token.clone().into_bytes();
    unknown[4] = if unknown[4] == b'0' { b'1' } else { b'0' };
    let unknown = String::from_utf8(unknown).unwrap();

    let mut answers = Vec::new();
    for token in [&token, &unknown] {
        let mut these = Vec::new();
        for (action, body) in [
            ("extend", json!({"token": token, "ttl_ms": 20_000})),
            ("release", json!({"token": token})),
            ("acquire", acquire(Some(token))),
        ] {
            let path = format!("/v1/locks/orders/{action}");
            let (status, answer, _) = node
                .request(&b, &socket, Method::POST, &path, Some(body))
                .await;
            assert_eq!(
                (status, &answer["error"]["code"]),
                (403, &json!("forbidden")),
                "{action}: {answer}"
            );
            these.push(answer);
        }
        answers.push(these);
    }
    assert_eq!(
        answers[0], answers[1],
        "a held token and an unknown one get the same answers"
    );
    assert!(
        answers[0][0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this pod holds no lock, permit or leadership here with this token"),
        "{}",
        answers[0][0]
    );
    assert_eq!(
        held_with(&cluster, "redlock:orders", &token).await,
        MASTERS,
        "still held"
    );

    let (status, listing, text) = node
        .request(&b, &socket, Method::GET, "/v1/locks", None)
        .await;
    assert_eq!(status, 200, "{listing}");
    let lock = listed(&listing, "orders");
    assert_eq!(
        (&lock["pod"], &lock["container"]),
        (&json!(a.uid), &json!(a.container)),
        "{lock}"
    );
    assert!(
        !text.contains(&token[4..44]),
        "a listing shows no token: {text}"
    );
    let (status, one, text) = node
        .request(&b, &socket, Method::GET, "/v1/locks/orders", None)
        .await;
    assert_eq!((status, &one["lock"]["pod"]), (200, &json!(a.uid)), "{one}");
    assert!(!text.contains(&token[4..44]), "{text}");
    let (status, admin) =
        common::request(&agent.admin, Method::GET, "/v1/locks", Default::default())
            .await
            .unwrap();
    assert_eq!(
        (status, &listed(&admin, "orders")["pod"]),
        (StatusCode::OK, &json!(a.uid))
    );

    let (status, answer, _) = node
        .request(
            &a,
            &socket,
            Method::POST,
            "/v1/locks/orders/extend",
            Some(json!({"token": token, "ttl_ms": 20_000})),
        )
        .await;
    assert_eq!(
        (status, &answer["ttl_ms"]),
        (200, &json!(20_000)),
        "{answer}"
    );
    // Each request is another curl: past the pod's check, the re-entry
    // meets the process check.
    let (status, answer, _) = node
        .request(
            &a,
            &socket,
            Method::POST,
            "/v1/locks/orders/acquire",
            Some(acquire(Some(&token))),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("acquired by another process"),
        "{answer}"
    );
    let (status, answer, _) = node
        .request(
            &a,
            &socket,
            Method::POST,
            "/v1/locks/orders/release",
            Some(json!({"token": token})),
        )
        .await;
    assert_eq!(
        (status, &answer["released"]),
        (200, &json!(true)),
        "{answer}"
    );
    assert_eq!(
        held_with(&cluster, "redlock:orders", &token).await,
        0,
        "released by its pod"
    );
}

/// The control of the test above: without isolation (`socket.isolate:
/// none`, the sidecar's default) the same release from pod B goes
/// through, so that test would catch a missing check.
#[tokio::test]
async fn without_isolation_another_pod_releases_with_the_token() {
    let cluster = Cluster::start(MASTERS);
    let mut node = Node::new().await;
    let (a, b) = (node.pod(Layout::Systemd), node.pod(Layout::Cgroupfs));
    let agent = TestAgent::start_with(|socket| node.config(&cluster, socket, "none")).await;
    let socket = agent.socket.clone();
    let (status, grant, _) = node
        .request(
            &a,
            &socket,
            Method::POST,
            "/v1/locks/orders/acquire",
            Some(json!({"ttl_ms": 20_000})),
        )
        .await;
    assert_eq!(status, 200, "{grant}");
    let token = grant["token"].as_str().unwrap();
    let (status, answer, _) = node
        .request(
            &b,
            &socket,
            Method::POST,
            "/v1/locks/orders/release",
            Some(json!({"token": token})),
        )
        .await;
    assert_eq!(
        (status, &answer["released"]),
        (200, &json!(true)),
        "{answer}"
    );
    assert_eq!(held_with(&cluster, "redlock:orders", token).await, 0);
    let (_, listing, _) = node
        .request(&b, &socket, Method::GET, "/v1/locks", None)
        .await;
    assert!(listing["locks"].as_array().unwrap().is_empty(), "{listing}");
}

/// A pod's hold: listed with its pod, refused to another pod, and released
/// on every master the moment its client's connection closes.
#[tokio::test]
async fn a_pods_hold_ends_when_its_connection_closes() {
    let cluster = Cluster::start(MASTERS);
    let mut node = Node::new().await;
    let (a, b) = (node.pod(Layout::Cgroupfs), node.pod(Layout::Systemd));
    let agent = TestAgent::start_with(|socket| node.config(&cluster, socket, "pod")).await;
    let socket = agent.socket.clone();

    let (mut client, token) = node.hold(&a, &socket, "jobs").await;
    assert_eq!(held_with(&cluster, "redlock:jobs", &token).await, MASTERS);
    let (_, listing, _) = node
        .request(&b, &socket, Method::GET, "/v1/locks", None)
        .await;
    assert_eq!(listed(&listing, "jobs")["pod"], json!(a.uid), "{listing}");
    let (status, answer, _) = node
        .request(
            &b,
            &socket,
            Method::POST,
            "/v1/locks/jobs/release",
            Some(json!({"token": token})),
        )
        .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(held_with(&cluster, "redlock:jobs", &token).await, MASTERS);

    client.kill().await.unwrap();
    common::wait_for(
        "the hold's release on every master",
        Duration::from_secs(10),
        || async { held_with(&cluster, "redlock:jobs", &token).await == 0 },
    )
    .await;
}

/// A process in no pod (a service of the host) is answered 403 `forbidden`
/// before its first request, saying why, and counted; the admin socket
/// still serves it. The control: without isolation it is served.
#[tokio::test]
async fn a_process_in_no_pod_is_refused_at_accept() {
    let cluster = Cluster::start(MASTERS);
    let mut node = Node::new().await;
    let host = node.pod(Layout::Host);
    let agent = TestAgent::start_with(|socket| node.config(&cluster, socket, "pod")).await;
    // This test's own process is in no pod either: its probes while the
    // agent started were refused and counted too.
    let before = unidentified(&agent).await;
    let (status, answer, _) = node
        .request(&host, &agent.socket, Method::GET, "/healthz", None)
        .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (403, &json!("forbidden")),
        "{answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("socket.isolate is pod, and the pod of this peer")
            && message.contains("is not a Kubernetes pod's"),
        "{message}"
    );
    assert_eq!(unidentified(&agent).await, before + 1);
    let (status, _, _) = node
        .request(&host, &agent.admin, Method::GET, "/healthz", None)
        .await;
    assert_eq!(status, 200, "the admin socket is not isolated");
    agent.stop().await;

    let agent = TestAgent::start_with(|socket| node.config(&cluster, socket, "none")).await;
    let (status, answer, _) = node
        .request(&host, &agent.socket, Method::GET, "/healthz", None)
        .await;
    assert_eq!(status, 200, "{answer}");
}

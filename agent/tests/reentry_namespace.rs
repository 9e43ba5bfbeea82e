//! Re-entry with the agent in a pid namespace of its own, as a sidecar
//! container runs by default in Kubernetes: the kernel reports every
//! application process as pid 0, so the agent cannot tell one from
//! another, and no process re-enters a lock through it. The real binary
//! runs under `unshare --pid --fork` over real masters; the lock is
//! acquired by this process and re-entered by another (`curl`) with its
//! token. The control sets `REDLOCK_TEST_REENTRY_TRUSTS_PID_ZERO` and finds
//! the other process re-entering, and the first one's release then
//! answering "still held", as before the fix.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{wait_for, Cluster};
use hyper::StatusCode;
use redlock_client::{AcquireOptions, Client, Released};
use redlock_testkit::switches::REENTRY_TRUSTS_PID_ZERO;
use serde_json::{json, Value};

const MASTERS: usize = 3;

/// Long enough for any start or answer on a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// The agent binary in a new pid namespace, killed when dropped.
struct Agent {
    _child: tokio::process::Child,
    socket: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    /// Starts the agent over `cluster` in a pid namespace of its own;
    /// `trust_pid_zero` sets the control's test switch.
    async fn start(cluster: &Cluster, trust_pid_zero: bool) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        // The masters are fresh: no quarantine for their low uptime.
        let yaml = cluster
            .config_yaml(&socket, "delayed_restart:\n  enabled: false\n")
            .replace("level: debug", "level: info");
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, yaml).unwrap();
        let log = dir.path().join("agent.log");
        // `--kill-child`: the agent dies with `unshare`, which is killed
        // when this is dropped.
        let mut command = tokio::process::Command::new("unshare");
        command
            .args(["--pid", "--fork", "--kill-child"])
            .arg(env!("CARGO_BIN_EXE_redlock-agent"))
            .arg("--config")
            .arg(&config)
            .env_remove("REDLOCK_LOG")
            .env_remove(REENTRY_TRUSTS_PID_ZERO)
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true);
        if trust_pid_zero {
            command.env(REENTRY_TRUSTS_PID_ZERO, "1");
        }
        let child = command
            .spawn()
            .expect("unshare runs (util-linux; creating a pid namespace needs root)");
        let agent = Agent {
            _child: child,
            socket,
            log,
            _dir: dir,
        };
        let client = agent.client();
        wait_for("the agent to serve in its namespace", PATIENCE, || async {
            client.healthz().await.is_ok()
        })
        .await;
        agent
    }

    fn client(&self) -> Client {
        Client::new(&self.socket).with_timeout(PATIENCE)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// This process acquires `jobs`; another process re-enters it with the
/// token. Returns that answer and what this process's release came to.
async fn reentry_by_another_process(agent: &Agent) -> ((u16, Value), Released) {
    let client = agent.client();
    let grant = client
        .acquire("jobs", &AcquireOptions::new().ttl(Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", agent.log()));
    let (socket, body) = (agent.socket.clone(), json!({"token": grant.token}));
    // Off the runtime: the client above shares it.
    let other = tokio::task::spawn_blocking(move || {
        common::acquire_from_another_process(&socket, "jobs", &body)
    })
    .await
    .unwrap();
    let released = client.release_counted("jobs", &grant.token).await.unwrap();
    (other, released)
}

/// Another process is refused (403, the message saying why), the refused
/// re-entry counts nothing, and so is this process's own re-entry: the
/// agent cannot tell the two apart.
#[tokio::test]
async fn in_its_own_pid_namespace_no_process_reenters_another_ones_lock() {
    let cluster = Cluster::start(MASTERS);
    let agent = Agent::start(&cluster, false).await;
    let ((status, answer), released) = reentry_by_another_process(&agent).await;
    assert_eq!(status, StatusCode::FORBIDDEN.as_u16(), "{answer}");
    assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("pid namespace"), "{message}");
    assert_eq!(released, Released::Released, "nothing was counted");

    let client = agent.client();
    let grant = client
        .acquire("own", &AcquireOptions::new().ttl(Duration::from_secs(20)))
        .await
        .unwrap();
    let own = client
        .acquire("own", &AcquireOptions::new().reenter(grant.token.clone()))
        .await;
    let error = own.expect_err("pid 0 re-entered its own lock");
    assert_eq!(
        error.code(),
        Some(redlock_client::ErrorCode::Forbidden),
        "{error}"
    );
}

/// The control: with pid 0 taken for one process, another process
/// re-enters the lock, and the first one's release only lowers the count.
#[tokio::test]
async fn control_pid_zero_taken_for_one_process_lets_another_reenter() {
    let cluster = Cluster::start(MASTERS);
    let agent = Agent::start(&cluster, true).await;
    let ((status, answer), released) = reentry_by_another_process(&agent).await;
    assert_eq!(status, StatusCode::OK.as_u16(), "{answer}");
    assert_eq!(answer["hold_count"], 2, "{answer}");
    assert_eq!(released, Released::StillHeld(1));
}

//! `redlock-agent elect NAME -- cmd` with a real agent on real masters:
//! the command runs only while its campaigner leads, with the term in
//! `REDLOCK_TERM`; a second `elect` waits, and runs its command with a
//! larger term once the first stops; a lost leadership stops the
//! command's process, and `elect` exits 70.
//!
//! "Stopped" is checked by pid when `elect` has exited: `elect` exits only
//! after the command's tree is gone (as `lock` does), so no deadline needs
//! to fit a busy machine.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use redlock_agent::lock_command::tree::alive;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");
/// Probes every 100 ms: a flushed master is seen at once.
const FAST: &str = "health:\n  interval: 100ms\n  idle_interval: 100ms\n";

/// `elect --ttl 3s jobs -- sh -c ...`: the command writes its term to
/// `<tag>.term` and its pid to `<tag>.pid`, then sleeps.
fn start_elect(agent: &TestAgent, dir: &Path, tag: &str) -> Child {
    let script = format!(
        "cd {dir}; echo $$ > {tag}.pid; echo \"$REDLOCK_ELECTION $REDLOCK_TERM\" > {tag}.tmp; \
         mv {tag}.tmp {tag}.term; exec sleep 300",
        dir = dir.display()
    );
    let mut command = Command::new(BIN);
    command
        .arg("elect")
        .arg("--socket")
        .arg(&agent.socket)
        .args([
            "--ttl",
            "3s",
            "--kill-after",
            "1s",
            "--value",
            tag,
            "jobs",
            "--",
        ])
        .args(["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command.spawn().expect("start redlock-agent elect")
}

/// The term the command of `tag` was given, once it runs.
fn term_of(dir: &Path, tag: &str) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(format!("{tag}.term"))).ok()?;
    let (election, term) = text.trim().split_once(' ')?;
    assert_eq!(election, "jobs", "REDLOCK_ELECTION");
    term.parse().ok()
}

fn pid_of(dir: &Path, tag: &str) -> i32 {
    std::fs::read_to_string(dir.join(format!("{tag}.pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

async fn exit_of(child: Child) -> std::process::Output {
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

/// Two `elect`s: the first leads and runs its command; the second waits
/// without running its own. SIGTERM to the first stops its command and
/// resigns; the second runs its command with a larger term. Then its
/// masters lose their keys: its leadership is lost, its command stopped,
/// and it exits 70.
#[tokio::test]
async fn elect_runs_the_command_only_while_leading() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, FAST).await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();

    let first = start_elect(&agent, dir, "a");
    wait_for("the first command", Duration::from_secs(10), || async {
        term_of(dir, "a").is_some()
    })
    .await;
    let first_term = term_of(dir, "a").unwrap();
    let second = start_elect(&agent, dir, "b");
    wait_for("the second campaigner", Duration::from_secs(10), || async {
        waiting(&agent).await == 1
    })
    .await;
    assert!(
        term_of(dir, "b").is_none(),
        "a second command ran beside the leader's"
    );
    let (_, leader) = agent.get("/v1/elections/jobs").await.unwrap();
    assert_eq!(leader["value"], "a", "{leader}");
    assert_eq!(leader["term"], first_term, "{leader}");

    let first_pid = pid_of(dir, "a");
    // SAFETY: kill(2) on a process this test started.
    assert_eq!(unsafe { libc::kill(first.id() as i32, libc::SIGTERM) }, 0);
    let output = exit_of(first).await;
    assert!(
        !alive(first_pid),
        "the first command outlived its leadership"
    );
    assert!(!output.status.success(), "{output:?}");
    // Said of a leadership, not of a lock.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "stopped by SIGTERM; the command's processes were stopped and the leadership resigned"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("the lock"), "{stderr}");
    wait_for("the second command", Duration::from_secs(10), || async {
        term_of(dir, "b").is_some()
    })
    .await;
    let second_term = term_of(dir, "b").unwrap();
    assert!(second_term > first_term, "{second_term} after {first_term}");

    let second_pid = pid_of(dir, "b");
    for i in 0..2 {
        let mut redis = cluster.redis(i).await;
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut redis)
            .await
            .unwrap();
    }
    let output = exit_of(second).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("lost"), "{stderr}");
    assert!(
        stderr.contains("the leadership of election jobs was lost ("),
        "{stderr}"
    );
    assert!(!stderr.contains("the lock"), "{stderr}");
    assert!(
        !alive(second_pid),
        "the second command outlived its lost leadership"
    );
    agent.stop().await;
}

/// The agent's waiters, from `/v1/summary`: a campaigner in line is one.
async fn waiting(agent: &TestAgent) -> u64 {
    let (_, summary): (_, Value) = agent.get("/v1/summary").await.unwrap();
    summary["waiters"].as_u64().unwrap_or(0)
}

/// An operator's force release of the leadership (admin socket) stops the
/// leading `elect`'s command, and `elect` exits 70 saying the leadership
/// of the election was lost to a force release, never "the lock".
#[tokio::test]
async fn a_force_released_leadership_stops_the_command_and_says_so() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "").await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();

    let leader = start_elect(&agent, dir, "a");
    wait_for("the command", Duration::from_secs(10), || async {
        term_of(dir, "a").is_some()
    })
    .await;
    let pid = pid_of(dir, "a");
    let forced = agent
        .admin_client
        .force_release_leadership("jobs")
        .await
        .expect("force release of the leadership");
    assert_eq!(forced.deleted, 3, "{forced:?}");
    let output = exit_of(leader).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("the leadership of election jobs was lost (force_released)"),
        "{stderr}"
    );
    assert!(!stderr.contains("the lock"), "{stderr}");
    assert!(!alive(pid), "the command outlived its leadership");
    agent.stop().await;
}

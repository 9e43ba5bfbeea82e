//! A stopped `redlock-agent lock` (SIGSTOP, as a debugger or a frozen VM
//! would stop it) with a real agent on real masters: its command writes a
//! timestamp every 50 ms, `lock` is stopped, and the agent ends the hold at
//! `--max-hold` so that another client is granted the lock. The command's
//! guardian keeps the deadline `lock` told it, so the writes stop by the
//! end of the last validity `lock` could have been told (its TTL from the
//! stop) plus a margin, and before the other client's grant. The control
//! run turns the guardian's deadline off (`REDLOCK_TEST_NO_GUARDIAN_DEADLINE`)
//! and finds the command still writing past both, until `lock` is resumed.
//! The same for `redlock-agent elect`, whose command runs under the same
//! guardian: stopped, its command is killed by the end of the leadership's
//! last validity it could have been told.
//!
//! Margins, not races: the command is started well before `--max-hold`
//! runs out, every wait has a deadline, and the bounds leave a second and
//! a half for a busy machine.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{wait_for, Cluster, TestAgent};
use redlock_agent::lock_command::tree::alive;
use redlock_agent::lock_command::{DEADLINE_SWITCH, TREE_SWITCH};
use redlock_client::AcquireOptions;

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");
const LOCK: &str = "lock:\n  node_timeout: 100ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\n";
const RESOURCE: &str = "lk";
/// `lock`'s TTL: no validity it is told lasts longer.
const TTL: Duration = Duration::from_secs(1);
/// What a busy machine may add to the end of the last validity before the
/// last write lands.
const MARGIN: Duration = Duration::from_millis(1500);

/// `lock` and its command; `lock` is resumed and the command's process
/// group killed when dropped, whatever the test found.
struct Stopped {
    lock: Child,
    command: Option<i32>,
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let lock = i32::try_from(self.lock.id()).unwrap();
        // SAFETY: kill(2) on processes this test started.
        unsafe {
            libc::kill(lock, libc::SIGCONT);
            if let Some(command) = self.command {
                libc::kill(-command, libc::SIGKILL);
            }
        }
        let _ = self.lock.kill();
        let _ = self.lock.wait();
    }
}

fn signal(pid: u32, signal: i32) {
    let pid = i32::try_from(pid).unwrap();
    // SAFETY: kill(2) on a process this test started.
    assert_eq!(
        unsafe { libc::kill(pid, signal) },
        0,
        "kill({pid}, {signal})"
    );
}

fn nanos(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// The command's writes so far: wall-clock nanoseconds, one a line (a line
/// being written is left out).
fn writes(dir: &Path) -> Vec<u128> {
    std::fs::read_to_string(dir.join("w"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Which command runs the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    Elect,
}

/// `lock --ttl 1s --max-hold 3s lk -- sh -c 'while :; do date >> w; ...'`
/// (or `elect`), in a process group of its own, with the guardian's
/// deadline switched off for the control run.
fn start_lock(agent: &TestAgent, dir: &Path, kind: Kind, control: bool) -> Child {
    let script = format!(
        "cd {dir}; echo $$ > cmd.tmp; mv cmd.tmp cmd.pid; \
         while :; do date +%s%N >> w; sleep 0.05; done",
        dir = dir.display()
    );
    let stderr = std::fs::File::create(dir.join("lock.err")).unwrap();
    let mut command = Command::new(BIN);
    command
        .arg(match kind {
            Kind::Lock => "lock",
            Kind::Elect => "elect",
        })
        .arg("--socket")
        .arg(&agent.socket)
        .args(["--ttl", "1s", "--max-hold", "3s", "--kill-after", "200ms"])
        .args([RESOURCE, "--", "sh", "-c"])
        .arg(script)
        .env_remove(TREE_SWITCH)
        .env_remove(DEADLINE_SWITCH)
        .stdout(Stdio::null())
        .stderr(stderr);
    if control {
        command.env(DEADLINE_SWITCH, "1");
    }
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command.spawn().expect("start redlock-agent lock")
}

/// What the run found, in wall-clock nanoseconds.
struct Found {
    /// The end of the last validity `lock` could have been told: its TTL
    /// after it was stopped.
    validity_end: u128,
    /// When another client was granted the lock (`lock` only).
    granted: Option<u128>,
    /// The run itself, kept until the checks are done.
    stopped: Stopped,
    dir: tempfile::TempDir,
}

/// Starts `lock` (or `elect`), stops it once its command writes, and for
/// `lock` waits for another client to be granted the lock (the agent ends
/// the stopped `lock`'s hold at `--max-hold`).
async fn stop_lock(agent: &TestAgent, kind: Kind, control: bool) -> Found {
    let dir = tempfile::tempdir().unwrap();
    let mut stopped = Stopped {
        lock: start_lock(agent, dir.path(), kind, control),
        command: None,
    };
    let pid_file = dir.path().join("cmd.pid");
    wait_for("the command to write", Duration::from_secs(30), || async {
        pid_file.exists() && writes(dir.path()).len() >= 2
    })
    .await;
    stopped.command = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|pid| pid.trim().parse().ok());
    signal(stopped.lock.id(), libc::SIGSTOP);
    let validity_end = nanos(SystemTime::now() + TTL);
    if kind == Kind::Elect {
        return Found {
            validity_end,
            granted: None,
            stopped,
            dir,
        };
    }
    let grant = agent
        .client
        .acquire(
            RESOURCE,
            &AcquireOptions::new().wait(Duration::from_secs(30)),
        )
        .await;
    let granted = nanos(SystemTime::now());
    assert!(grant.is_ok(), "another client gets the lock: {grant:?}");
    Found {
        validity_end,
        granted: Some(granted),
        stopped,
        dir,
    }
}

fn stderr_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("lock.err")).unwrap_or_default()
}

/// `lock` (or `elect`) stopped with SIGSTOP: its guardian kills the
/// command by the end of the last validity (plus a margin), before another
/// client is granted the lock, and `lock`, resumed, says the lock was lost
/// (exit 70).
async fn stopped_then_killed(kind: Kind) {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let mut found = stop_lock(&agent, kind, false).await;
    let command = found.stopped.command.expect("the command's pid");
    wait_for(
        "the guardian to kill the command",
        Duration::from_secs(15),
        || async { !alive(command) },
    )
    .await;
    let last = *writes(found.dir.path()).last().expect("writes");
    let margin = MARGIN.as_nanos();
    assert!(
        last <= found.validity_end + margin,
        "the last write came {} ms after the end of the last validity\n{}",
        (last - found.validity_end) / 1_000_000,
        stderr_of(found.dir.path())
    );
    assert!(
        found.granted.is_none_or(|granted| last < granted),
        "the command wrote after another client was granted the lock\n{}",
        stderr_of(found.dir.path())
    );
    signal(found.stopped.lock.id(), libc::SIGCONT);
    let lock = &mut found.stopped.lock;
    let mut status = None;
    wait_for("lock to exit", Duration::from_secs(30), || {
        let done = lock.try_wait().unwrap();
        status = status.or(done);
        async move { done.is_some() }
    })
    .await;
    let stderr = stderr_of(found.dir.path());
    assert_eq!(status.and_then(|s| s.code()), Some(70), "{stderr}");
    assert!(stderr.contains("lost"), "{stderr}");
}

/// Without the guardian's deadline, the command of a stopped `lock` (or
/// `elect`) writes on past the end of the validity and past another
/// client's grant.
async fn stopped_and_writing_on(kind: Kind) {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let found = stop_lock(&agent, kind, true).await;
    let past = (found.validity_end + MARGIN.as_nanos()).max(found.granted.unwrap_or(0));
    wait_for(
        "writes past the validity and the other grant",
        Duration::from_secs(15),
        || async { writes(found.dir.path()).last().is_some_and(|&w| w > past) },
    )
    .await;
    assert!(
        stderr_of(found.dir.path()).contains(DEADLINE_SWITCH),
        "{}",
        stderr_of(found.dir.path())
    );
}

/// A stopped `lock`: its command is killed by the end of the validity,
/// before another client is granted the lock.
#[tokio::test]
async fn a_stopped_lock_does_not_let_its_command_outlive_the_validity() {
    stopped_then_killed(Kind::Lock).await;
}

/// Control: without the guardian's deadline, the command of a stopped
/// `lock` writes on past the validity and another client's grant.
#[tokio::test]
async fn control_without_the_guardians_deadline_the_command_writes_on() {
    stopped_and_writing_on(Kind::Lock).await;
}

/// A stopped `elect`: its command is killed by the end of the
/// leadership's last validity it could have been told.
#[tokio::test]
async fn a_stopped_elect_does_not_let_its_command_outlive_the_validity() {
    stopped_then_killed(Kind::Elect).await;
}

/// Control: without the guardian's deadline, the command of a stopped
/// `elect` writes on past the validity.
#[tokio::test]
async fn control_without_the_guardians_deadline_the_elected_command_writes_on() {
    stopped_and_writing_on(Kind::Elect).await;
}

//! `redlock-agent lock -- cmd` and the command's whole process tree, with a
//! real agent on real masters: two grandchildren of the command, one
//! backgrounded in its process group and one that double-forked out of it
//! with `setsid` and ignores SIGTERM, are gone after a force release, after
//! SIGTERM, SIGKILL or a process-group SIGKILL to `lock`, after
//! `--max-hold`, after the guardian is killed, when the command exits
//! leaving them behind, and, with `lock` the foreground job of a terminal
//! (under `script`), after a force release.
//!
//! "Gone" is checked by pid, at once, because it is an ordering claim, not
//! a timing one: `lock` exits only after its guardian, which exits only
//! once it has no descendant left; after a SIGKILL of `lock`, the lock is
//! released (or expires) only after that. So no deadline needs to fit a
//! busy machine.
//!
//! Every scenario has a control run with the test-only switch
//! `REDLOCK_TEST_NO_TREE_KILL=1` (`lock` signals only the command's own
//! process, as before): there, both grandchildren outlive `lock`, which
//! shows that each test can fail. The survivors are killed by pid.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use redlock_agent::lock_command::tree::{alive, descendants};
use redlock_agent::lock_command::TREE_SWITCH;
use redlock_client::AcquireOptions;

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");
const LOCK: &str = "lock:\n  node_timeout: 100ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\n";
const RESOURCE: &str = "tree";
/// Renewals every 3.3 s and a 9 s margin before `lock` stops on its own
/// clock: a busy machine cannot make `lock` think the lock is lost.
const TTL: &str = "10s";

/// How `lock`'s run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// An operator's force release on the admin socket.
    ForceRelease,
    /// `--max-hold 2s` runs out.
    MaxHold,
    /// SIGTERM to `lock`.
    Term,
    /// SIGKILL to `lock`.
    Kill,
    /// SIGKILL to `lock`'s process group, as `timeout -s KILL` sends.
    KillGroup,
    /// SIGKILL to the guardian, `lock`'s child.
    KillGuardian,
    /// The command exits with status 3, leaving the grandchildren behind.
    Exit,
}

/// The grandchildren's pids; in control runs, killed when dropped.
struct Grandchildren {
    in_group: i32,
    escaped: i32,
}

impl Grandchildren {
    fn alive(&self) -> (bool, bool) {
        (alive(self.in_group), alive(self.escaped))
    }
}

impl Drop for Grandchildren {
    fn drop(&mut self) {
        for pid in [self.in_group, self.escaped] {
            if !alive(pid) {
                continue;
            }
            // The one in the group is a shell over a `sleep` of its own.
            for below in descendants(pid).unwrap_or_default() {
                // SAFETY: kill(2) on a process this test started.
                unsafe { libc::kill(below.pid, libc::SIGKILL) };
            }
            // SAFETY: kill(2) on a process this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The command: a grandchild in its process group (a shell that writes
/// `bg.term` on SIGTERM and exits, over a `sleep` of its own), one that
/// double-forks (a subshell that exits) and calls `setsid`, ignoring
/// SIGTERM, each writing its pid to a file once its trap is set (renamed
/// into place, so a file that exists is complete); then it waits, or
/// exits 3 for [`End::Exit`].
/// The grandchildren do not keep `lock`'s stderr open: the test reads it
/// to its end.
fn script(dir: &Path, end: End) -> String {
    // Exits only once the escaped grandchild is set up, or the SIGTERM
    // to what it left could come before its `trap`.
    let last = if end == End::Exit {
        "while [ ! -e esc.pid ] || [ ! -e bg.pid ]; do sleep 0.05; done; exit 3"
    } else {
        "wait"
    };
    format!(
        "cd {dir}; sh -c 'trap \"echo TERM > bg.term; exit 0\" TERM; echo $$ > bg.tmp; mv bg.tmp bg.pid; \
           sleep 300 & wait' >/dev/null 2>&1 & \
         ( setsid sh -c 'trap \"\" TERM; echo $$ > esc.tmp; mv esc.tmp esc.pid; exec sleep 300' \
           </dev/null >/dev/null 2>&1 & ); \
         {last}",
        dir = dir.display()
    )
}

fn pid_in(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `lock --ttl 10s --kill-after 1s tree -- sh -c SCRIPT`, in a process
/// group of its own (so [`End::KillGroup`] hits `lock` and nothing of the
/// test), with the switch set for control runs.
fn start_lock(agent: &TestAgent, dir: &Path, end: End, control: bool) -> Child {
    let mut command = Command::new(BIN);
    command
        .arg("lock")
        .arg("--socket")
        .arg(&agent.socket)
        .args(["--ttl", TTL, "--kill-after", "1s"]);
    if end == End::MaxHold {
        command.args(["--max-hold", "2s"]);
    }
    command
        .args([RESOURCE, "--", "sh", "-c"])
        .arg(script(dir, end))
        .env_remove(TREE_SWITCH)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if control {
        command.env(TREE_SWITCH, "1");
    }
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command.spawn().expect("start redlock-agent lock")
}

/// The guardian: `lock`'s only child.
fn guardian_of(lock: u32) -> i32 {
    let lock = i32::try_from(lock).unwrap();
    let found = descendants(lock).unwrap();
    found
        .iter()
        .find(|p| p.ppid == lock)
        .unwrap_or_else(|| panic!("no child of lock {lock} in {found:?}"))
        .pid
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: kill(2) on a process (or group) this test started.
    assert_eq!(
        unsafe { libc::kill(pid, signal) },
        0,
        "kill({pid}, {signal})"
    );
}

async fn wait_exit(lock: Child) -> Output {
    tokio::task::spawn_blocking(move || lock.wait_with_output().unwrap())
        .await
        .unwrap()
}

/// Runs `lock` over the grandchildren's command, ends it as `end` says, and
/// returns the grandchildren's pids with whether each was alive at the
/// moment that counts: when `lock` exited, or, when `lock` was killed,
/// when another client was granted the lock.
async fn run(end: End, control: bool) -> (Grandchildren, (bool, bool)) {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let dir = tempfile::tempdir().unwrap();
    let lock = start_lock(&agent, dir.path(), end, control);
    let lock_pid = lock.id();
    let (bg, esc) = (dir.path().join("bg.pid"), dir.path().join("esc.pid"));
    wait_for(
        "both grandchildren to start",
        Duration::from_secs(30),
        || async { bg.exists() && esc.exists() },
    )
    .await;
    let grandchildren = Grandchildren {
        in_group: pid_in(&bg).expect("bg.pid"),
        escaped: pid_in(&esc).expect("esc.pid"),
    };
    assert_eq!(
        grandchildren.alive(),
        (true, true),
        "both grandchildren run under the lock"
    );
    let pid = i32::try_from(lock_pid).unwrap();
    match end {
        End::ForceRelease => {
            let released = agent.admin_client.force_release(RESOURCE).await;
            assert!(released.is_ok(), "force release: {released:?}");
        }
        End::MaxHold | End::Exit => {}
        End::Term => signal(pid, libc::SIGTERM),
        End::Kill => signal(pid, libc::SIGKILL),
        End::KillGroup => signal(-pid, libc::SIGKILL),
        End::KillGuardian => signal(guardian_of(lock_pid), libc::SIGKILL),
    }
    let output = wait_exit(lock).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    use std::os::unix::process::ExitStatusExt;
    let status = output.status;
    let at_end = match end {
        End::Kill | End::KillGroup => {
            // Another client gets the lock only once `lock`'s guardian has
            // released it (or it expired): the moment that counts.
            let grant = agent
                .client
                .acquire(
                    RESOURCE,
                    &AcquireOptions::new().wait(Duration::from_secs(30)),
                )
                .await;
            let at_grant = grandchildren.alive();
            assert!(grant.is_ok(), "a second client gets the lock: {grant:?}");
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{stderr}");
            at_grant
        }
        _ => {
            let at_exit = grandchildren.alive();
            match end {
                End::ForceRelease | End::MaxHold => {
                    assert_eq!(status.code(), Some(70), "{stderr}");
                    assert!(stderr.contains("lost"), "{stderr}");
                }
                End::Term => {
                    assert_eq!(status.signal(), Some(libc::SIGTERM), "{stderr}");
                    assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
                }
                End::KillGuardian => {
                    assert_eq!(status.code(), Some(128 + libc::SIGKILL), "{stderr}");
                    assert!(stderr.contains("guardian was killed"), "{stderr}");
                }
                End::Exit => {
                    assert_eq!(status.code(), Some(3), "{stderr}");
                    assert_eq!(
                        stderr.contains("left processes running"),
                        !control,
                        "{stderr}"
                    );
                }
                End::Kill | End::KillGroup => unreachable!(),
            }
            if matches!(end, End::Term | End::KillGuardian | End::Exit) {
                // Released before `lock` exited: free at once.
                let grant = agent.client.acquire(RESOURCE, &AcquireOptions::new()).await;
                assert!(
                    grant.is_ok(),
                    "released when lock exited: {grant:?}\n{stderr}"
                );
            }
            at_exit
        }
    };
    if control {
        assert!(stderr.contains(TREE_SWITCH), "{stderr}");
    }
    // A graceful stop reaches the command's whole group with SIGTERM first;
    // a killed `lock` or guardian means SIGKILL at once.
    let graceful = matches!(
        end,
        End::ForceRelease | End::MaxHold | End::Term | End::Exit
    );
    assert_eq!(
        dir.path().join("bg.term").exists(),
        graceful && !control,
        "the grandchild in the command's group got SIGTERM\n{stderr}"
    );
    (grandchildren, at_end)
}

/// The scenario with the tree kill: both grandchildren gone.
async fn gone(end: End) {
    let (_grandchildren, alive) = run(end, false).await;
    assert_eq!(
        alive,
        (false, false),
        "(in the command's group, escaped with setsid) alive after {end:?}"
    );
}

/// The control run: without the tree kill both grandchildren survive.
async fn survive(end: End) {
    let (_grandchildren, alive) = run(end, true).await;
    assert_eq!(
        alive,
        (true, true),
        "(in the command's group, escaped with setsid) alive after {end:?} without the tree kill"
    );
}

/// A force release on the admin socket: `lock` hears `lost`, exits 70,
/// and the grandchildren are gone when it does.
#[tokio::test]
async fn force_release_stops_the_commands_whole_tree() {
    gone(End::ForceRelease).await;
}

/// Control: without the tree kill, a force release leaves the grandchildren running.
#[tokio::test]
async fn control_force_release_without_the_tree_kill_leaves_grandchildren() {
    survive(End::ForceRelease).await;
}

/// `--max-hold` ends the hold with `lost`: the same as a force release.
#[tokio::test]
async fn max_hold_stops_the_commands_whole_tree() {
    gone(End::MaxHold).await;
}

/// Control: without the tree kill, `--max-hold` leaves the grandchildren running.
#[tokio::test]
async fn control_max_hold_without_the_tree_kill_leaves_grandchildren() {
    survive(End::MaxHold).await;
}

/// SIGTERM to `lock`: the tree is stopped (the escaped grandchild ignores
/// SIGTERM and gets SIGKILL after --kill-after), the lock released, and
/// `lock` dies by SIGTERM.
#[tokio::test]
async fn sigterm_to_lock_stops_the_commands_whole_tree() {
    gone(End::Term).await;
}

/// Control: without the tree kill, SIGTERM to `lock` leaves the grandchildren running.
#[tokio::test]
async fn control_sigterm_without_the_tree_kill_leaves_grandchildren() {
    survive(End::Term).await;
}

/// SIGKILL to `lock`: its guardian kills the tree, then releases; a
/// second client granted the lock finds no grandchild alive.
#[tokio::test]
async fn sigkill_to_lock_kills_the_commands_whole_tree_before_the_release() {
    gone(End::Kill).await;
}

/// Control: without the tree kill, the grandchildren outlive a SIGKILL of
/// `lock` and run beside the next holder.
#[tokio::test]
async fn control_sigkill_without_the_tree_kill_leaves_grandchildren() {
    survive(End::Kill).await;
}

/// SIGKILL to `lock`'s whole process group (what `timeout -s KILL` sends):
/// the guardian, in a group of its own, survives it and kills the tree.
#[tokio::test]
async fn sigkill_to_locks_process_group_kills_the_commands_whole_tree() {
    gone(End::KillGroup).await;
}

/// Control: without the tree kill, the grandchildren outlive a SIGKILL of
/// `lock`'s process group.
#[tokio::test]
async fn control_sigkill_to_the_group_without_the_tree_kill_leaves_grandchildren() {
    survive(End::KillGroup).await;
}

/// SIGKILL to the guardian: the command dies with it, and `lock`, a
/// subreaper too, inherits the rest of the tree and kills it before it
/// releases.
#[tokio::test]
async fn a_killed_guardian_leaves_the_tree_to_lock_which_kills_it() {
    gone(End::KillGuardian).await;
}

/// Control: without the tree kill, `lock` is no subreaper and the
/// grandchildren outlive the guardian.
#[tokio::test]
async fn control_killed_guardian_without_the_tree_kill_leaves_grandchildren() {
    survive(End::KillGuardian).await;
}

/// The command exits 3 leaving the grandchildren: `lock` stops them, says
/// so, releases, and exits 3.
#[tokio::test]
async fn leftovers_of_an_exited_command_are_stopped_before_the_release() {
    gone(End::Exit).await;
}

/// Control: without the tree kill, `lock` releases as soon as the command
/// exits and the grandchildren run on without the lock.
#[tokio::test]
async fn control_leftovers_without_the_tree_kill_run_on() {
    survive(End::Exit).await;
}

/// Runs `lock` as the foreground job of a terminal (under `script`, which
/// gives it a pseudo-terminal), its command reading a line from the
/// terminal before it starts the grandchildren; then force-releases.
/// Returns the command's `pgid sid`, the line it read, `lock`'s terminal
/// output, and the grandchildren (alive when `lock` exited).
async fn run_in_a_terminal(control: bool) -> (String, String, String, Grandchildren, (bool, bool)) {
    use std::io::Write;
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let dir = tempfile::tempdir().unwrap();
    let command = dir.path().join("command.sh");
    std::fs::write(
        &command,
        format!(
            "cut -d' ' -f5,6 /proc/$$/stat > {dir}/groups; read line; echo \"$line\" > {dir}/read; {}",
            script(dir.path(), End::ForceRelease),
            dir = dir.path().display()
        ),
    )
    .unwrap();
    let mut terminal = Command::new("script");
    terminal
        .args(["-qec"])
        .arg(format!(
            "{BIN} lock --socket {} --ttl {TTL} --kill-after 1s {RESOURCE} -- sh {}",
            agent.socket.display(),
            command.display()
        ))
        .arg("/dev/null")
        .env_remove(TREE_SWITCH)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if control {
        terminal.env(TREE_SWITCH, "1");
    }
    let mut terminal = terminal.spawn().expect("script(1) from util-linux");
    let mut keyboard = terminal.stdin.take().unwrap();
    let (bg, esc) = (dir.path().join("bg.pid"), dir.path().join("esc.pid"));
    wait_for(
        "the command to start in the terminal",
        Duration::from_secs(30),
        || async { dir.path().join("groups").exists() },
    )
    .await;
    keyboard.write_all(b"typed\n").unwrap();
    // A command in a background group would stop (SIGTTIN) at its `read`.
    wait_for(
        "both grandchildren to start after the read",
        Duration::from_secs(30),
        || async { bg.exists() && esc.exists() },
    )
    .await;
    let grandchildren = Grandchildren {
        in_group: pid_in(&bg).expect("bg.pid"),
        escaped: pid_in(&esc).expect("esc.pid"),
    };
    let released = agent.admin_client.force_release(RESOURCE).await;
    assert!(released.is_ok(), "force release: {released:?}");
    let output = tokio::task::spawn_blocking(move || {
        let output = terminal.wait_with_output().unwrap();
        drop(keyboard);
        output
    })
    .await
    .unwrap();
    let at_exit = grandchildren.alive();
    let screen = String::from_utf8_lossy(&output.stdout).into_owned();
    let read = |name: &str| {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    (read("groups"), read("read"), screen, grandchildren, at_exit)
}

/// In a terminal's foreground the command joins `lock`'s process group (so
/// it can read the terminal, and Ctrl-C reaches it), and its whole tree is
/// still stopped on a loss: found through the guardian alone.
#[tokio::test]
async fn in_a_terminals_foreground_the_command_shares_locks_group_and_its_tree_still_stops() {
    let (groups, read, screen, _grandchildren, alive) = run_in_a_terminal(false).await;
    let (pgid, sid) = groups.split_once(' ').expect("pgid sid");
    assert_eq!(
        pgid, sid,
        "the command is in the group of lock, the terminal's session leader"
    );
    assert_eq!(read, "typed", "the command read the terminal");
    assert!(screen.contains("lost"), "{screen}");
    assert_eq!(
        alive,
        (false, false),
        "alive after the force release\n{screen}"
    );
}

/// Control: in a terminal, without the tree kill, the escaped grandchild
/// runs on. (The one in the command's group dies anyway here: `lock` is
/// the session leader under `script`, and when it exits the kernel hangs
/// up the terminal's foreground group; under an interactive shell it would
/// run on too.)
#[tokio::test]
async fn control_in_a_terminal_without_the_tree_kill_leaves_the_escaped_grandchild() {
    let (_, _, screen, _grandchildren, alive) = run_in_a_terminal(true).await;
    assert!(screen.contains(TREE_SWITCH), "{screen}");
    assert!(
        alive.1,
        "escaped grandchild alive without the tree kill\n{screen}"
    );
}

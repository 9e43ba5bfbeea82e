//! A paused agent (SIGSTOP: a long GC-like pause, a starved or frozen
//! sidecar) cannot send `lost`. A hold client that only waits for `lost`
//! then runs on past its validity while another agent grants the lock to
//! someone else: Kleppmann's pause, one hop away from the client.
//! `redlock-agent lock` knows each event's `validity_ms`, so it can stop
//! its command when that runs out without a renewal.

use std::process::Stdio;
use std::time::Duration;

use faults::client::{AcquireOptions, Answer};
use faults::clock::Mono;
use faults::cluster::{agent_binary, AgentSettings, Cluster};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Agent a1 is frozen while `redlock-agent lock` holds a 600ms-TTL lock
/// through it; a client of agent a2 gets the lock once it expires. The
/// command under `lock` must have stopped by then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_agent_does_not_leave_the_lock_command_running() {
    let cluster = Cluster::start(3, 2, AgentSettings::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .wait_usable(3, Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (a1, a1_pid) = {
        let a = cluster.agents[0].lock().await;
        (a.socket.clone(), a.pid().unwrap())
    };
    let a2 = cluster.agents[1].lock().await.client();
    let mut lock = tokio::process::Command::new(agent_binary().unwrap())
        .args([
            "lock",
            "--ttl",
            "600ms",
            "--kill-after",
            "100ms",
            "--socket",
        ])
        .arg(&a1)
        .args(["paused", "--"])
        .arg(env!("CARGO_BIN_EXE_faults"))
        .args(["cs-child", "--ms", "8000"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(lock.stdout.take().unwrap()).lines();
    let enter = lines.next_line().await.unwrap().unwrap_or_default();
    assert!(enter.starts_with("enter "), "{enter}");

    // Freeze a1 (it cannot renew, nor say `lost`).
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(a1_pid as i32, libc::SIGSTOP) };
    let frozen = Mono::now();
    let granted = a2
        .acquire(
            "paused",
            &AcquireOptions::new()
                .ttl(Duration::from_millis(600))
                .wait(Duration::from_millis(5000))
                .owner("other"),
        )
        .await;
    let granted_at = Mono::now();
    // What the command did meanwhile: an `exit` line before the grant?
    let exited = tokio::time::timeout(Duration::from_millis(50), lines.next_line())
        .await
        .ok()
        .and_then(|l| l.ok().flatten());
    unsafe { libc::kill(a1_pid as i32, libc::SIGCONT) };
    assert!(matches!(granted, Ok(Answer::Ok(_))), "{granted:?}");
    let exit_at = exited
        .as_deref()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(Mono::from_wire);
    match exit_at {
        Some(t) if t <= granted_at => {}
        _ => panic!(
            "another client got the lock {:.0}ms after agent a1 froze, while the command \
             under `redlock-agent lock` still ran (it stops only on `lost`, which a frozen \
             agent cannot send); its next line: {exited:?}",
            granted_at.ms_after(frozen)
        ),
    }
}

//! `redlock-agent lock --fence`: the hold request asks for a fencing token
//! and the command gets the one the `acquired` event carries as
//! `REDLOCK_FENCE`; without the flag it asks for none and gets none.
//!
//! A stand-in agent on a temp socket answers the hold, so that this checks
//! what `lock` sends and exports whichever agent it talks to; the agent's
//! own fencing is tested against real masters where it is minted.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");

/// Accepts one connection on `socket`, reads one request, answers it with
/// a hold stream whose `acquired` line carries `fence` (when `Some`), and
/// keeps the stream open until `lock` closes it. Returns the request body.
fn stand_in_agent(socket: &Path, fence: Option<u64>) -> JoinHandle<String> {
    let listener = UnixListener::bind(socket).expect("bind the stand-in agent");
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("lock connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("a request head");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap();
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("the request body");
        let fence = fence.map_or(String::new(), |f| format!(",\"fence\":{f}"));
        let event = format!(
            "{{\"event\":\"acquired\",\"token\":\"{}\",\"validity_ms\":9000,\"ttl_ms\":10000{fence}}}\n",
            "ab".repeat(20)
        );
        let mut writer = stream;
        write!(
            writer,
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{event}\r\n",
            event.len()
        )
        .unwrap();
        // Until `lock` closes the hold (its command exited).
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest);
        String::from_utf8(body).unwrap()
    })
}

/// Runs `lock` with `args` on `socket`, its command writing what it got as
/// `REDLOCK_FENCE` (or `unset`) to `out`; returns the exit code.
fn run_lock(socket: &Path, args: &[&str], out: &Path) -> Option<i32> {
    let script = format!(
        "printf '%s' \"${{REDLOCK_FENCE-unset}}\" > '{}'",
        out.display()
    );
    let mut child = Command::new(BIN)
        .arg("lock")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .args(["fenced", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("lock did not exit within 20s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fence_is_asked_for_and_exported_to_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let out = dir.path().join("fence");
    let agent = stand_in_agent(&socket, Some(42));
    assert_eq!(run_lock(&socket, &["--fence"], &out), Some(0));
    let request: serde_json::Value = serde_json::from_str(&agent.join().unwrap()).unwrap();
    assert_eq!(request["fence"], true, "{request}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "42");
}

#[test]
fn without_the_flag_no_fence_is_asked_for_or_exported() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let out = dir.path().join("fence");
    let agent = stand_in_agent(&socket, None);
    assert_eq!(run_lock(&socket, &[], &out), Some(0));
    let request: serde_json::Value = serde_json::from_str(&agent.join().unwrap()).unwrap();
    assert_ne!(request["fence"], true, "{request}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "unset");
}

//! The binary: `check` on good and bad configs (exit 0 / 64, every error
//! with its path, secrets redacted), SIGTERM drain, and `dev`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/configs")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

/// Every invalid fixture exits 64 and prints each `# expect:` line.
#[test]
fn check_reports_every_problem_and_exits_64() {
    for file in fixtures("invalid") {
        let text = std::fs::read_to_string(&file).unwrap();
        let expected: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        assert!(
            !expected.is_empty(),
            "{} has no # expect: lines",
            file.display()
        );
        let out = Command::new(BIN)
            .arg("check")
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{}: {stderr}", file.display());
        for line in expected {
            assert!(
                stderr.contains(line),
                "{}: missing {line:?} in:\n{stderr}",
                file.display()
            );
        }
        assert!(
            !stderr.contains("inline-secret"),
            "a password leaked: {stderr}"
        );
    }
}

/// Valid fixtures and the example pass `check`, which prints the resolved
/// config with passwords redacted.
#[test]
fn check_accepts_valid_configs_and_redacts_secrets() {
    let mut files = fixtures("valid");
    files.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.example.yaml"));
    for file in files {
        let out = Command::new(BIN)
            .arg("check")
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {stderr}", file.display());
        assert!(!stdout.contains("s3cret"), "{stdout}");
        assert!(stdout.contains("max_ttl"), "{stdout}");
    }
}

/// Running with a bad config exits 64 before binding anything.
#[test]
fn run_with_a_bad_config_exits_64_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("a.sock");
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        format!(
            "socket: {{path: {:?}}}\nmasters: []\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(!socket.exists());
    let out = Command::new(BIN).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "no --config is a usage error");
}

fn wait_for_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn curl_like(socket: &Path, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

fn sigterm(pid: u32) {
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
}

/// `redlock-agent dev` starts real masters and serves locks on its socket;
/// SIGTERM stops the agent and every master and removes the socket.
#[test]
fn dev_serves_locks_on_real_masters_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("dev.sock");
    let mut child = Command::new(BIN)
        .args(["dev", "--metrics", "127.0.0.1:0", "--socket"])
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&socket, Duration::from_secs(30));
    let answer = curl_like(
        &socket,
        "POST /v1/locks/demo/acquire HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"token\""), "{answer}");
    let nodes = curl_like(
        &socket,
        "GET /v1/nodes HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
    );
    assert!(nodes.contains("\"usable\":5"), "{nodes}");

    sigterm(child.id());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the socket file is removed on shutdown");
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert!(stdout.contains("curl --unix-socket"), "{stdout}");
    // Every master it started is gone: their ports refuse connections.
    let ports: Vec<u16> = stdout
        .lines()
        .find(|l| l.contains("ports"))
        .unwrap()
        .split("ports ")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .split(", ")
        .map(|p| p.trim().parse().unwrap())
        .collect();
    assert_eq!(ports.len(), 5);
    for port in ports {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "master on {port} still runs"
        );
    }
}

/// A request waiting for a lock when SIGTERM arrives is answered at once
/// with 503 `shutting_down` (the lock it waits for is held far longer than
/// the drain), and the agent still exits cleanly.
#[test]
fn sigterm_answers_waiters_shutting_down() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("drain.sock");
    let mut child = Command::new(BIN)
        .args([
            "dev",
            "--masters",
            "1",
            "--metrics",
            "127.0.0.1:0",
            "--socket",
        ])
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&socket, Duration::from_secs(30));
    // Hold the resource, then ask again with a wait, so a request is in flight.
    let first = curl_like(
        &socket,
        "POST /v1/locks/d/acquire HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 17\r\n\r\n{\"ttl_ms\": 30000}",
    );
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let waiter_socket = socket.clone();
    let waiter = std::thread::spawn(move || {
        curl_like(
            &waiter_socket,
            "POST /v1/locks/d/acquire HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 17\r\n\r\n{\"wait_ms\": 5000}",
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    sigterm(child.id());
    let answer = waiter.join().unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("\"shutting_down\""),
        "the waiter was told the agent is shutting down: {answer}"
    );
    assert!(child.wait().unwrap().success());
}

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

/// Valid fixtures and the example pass `check --offline` (their masters do
/// not run: tests/check.rs connects to real ones), which prints the
/// resolved config with passwords redacted.
#[test]
fn check_accepts_valid_configs_and_redacts_secrets() {
    let mut files = fixtures("valid");
    files.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.example.yaml"));
    for file in files {
        let out = Command::new(BIN)
            .args(["check", "--offline"])
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {stderr}", file.display());
        assert!(!stdout.contains("s3cret"), "{stdout}");
        assert!(!stderr.contains("s3cret"), "{stderr}");
        if std::fs::read_to_string(&file).unwrap().contains("s3cret") {
            assert!(
                stdout.contains(":***@"),
                "the password shows as ***: {stdout}"
            );
        }
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

/// A config path that is not a regular file (a FIFO nobody writes to, a
/// device that never ends, a directory) is refused at once, exit 64,
/// saying what is there, by `check` (offline or not) and by the agent
/// itself, rather than read.
#[test]
fn a_config_path_that_is_not_a_regular_file_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    // The FIFO first: before the check, reading it waited for a writer
    // forever; /dev/zero is read until memory runs out.
    let cases = [
        (fifo.clone(), "a FIFO"),
        (PathBuf::from("/dev/zero"), "a character device"),
        (dir.path().to_path_buf(), "a directory"),
    ];
    for (path, what) in &cases {
        for args in [&["check"][..], &["check", "--offline"], &[]] {
            let (code, stderr) = run_args_to_exit(args, path, Duration::from_secs(10));
            assert_eq!(code, Some(64), "{args:?} {}: {stderr}", path.display());
            let expected = format!(
                "{} is {what}, not a regular file; give the path of a YAML file",
                path.display()
            );
            assert!(
                stderr.contains(&expected),
                "{args:?}: missing {expected:?} in {stderr}"
            );
        }
    }
}

/// Waits until the agent accepts connections on `path`: the file alone is
/// not enough, since it appears at bind(2), before listen(2).
fn wait_for_socket(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while std::os::unix::net::UnixStream::connect(path).is_err() {
        assert!(
            Instant::now() < deadline,
            "nobody answers on {}",
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
    wait_for_socket(&socket, Duration::from_secs(30));
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

/// The commands `redlock-agent dev` prints work when pasted into a shell
/// from another directory: full paths, quoted where the path needs it (the
/// socket's directory name here has a space).
#[test]
fn dev_prints_commands_that_work_when_pasted() {
    use std::io::BufRead;
    let dir = tempfile::Builder::new()
        .prefix("dev paste ")
        .tempdir()
        .unwrap();
    let socket = dir.path().join("agent.sock");
    let mut child = Command::new(BIN)
        .args([
            "dev",
            "--masters",
            "3",
            "--metrics",
            "127.0.0.1:0",
            "--socket",
        ])
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut printed = Vec::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let last = line.starts_with("Ctrl-C stops");
        printed.push(line);
        if last {
            break;
        }
    }
    wait_for_socket(&socket, Duration::from_secs(30));
    let commands: Vec<&String> = printed.iter().filter(|l| l.starts_with("  ")).collect();
    assert!(commands.len() >= 3, "{printed:#?}");
    let mut outputs = Vec::new();
    for command in &commands {
        let first = command.split_whitespace().next().unwrap();
        if first.contains("redlock-tui") {
            // Interactive: only check that it names the built binary.
            let path = first.trim_matches('\'');
            assert!(
                Path::new(path).is_absolute() && Path::new(path).is_file(),
                "{command}"
            );
            continue;
        }
        let output = Command::new("sh")
            .arg("-c")
            .arg(command.trim())
            .current_dir("/")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{command}: {output:?}");
        outputs.push(text);
    }
    let all = outputs.join("\n");
    assert!(all.contains("\"token\""), "the acquire: {all}");
    assert!(all.contains("\"usable\":3"), "the nodes: {all}");
    assert!(all.contains("holding report"), "the lock command: {all}");
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("To type them without the path: export PATH=")),
        "{printed:#?}"
    );
    sigterm(child.id());
    assert!(child.wait().unwrap().success());
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
    wait_for_socket(&socket, Duration::from_secs(30));
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

/// Start-up refuses, like `check`, two masters that reach one server, with
/// exit 64 before binding, naming both.
#[test]
fn run_refuses_one_server_listed_twice() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("a.sock");
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        format!(
            "socket: {{path: {:?}}}\nmasters:\n  - {{name: r1, url: \"redis://localhost:7001\"}}\n  - {{name: r2, url: \"redis://:pw-secret@127.0.0.1:7001/2\"}}\n  - {{name: r3, url: \"redis://127.0.0.1:7003\"}}\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("masters[1].url: r2 reaches the same server as masters[0].url (r1)"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("masters[2]"),
        "r3 is another server: {stderr}"
    );
    assert!(!stderr.contains("pw-secret"), "{stderr}");
    assert!(!socket.exists());
}

/// A config for an agent on `socket`; its master need not run, since the
/// socket is bound before any master is contacted.
fn socket_config(dir: &Path, socket: &Path) -> PathBuf {
    let config = dir.join("socket-test.yaml");
    std::fs::write(
        &config,
        format!(
            "socket: {{path: {:?}}}\nmetrics: {{listen: \"127.0.0.1:0\"}}\nmasters:\n  - {{name: r1, url: \"redis://127.0.0.1:1\"}}\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    config
}

/// Runs the agent on `config` and waits for it to exit (killing it after
/// `limit`, which fails the test): its exit code and stderr.
fn run_to_exit(config: &Path, limit: Duration) -> (Option<i32>, String) {
    run_args_to_exit(&[], config, limit)
}

/// As [`run_to_exit`], with `args` before `--config`.
fn run_args_to_exit(args: &[&str], config: &Path, limit: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

/// A regular file, a directory or a symbolic link (dangling or not) at
/// socket.path is left alone: the agent exits 1 naming the path and what
/// is there.
#[test]
fn run_leaves_anything_but_a_socket_at_the_socket_path_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "precious").unwrap();
    let directory = dir.path().join("dir");
    std::fs::create_dir(&directory).unwrap();
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();

    for (path, what) in [
        (&file, "a regular file"),
        (&directory, "a directory"),
        (&dangling, "a symbolic link"),
        (&link, "a symbolic link"),
    ] {
        let config = socket_config(dir.path(), path);
        let (code, stderr) = run_to_exit(&config, Duration::from_secs(30));
        assert_eq!(code, Some(1), "{}: {stderr}", path.display());
        let expected = format!(
            "socket.path {}: {what} is there, not a socket; remove it or choose another path",
            path.display()
        );
        assert!(
            stderr.contains(&expected),
            "missing {expected:?} in:\n{stderr}"
        );
        assert!(
            !stderr.contains("stale"),
            "{}: nothing was replaced: {stderr}",
            path.display()
        );
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert_eq!(
            meta.file_type().is_symlink(),
            what == "a symbolic link",
            "{} is still what it was",
            path.display()
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    assert!(directory.is_dir());
    assert_eq!(
        std::fs::read_link(&dangling).unwrap(),
        dir.path().join("nowhere")
    );
}

/// A socket another process listens on is refused (exit 1); a socket file
/// nobody answers on is replaced, and the agent serves there.
#[test]
fn run_replaces_only_a_socket_nobody_answers_on() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let config = socket_config(dir.path(), &socket);

    let live = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let (code, stderr) = run_to_exit(&config, Duration::from_secs(30));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "another agent is already listening on {}",
            socket.display()
        )),
        "{stderr}"
    );
    assert!(socket.exists(), "the live socket is kept");

    drop(live); // the file stays, with nobody behind it
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "the agent did not take over the stale socket"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the agent exited instead of replacing the stale socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let answer = curl_like(
        &socket,
        "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    sigterm(child.id());
    assert!(child.wait().unwrap().success());
}

/// `check` reports a host that does not resolve; `check --offline` (a file
/// checked away from its network) skips resolution and comparison.
#[test]
fn check_offline_skips_resolving_the_masters() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        "masters:\n  - {name: r1, url: \"redis://redis-1.invalid:6379\"}\n  - {name: r2, url: \"redis://redis-2.invalid:6379\"}\n  - {name: r3, url: \"redis://redis-3.invalid:6379\"}\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    for i in 0..3 {
        assert!(
            stderr.contains(&format!(
                "masters[{i}].url: cannot resolve \"redis-{}.invalid\"",
                i + 1
            )),
            "{stderr}"
        );
    }
    let out = Command::new(BIN)
        .args(["check", "--offline", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("ok (3 masters, quorum 2)"), "{stderr}");
}

/// A SIGTERM that comes the moment the socket exists drains the agent and
/// it exits 0: the handler is installed before the socket is bound, so the
/// signal's default action (killed by SIGTERM) never applies. Each start
/// signals as soon as the socket file appears; before the fix about half of
/// such starts died of the signal.
#[test]
fn sigterm_as_soon_as_the_socket_exists_still_drains() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("early.sock");
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        format!(
            "socket: {{path: {:?}}}\nmetrics: {{listen: \"127.0.0.1:0\"}}\nmasters:\n  - {{name: r1, url: \"redis://127.0.0.1:1/0\"}}\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    for start in 0..10 {
        let _ = std::fs::remove_file(&socket);
        let mut child = Command::new(BIN)
            .args(["--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        while !socket.exists() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "start {start}: the agent exited before binding its socket"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        sigterm(child.id());
        let status = child.wait().unwrap();
        assert!(status.success(), "start {start}: {status}");
    }
}

/// A password in a master URL shows nowhere in the agent's logs, text or
/// JSON, at debug level, while its master is unreachable (so connection
/// errors are logged too).
#[test]
fn logs_never_show_a_master_password() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        format!(
            "socket: {{path: {:?}}}\nmetrics: {{listen: \"127.0.0.1:0\"}}\nlog: {{level: debug}}\nmasters:\n  - {{name: r1, url: \"redis://agent:pw-secret@127.0.0.1:1/0\"}}\n",
            socket.display().to_string()
        ),
    )
    .unwrap();
    for format in ["text", "json"] {
        let mut child = Command::new(BIN)
            .args(["--log-format", format, "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_socket(&socket, Duration::from_secs(30));
        let answer = curl_like(
            &socket,
            "POST /v1/locks/x/acquire HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        sigterm(child.id());
        assert!(child.wait().unwrap().success());
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(stderr.contains("serving"), "{format}: {stderr}");
        assert!(stderr.contains("r1"), "{format}: {stderr}");
        assert!(!stderr.contains("pw-secret"), "{format}: {stderr}");
    }
}

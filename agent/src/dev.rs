//! `redlock-agent dev` (the `dev` feature, on by default): local
//! `redis-server` masters from `redlock-testkit` (the one master starter,
//! which the tests, the fault suite and the benchmark use too), a config
//! over them in a temp dir, and the agent on it. Part of the binary, not
//! the library.

use std::path::Path;
use std::process::ExitCode;

use redlock_agent::config::{AddressCheck, LogFormat, EXIT_CONFIG};
use redlock_testkit::RedisServer;

use crate::{load, serve_with};

/// The config YAML for an agent over `masters`, as `redlock-agent dev`
/// writes it.
fn config_yaml(socket: &Path, metrics: &str, masters: &[RedisServer]) -> String {
    let mut yaml = format!(
        "socket:\n  path: {:?}\nmetrics:\n  listen: {metrics:?}\nmasters:\n",
        socket.display().to_string()
    );
    for master in masters {
        yaml.push_str(&format!(
            "  - name: {}\n    url: {}\n",
            master.name(),
            master.url()
        ));
    }
    yaml
}

/// What `dev` prints to try: commands with full paths, to paste from any
/// directory (the TUI's when it was built beside this binary).
fn dev_commands(socket: &Path, admin: &Path) -> String {
    let s = shell_word(&socket.display().to_string());
    let a = shell_word(&admin.display().to_string());
    let mut out = format!(
        "Try it, from any directory:\n  \
         curl --unix-socket {s} -X POST localhost/v1/locks/demo/acquire -d '{{\"ttl_ms\": 10000}}'\n  \
         curl --unix-socket {s} localhost/v1/nodes\n"
    );
    let exe = std::env::current_exe().ok();
    if let Some(exe) = &exe {
        let agent = shell_word(&exe.display().to_string());
        out.push_str(&format!(
            "  {agent} lock --socket {s} --ttl 10s report -- sh -c 'echo \"holding $REDLOCK_RESOURCE\"'\n"
        ));
        let tui = exe.with_file_name("redlock-tui");
        if tui.is_file() {
            out.push_str(&format!(
                "  {} --socket {a}\n",
                shell_word(&tui.display().to_string())
            ));
        }
        if let Some(dir) = exe.parent() {
            out.push_str(&format!(
                "\nTo type them without the path: export PATH={}:\"$PATH\"\n",
                shell_word(&dir.display().to_string())
            ));
        }
    }
    out.push_str("\nCtrl-C stops the agent and every master.\n");
    out
}

/// Starts `count` masters and serves on them until Ctrl-C; every master
/// stops with it.
pub fn run(socket: &Path, count: usize, metrics: &str, format: Option<LogFormat>) -> ExitCode {
    if count == 0 {
        eprintln!("redlock-agent dev: --masters must be at least 1");
        return ExitCode::from(EXIT_CONFIG as u8);
    }
    let dir = match tempfile::Builder::new().prefix("redlock-dev-").tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("redlock-agent dev: cannot make a temp dir: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut masters = Vec::with_capacity(count);
    for i in 1..=count {
        match RedisServer::start(dir.path(), &format!("r{i}")) {
            Ok(server) => masters.push(server),
            Err(e) => {
                eprintln!("redlock-agent dev: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let socket = if socket.is_absolute() {
        socket.to_path_buf()
    } else {
        let relative = socket.strip_prefix(".").unwrap_or(socket);
        std::env::current_dir()
            .map(|d| d.join(relative))
            .unwrap_or_else(|_| socket.to_path_buf())
    };
    let yaml = config_yaml(&socket, metrics, &masters);
    let config_path = dir.path().join("config.yaml");
    if let Err(e) = std::fs::write(&config_path, &yaml) {
        eprintln!(
            "redlock-agent dev: cannot write {}: {e}",
            config_path.display()
        );
        return ExitCode::FAILURE;
    }
    let config = match load(&config_path, AddressCheck::Resolve) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let ports: Vec<String> = masters.iter().map(|m| m.port().to_string()).collect();
    println!(
        "redlock-agent dev: {count} masters on 127.0.0.1 ports {}; config {}\n\n{}",
        ports.join(", "),
        config_path.display(),
        dev_commands(&socket, &config.admin.socket.path),
    );
    let code = serve_with(config, format, true);
    drop(masters);
    code
}

/// `text` as one shell word: as it is when it is plain, else single-quoted.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:+=@%,".contains(&b));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

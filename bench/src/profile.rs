//! `perf` on the agent while the agent driver runs workload 1 at 64
//! clients: where the agent's CPU goes, as the top frames (self time) and
//! the top inclusive frames, and as a flame graph (`perf script` collapsed
//! and drawn by `inferno`).

use std::process::{Command, Stdio};
use std::time::Duration;

use inferno::collapse::Collapse;

use anyhow::{bail, Context};

use crate::cluster::{Agent, Masters, AGENT_DEFAULT};
use crate::peers::Peer;
use crate::plan::{self, Options};
use crate::spec::{Keys, Spec};

/// What a profile run produced.
pub struct Profile {
    /// The `perf report` views, in Markdown.
    pub text: String,
    /// The flame graph (SVG), or why there is none.
    pub flamegraph: Result<Vec<u8>, String>,
}

/// Profiles for `options.duration`.
///
/// # Errors
/// When `perf` is missing or cannot attach, or the run cannot start.
pub fn run(options: &Options) -> anyhow::Result<Profile> {
    let masters = Masters::start(plan::MASTERS, &options.scratch)?;
    let agent = Agent::start(
        &options.agent_bin,
        &options.scratch,
        "agent",
        &masters,
        AGENT_DEFAULT,
        &[],
        "",
    )?;
    let pid = agent.pid().context("the agent has no pid")?;
    // Kept (git-ignored) for a closer look: perf report -i bench/results/scratch/perf.data
    let data = options
        .scratch
        .parent()
        .unwrap_or(&options.scratch)
        .join("perf.data");
    let record_for = options.warmup + options.duration;
    let perf = Command::new("perf")
        .args([
            "record",
            "-F",
            "499",
            "-g",
            "--call-graph",
            "dwarf,16384",
            "-p",
            &pid.to_string(),
            "-o",
        ])
        .arg(&data)
        .args(["--", "sleep", &format!("{:.1}", record_for.as_secs_f64())])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start perf (apt install linux-perf)")?;
    std::thread::sleep(Duration::from_millis(300));
    let spec = Spec {
        peer: Peer::Agent.name().to_string(),
        masters: masters.urls(),
        socket: Some(agent.socket.display().to_string()),
        keys: Keys::Distinct,
        clients: 64,
        warmup_ms: options.warmup.as_millis() as u64,
        duration_ms: options.duration.as_millis() as u64,
        ttl_ms: plan::TTL_MS,
        resource_prefix: format!("profile{}", std::process::id()),
        tuned: false,
        fence: false,
        floor: false,
        python_client: None,
        rate: None,
    };
    let report = options
        .drivers
        .run(
            Peer::Agent,
            &spec,
            record_for + Duration::from_secs(30),
            None,
        )
        .map_err(anyhow::Error::msg)?;
    let recorded = perf.wait_with_output()?;
    if !recorded.status.success() {
        bail!(
            "perf record failed: {}",
            String::from_utf8_lossy(&recorded.stderr)
        );
    }
    drop(agent);
    let mut text = format!(
        "# Profile of redlock-agent under workload 1 (64 clients, distinct keys)\n\n\
         perf record -F 499 --call-graph dwarf on the agent for {:.1} s; {:.0} cycles/s while profiled \
         (perf slows it down), acquire p50 {:.2} ms. perf.data is kept in {}.\n",
        record_for.as_secs_f64(),
        report.cycles as f64 / report.window_s,
        report.acquire_ms.p50,
        data.display()
    );
    for (title, args, keep) in VIEWS {
        let out = Command::new("perf")
            .args(["report", "--stdio", "-g", "none", "-i"])
            .arg(&data)
            .args(*args)
            .output()
            .context("perf report")?;
        let body: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty() && keep(l))
            .map(|l| {
                l.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .chars()
                    .take(160)
                    .collect()
            })
            .take(30)
            .collect();
        text.push_str(&format!("\n## {title}\n\n```\n{}\n```\n", body.join("\n")));
    }
    let subtitle = format!(
        "perf record -F 499 --call-graph dwarf, {:.1} s; {:.0} cycles/s while profiled",
        record_for.as_secs_f64(),
        report.cycles as f64 / report.window_s
    );
    let flamegraph = flamegraph(&data, subtitle).map_err(|e| format!("{e:#}"));
    Ok(Profile { text, flamegraph })
}

/// Frames narrower than this share of the samples, in percent, are left
/// out of the flame graph.
const MIN_WIDTH_PCT: f64 = 0.1;

/// `perf script` of `data`, collapsed and drawn by `inferno`.
fn flamegraph(data: &std::path::Path, subtitle: String) -> anyhow::Result<Vec<u8>> {
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(data)
        .stderr(Stdio::null())
        .output()
        .context("perf script")?;
    if !script.status.success() || script.stdout.is_empty() {
        bail!("perf script failed ({})", script.status);
    }
    let mut folded = Vec::new();
    inferno::collapse::perf::Folder::from(inferno::collapse::perf::Options::default())
        .collapse(script.stdout.as_slice(), &mut folded)
        .context("collapsing perf script's stacks")?;
    let mut options = inferno::flamegraph::Options::default();
    options.title = "redlock-agent under W1, 64 clients (distinct keys)".into();
    options.subtitle = Some(format!(
        "{subtitle}; frames under {MIN_WIDTH_PCT}% left out"
    ));
    // Rust's generic frame names are long: without this the SVG is megabytes.
    options.min_width = MIN_WIDTH_PCT;
    let mut svg = Vec::new();
    inferno::flamegraph::from_reader(&mut options, folded.as_slice(), &mut svg)
        .context("drawing the flame graph")?;
    Ok(svg)
}

type View = (&'static str, &'static [&'static str], fn(&str) -> bool);

/// The `perf report` views: a title, the arguments, which lines to keep.
const VIEWS: &[View] = &[
    (
        "Where the time goes, by binary",
        &["--no-children", "--sort", "dso", "--percent-limit", "0.5"],
        |_| true,
    ),
    (
        "Top frames, self time",
        &["--no-children", "--sort", "sym", "--percent-limit", "0.7"],
        |_| true,
    ),
    (
        "System calls and scheduling, inclusive",
        &["--children", "--sort", "sym", "--percent-limit", "0.3"],
        syscall,
    ),
    (
        "The agent and its libraries, inclusive",
        &["--children", "--sort", "sym", "--percent-limit", "0.8"],
        agent_frame,
    ),
];

fn syscall(line: &str) -> bool {
    [
        "sock_write_iter",
        "tcp_sendmsg ",
        "unix_stream_sendmsg",
        "__x64_sys_recvfrom",
        "__x64_sys_read ",
        "tcp_recvmsg ",
        "unix_stream_recvmsg",
        "[k] schedule",
        "__x64_sys_futex",
        "__x64_sys_epoll_wait",
        "__x64_sys_getrandom",
        "finish_task_switch",
    ]
    .iter()
    .any(|k| line.contains(k))
}

/// Named frames of the agent and the libraries on its request path, without
/// the generic async plumbing around them.
fn agent_frame(line: &str) -> bool {
    const NAMES: [&str; 7] = [
        "redlock_agent::",
        "redis::",
        "hyper::",
        "serde_json::",
        "prometheus::",
        "tokio::time",
        "tokio::sync",
    ];
    const PLUMBING: [&str; 11] = [
        "poll<",
        "{closure",
        "call_once",
        "catch_unwind",
        "do_call",
        "poll_future",
        "with_mut",
        "poll_inner",
        "(inlined)",
        "{async_fn",
        "{async_block",
    ];
    NAMES.iter().any(|k| line.contains(k)) && !PLUMBING.iter().any(|k| line.contains(k))
}

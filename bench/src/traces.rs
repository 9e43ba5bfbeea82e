//! W12: what OpenTelemetry tracing costs the agent. W1 (distinct keys,
//! acquire + release) through two agents over the same masters: one with
//! tracing off, one with `tracing.sample_ratio: 1.0` (every cycle's spans
//! made and sent) to an OTLP/HTTP receiver in this process, which reads
//! each export and answers 200, as a collector on the same machine would.
//! The runs alternate, off then on, [`ROUNDS`] times per client count, so
//! both see the same machine; the agent's CPU (user + system, from
//! `/proc`) per cycle is summed over the rounds of each.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::{Agent, MasterSet, Masters, AGENT_DEFAULT};
use crate::cpu;
use crate::options::{Options, TTL_MS};
use crate::peers::Peer;
use crate::spec::{Keys, Spec};

/// Alternating off/on pairs per client count.
pub const ROUNDS: usize = 3;

/// W12's figures for one client count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub clients: usize,
    /// Cycles in the windows, grants over warm-ups and windows (what the
    /// CPU is divided by) and the agent's CPU seconds, over every round,
    /// tracing off.
    pub off_cycles: u64,
    pub off_grants: u64,
    pub off_cpu_s: f64,
    pub off_window_s: f64,
    /// The same with every request traced.
    pub on_cycles: u64,
    pub on_grants: u64,
    pub on_cpu_s: f64,
    pub on_window_s: f64,
}

impl Row {
    pub fn off_us_per_cycle(&self) -> f64 {
        per_cycle(self.off_cpu_s, self.off_grants)
    }

    pub fn on_us_per_cycle(&self) -> f64 {
        per_cycle(self.on_cpu_s, self.on_grants)
    }
}

fn per_cycle(cpu_s: f64, cycles: u64) -> f64 {
    if cycles == 0 {
        f64::NAN
    } else {
        cpu_s * 1e6 / cycles as f64
    }
}

/// W12's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tracing {
    pub rows: Vec<Row>,
    /// OTLP export requests the receiver answered.
    pub exports: u64,
}

/// Runs W12 over `masters`.
///
/// # Errors
/// When an agent or the receiver cannot be started, or a run fails.
pub fn measure(options: &Options, masters: &Masters) -> anyhow::Result<Tracing> {
    let exports = Arc::new(AtomicU64::new(0));
    let endpoint = receiver(Arc::clone(&exports))?;
    let off = Agent::start(
        &options.agent_bin,
        &options.scratch,
        "agent-untraced",
        masters,
        AGENT_DEFAULT,
        &[],
        "",
    )?;
    let on = Agent::start_with(
        &options.agent_bin,
        &options.scratch,
        "agent-traced",
        masters,
        &format!("tracing: {{otlp_endpoint: \"{endpoint}\", sample_ratio: 1.0}}\n"),
    )?;
    let client_counts: &[usize] = if options.smoke { &[1] } else { &[1, 64] };
    let mut rows = Vec::new();
    let mut run_id = 0;
    for &clients in client_counts {
        let mut row = Row {
            clients,
            off_cycles: 0,
            off_grants: 0,
            off_cpu_s: 0.0,
            off_window_s: 0.0,
            on_cycles: 0,
            on_grants: 0,
            on_cpu_s: 0.0,
            on_window_s: 0.0,
        };
        for _ in 0..ROUNDS {
            for (agent, traced) in [(&off, false), (&on, true)] {
                run_id += 1;
                let (cycles, grants, cpu_s, window_s) =
                    run(options, masters, agent, clients, run_id)?;
                eprintln!(
                    "{:<40} {:<14} {:>9.0} cycles/s  agent {:.1} µs CPU per cycle",
                    format!(
                        "W12 tracing {}, {clients} client(s)",
                        if traced { "on" } else { "off" }
                    ),
                    "agent",
                    cycles as f64 / window_s,
                    per_cycle(cpu_s, grants)
                );
                if traced {
                    row.on_cycles += cycles;
                    row.on_grants += grants;
                    row.on_cpu_s += cpu_s;
                    row.on_window_s += window_s;
                } else {
                    row.off_cycles += cycles;
                    row.off_grants += grants;
                    row.off_cpu_s += cpu_s;
                    row.off_window_s += window_s;
                }
            }
        }
        rows.push(row);
    }
    Ok(Tracing {
        rows,
        exports: exports.load(Ordering::Relaxed),
    })
}

/// One W1 run through `agent`: its cycles in the window, its grants over
/// the warm-up and window with the agent's CPU seconds over the same span
/// (as W1's figures), and the window's length.
fn run(
    options: &Options,
    masters: &Masters,
    agent: &Agent,
    clients: usize,
    run_id: usize,
) -> anyhow::Result<(u64, u64, f64, f64)> {
    let spec = Spec {
        peer: Peer::Agent.name().to_string(),
        masters: masters.urls(),
        socket: Some(agent.socket.display().to_string()),
        keys: Keys::Distinct,
        clients,
        warmup_ms: options.warmup.as_millis() as u64,
        duration_ms: options.duration.as_millis() as u64,
        ttl_ms: TTL_MS,
        resource_prefix: format!("bench{}-w12-{run_id}", std::process::id()),
        tuned: false,
        fence: false,
        floor: false,
        python_client: None,
        rate: None,
    };
    let processes = masters.processes().unwrap_or_default();
    let before = cpu::sample(&processes, agent.pid());
    let timeout = options.warmup + options.duration + Duration::from_secs(30);
    let report = options
        .drivers
        .run(Peer::Agent, &spec, timeout, None)
        .map_err(|e| anyhow::anyhow!("W12 run: {e}"))?;
    let used = cpu::between(&processes, &before, &cpu::sample(&processes, agent.pid()));
    let cpu_s = used
        .and_then(|c| c.agent_s)
        .ok_or_else(|| anyhow::anyhow!("W12: the agent's CPU could not be read"))?;
    anyhow::ensure!(
        report.errors == 0 && report.cycles > 0,
        "W12: {} errors, {} cycles",
        report.errors,
        report.cycles
    );
    Ok((report.cycles, report.grants_total, cpu_s, report.window_s))
}

/// An OTLP/HTTP receiver on a free loopback port: reads each request
/// whole and answers `200` with an empty body, counting them; its base URL.
fn receiver(exports: Arc<AtomicU64>) -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let endpoint = format!("http://{}", listener.local_addr()?);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let exports = Arc::clone(&exports);
            std::thread::spawn(move || serve(stream, &exports));
        }
    });
    Ok(endpoint)
}

/// Serves one keep-alive connection until it closes or sends what is not
/// HTTP/1.1 with a `content-length`.
fn serve(stream: TcpStream, exports: &AtomicU64) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        exports.fetch_add(1, Ordering::Relaxed);
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

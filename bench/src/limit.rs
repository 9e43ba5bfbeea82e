//! The masters' own limit: `redis-benchmark` on all five masters at once,
//! pipelined, sending what an agent cycle sends each master when nothing
//! else is queued: its batch script by SHA with one vote (the in-vote marker
//! check and `SET key token NX GET PX ttl`), and again with one release,
//! with the marker key present. Under load the agent sends several commands
//! per call, which costs the masters less per command than this.
//!
//! Two `redis-benchmark` processes per master (one per command, same
//! request count, started together); a cycle needs both commands on every
//! master, so the cycles/s the masters can serve is the slowest process's
//! rate. The keys are random in a shared space, so about half the releases
//! find their key (and delete and publish) and half do not, and an acquire
//! that finds its key (same token: redis-benchmark cannot vary it) renews
//! it with a `PEXPIRE` where the agent, with a fresh token, would stop at
//! the `SET`. The two roughly cancel; the limit is an estimate, not a bound.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::cluster::Masters;

const CLIENTS: &str = "25";
const PIPELINE: &str = "16";
const KEYSPACE: &str = "100000";

#[derive(Debug, Clone, Serialize)]
pub struct Limit {
    /// Cycles per second all five masters served together.
    pub cycles_per_s: f64,
    /// Each process's requests per second (master, command, rps).
    pub processes: Vec<(String, String, f64)>,
    pub requests_per_process: u64,
    pub wall_s: f64,
    pub command_line: String,
}

/// The marker key the acquire script checks; set on every master first.
const MARKER: &str = "bench-limit incarnation";

/// The fencing counter key the batch script is given (it reads it only for
/// a fenced vote).
const FENCE: &str = "bench-limit fence";

/// The SHA of the agent's batch script, loaded on every master.
struct Shas {
    batch: String,
}

/// Measures for about `duration` (after a 1 s calibration).
///
/// # Errors
/// When a script is missing or cannot be loaded, or redis-benchmark fails.
pub fn measure(masters: &Masters, duration: Duration, batch_script: &str) -> anyhow::Result<Limit> {
    if batch_script.is_empty() {
        bail!("cannot find the agent's batch script in agent/src/node/conn.rs");
    }
    let shas = Shas {
        batch: masters.load_script(batch_script)?,
    };
    masters.set_everywhere(MARKER, "bench")?;
    // Calibrate: a small run to size the real one.
    let probe = run_all(masters, &shas, 20_000)?;
    let rate = probe
        .processes
        .iter()
        .map(|p| p.2)
        .fold(f64::INFINITY, f64::min);
    let requests = ((rate * duration.as_secs_f64()) as u64).max(20_000);
    run_all(masters, &shas, requests)
}

fn run_all(masters: &Masters, shas: &Shas, requests: u64) -> anyhow::Result<Limit> {
    let n = requests.to_string();
    let mut children = Vec::new();
    let started = Instant::now();
    let mut command_line = String::new();
    for (i, port) in masters.ports.iter().enumerate() {
        let key = format!("bench-limit-{i}:__rand_int__");
        let flag = format!("bench-limit-{i}: waiting __rand_int__");
        // KEYS: the marker, the counter, then the command's lock key and
        // waiting flag (the release deletes it; the vote does not wait).
        // ARGV: the marker checked, `SET ... GET` (as the agent sends it to
        // a Redis 7 master), then one command: its letter, the token, a
        // number (the TTL) and one more (no counter, no wait; the release
        // channel).
        let call = |letter: &str, number: &str, more: &str| -> Vec<String> {
            let flag = if letter == "r" { &flag } else { &key };
            [
                "EVALSHA",
                &shas.batch,
                "4",
                MARKER,
                FENCE,
                &key,
                flag,
                "1",
                "1",
                letter,
                "token",
                number,
                more,
            ]
            .map(String::from)
            .to_vec()
        };
        let commands: [(&str, Vec<String>); 2] = [
            ("acquire", call("v", "10000", "0")),
            ("release", call("r", "0", "bench-limit:released")),
        ];
        for (what, args) in commands {
            let mut command = Command::new("redis-benchmark");
            command
                .args(["-h", "127.0.0.1", "-p", &port.to_string()])
                .args([
                    "-c", CLIENTS, "-P", PIPELINE, "-n", &n, "-r", KEYSPACE, "--csv",
                ])
                .args(&args);
            if command_line.is_empty() {
                command_line = format!(
                    "redis-benchmark -p PORT -c {CLIENTS} -P {PIPELINE} -n {n} -r {KEYSPACE} --csv {}",
                    args.join(" ")
                );
            }
            let child = command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .context("cannot start redis-benchmark (apt install redis-tools)")?;
            children.push((format!("r{}", i + 1), what.to_string(), child));
        }
    }
    let mut processes = Vec::new();
    for (master, what, child) in children {
        let output = child.wait_with_output()?;
        if !output.status.success() {
            bail!(
                "redis-benchmark on {master} ({what}) failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let rps = parse_csv_rps(&String::from_utf8_lossy(&output.stdout)).with_context(|| {
            format!("no rate in redis-benchmark's output for {master} ({what})")
        })?;
        processes.push((master, what, rps));
    }
    let wall_s = started.elapsed().as_secs_f64();
    let cycles_per_s = processes.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
    Ok(Limit {
        cycles_per_s,
        processes,
        requests_per_process: requests,
        wall_s,
        command_line,
    })
}

/// The `rps` column of redis-benchmark's `--csv` output.
fn parse_csv_rps(text: &str) -> Option<f64> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()?
        .split(',')
        .map(|f| f.trim_matches('"').to_string())
        .collect();
    let column = header.iter().position(|h| h == "rps")?;
    let row = lines.next()?;
    // The test name may contain commas; count columns from the right.
    let fields: Vec<&str> = row.rsplitn(header.len(), "\",\"").collect();
    let from_right = header.len() - 1 - column;
    fields.get(from_right)?.trim_matches('"').parse().ok()
}

/// The Lua texts of `agent/src/node/conn.rs` that make the agent's
/// batch script, in order: the shared `evicted_keys` function, then the
/// batch itself (see `batch` there).
pub const BATCH: [&str; 2] = ["EVICTED_KEYS_SOURCE", "BATCH_SOURCE"];

/// One of the agent's scripts, put together from its Lua texts (`parts`:
/// the names of their constants), read from its source so the limit runs
/// what the agent runs; empty when one is not found.
pub fn agent_script(parts: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/src/node/conn.rs");
    let source = std::fs::read_to_string(&path).unwrap_or_default();
    let text = |name: &str| {
        source
            .split_once(&format!("const {name}: &str = r#\""))
            .and_then(|(_, rest)| rest.split_once("\"#"))
            .map(|(lua, _)| lua.to_string())
    };
    parts
        .iter()
        .map(|name| text(name))
        .collect::<Option<String>>()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_rps_column() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"SET k:__rand_int__ token NX GET PX 10000\",\"123456.78\",\"1.000\",\"0.100\",\"0.900\",\"2.000\",\"3.000\",\"9.000\"\n";
        assert_eq!(super::parse_csv_rps(csv), Some(123456.78));
    }

    #[test]
    fn the_agent_scripts_are_found() {
        let batch = super::agent_script(&super::BATCH);
        assert!(
            batch.starts_with("local function evicted_keys()"),
            "{batch}"
        );
        assert!(batch.contains("redis.call(\"del\", key"), "{batch}");
        assert!(batch.contains("redis.call(\"get\", KEYS[1])"), "{batch}");
        assert!(batch.contains("\"NX\", \"GET\", \"PX\""), "{batch}");
    }
}

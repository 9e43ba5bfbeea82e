//! CPU time of the masters' `redis-server` processes and of the agent
//! during a run, from `/proc/PID/stat` (user + system): W1's cost of a
//! cycle (with the socket's floor), and W9's cost of a grant per shard,
//! from which the report projects what more shards buy. A Rust driver
//! reads its own with [`own_cpu_seconds`].
//!
//! The figures cover the same span as the Redis command counts (the
//! driver's warm-up and window), so they divide by the run's
//! `grants_total`.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// One `redis-server` process of a master: a single server, or one shard's
/// primary of a cluster.
#[derive(Debug, Clone)]
pub struct Process {
    /// The master's name in the agent's config (`r1`, `c1`).
    pub master: String,
    /// `host:port` it listens on.
    pub addr: String,
    pub pid: u32,
}

/// The CPU a run cost each process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cpu {
    /// Every redis-server process of the masters, in config order.
    pub servers: Vec<ServerCpu>,
    /// The agent's CPU seconds, when it could be read.
    pub agent_s: Option<f64>,
    /// Wall-clock seconds between the two readings.
    pub wall_s: f64,
}

/// One process's CPU seconds (user + system) during a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerCpu {
    pub master: String,
    pub addr: String,
    pub cpu_s: f64,
}

impl Cpu {
    /// CPU seconds of every redis-server process together.
    pub fn servers_s(&self) -> f64 {
        self.servers.iter().map(|s| s.cpu_s).sum()
    }

    /// The masters' names, in order, each once.
    pub fn masters(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for s in &self.servers {
            if !names.contains(&s.master.as_str()) {
                names.push(&s.master);
            }
        }
        names
    }

    /// The processes of master `name`.
    pub fn of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ServerCpu> + 'a {
        self.servers.iter().filter(move |s| s.master == name)
    }

    /// The largest share one process had of its own master's CPU: 1 for a
    /// single server, 1/shards for a cluster whose keys spread evenly.
    pub fn busiest_share(&self) -> Option<f64> {
        self.masters()
            .into_iter()
            .filter_map(|name| {
                let total: f64 = self.of(name).map(|s| s.cpu_s).sum();
                let most = self.of(name).map(|s| s.cpu_s).fold(0.0, f64::max);
                (total > 0.0).then(|| most / total)
            })
            .max_by(f64::total_cmp)
    }
}

/// Readings of every process at one instant.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    servers: Vec<Option<f64>>,
    agent: Option<f64>,
}

/// Reads the CPU seconds of `processes` and of the agent `agent` now.
pub fn sample(processes: &[Process], agent: Option<u32>) -> Sample {
    Sample {
        at: Instant::now(),
        servers: processes.iter().map(|p| cpu_seconds(p.pid)).collect(),
        agent: agent.and_then(cpu_seconds),
    }
}

/// The CPU each process spent between two samples; `None` when a process
/// could not be read at either end (it died: the figures would be partial).
pub fn between(processes: &[Process], before: &Sample, after: &Sample) -> Option<Cpu> {
    let servers = processes
        .iter()
        .zip(before.servers.iter().zip(&after.servers))
        .map(|(p, (b, a))| {
            Some(ServerCpu {
                master: p.master.clone(),
                addr: p.addr.clone(),
                cpu_s: (a.as_ref()? - b.as_ref()?).max(0.0),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Cpu {
        servers,
        agent_s: before.agent.zip(after.agent).map(|(b, a)| (a - b).max(0.0)),
        wall_s: after.at.duration_since(before.at).as_secs_f64(),
    })
}

/// User + system CPU seconds `pid` has used so far; `None` when it is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_ticks(&stat)?;
    // SAFETY: sysconf has no memory effects.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}

/// User + system CPU seconds of this process so far, every thread
/// (`getrusage(RUSAGE_SELF)`, microseconds); `None` if the call fails.
pub fn own_cpu_seconds() -> Option<f64> {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call to fill.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}

/// `utime + stime` (fields 14 and 15) of a `/proc/PID/stat` line. The
/// command name (field 2) may hold spaces and parentheses, so the fields
/// are counted from its last `)`.
fn parse_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_counted_after_the_command_name() {
        let stat = "4242 (redis-server (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    150 25 0 0 20 0 5 0 123456 1000000 2000 18446744073709551615";
        assert_eq!(parse_ticks(stat), Some(175));
        assert_eq!(parse_ticks("garbage"), None);
    }

    /// Work on this process's own CPU shows in its reading (in clock
    /// ticks, so after some milliseconds); a process that is not there
    /// has none.
    #[test]
    fn a_process_at_work_gains_cpu_seconds() {
        let pid = std::process::id();
        let start = cpu_seconds(pid).expect("own /proc/PID/stat");
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        let mut x = 0u64;
        while cpu_seconds(pid).expect("own /proc/PID/stat") <= start {
            assert!(Instant::now() < deadline, "no CPU time counted in 20 s");
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        assert_eq!(cpu_seconds(0), None);
    }

    /// This process's own reading grows with work on its CPU, as the
    /// driver's does over its run.
    #[test]
    fn own_cpu_seconds_grow_with_work() {
        let start = own_cpu_seconds().expect("getrusage");
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        let mut x = 0u64;
        while own_cpu_seconds().expect("getrusage") <= start {
            assert!(Instant::now() < deadline, "no CPU time counted in 20 s");
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
    }

    #[test]
    fn the_busiest_share_is_per_master() {
        let server = |master: &str, cpu_s| ServerCpu {
            master: master.into(),
            addr: String::new(),
            cpu_s,
        };
        let cpu = Cpu {
            servers: vec![
                server("c1", 1.0),
                server("c1", 1.0),
                server("c1", 2.0),
                server("c2", 3.0),
                server("c2", 3.0),
                server("c2", 3.0),
            ],
            agent_s: None,
            wall_s: 1.0,
        };
        assert_eq!(cpu.masters(), ["c1", "c2"]);
        assert_eq!(cpu.busiest_share(), Some(0.5));
        assert_eq!(cpu.servers_s(), 13.0);
    }
}

//! W9's part of the report: W1 through the agent with its five masters as
//! single servers and as Redis Clusters, side by side; the CPU each
//! `redis-server` process spent per grant; and, from the measured cost of
//! a shard, a projection on paper of what more shards per master buy. The
//! projection says plainly that this machine's cores cannot show it.

use std::fmt::Write;

use super::uncontended::paired_rows;
use super::{num, rate, ratio, Environment};
use crate::cpu::Cpu;
use crate::peers::Peer;
use crate::plan::{Results, Run, Workload, MASTERS, SHARDS};
use crate::spec::Report;

/// The client counts W9 may run with, smallest first.
const CLIENTS: [usize; 3] = [1, 8, 64];

/// Shards per master in the projection's rows.
const PROJECTED_SHARDS: [usize; 5] = [1, 3, 6, 12, 24];

fn run(results: &Results, clients: usize, cluster: bool) -> Option<&Run> {
    results.find(Workload::Clustered { clients, cluster }, Peer::Agent)
}

/// Fewer clients than this lock too few resources (one each) to show how
/// keys spread over a cluster's shards.
const SPREAD_CLIENTS: usize = 8;

/// A run's report and CPU when it granted in its window.
fn measured(run: Option<&Run>) -> Option<(&Report, &Cpu)> {
    let run = run?;
    Some((run.granted()?, run.cpu.as_ref()?))
}

/// A run that went cleanly to its end: no client stuck, no error. Only
/// such a run's cost per grant is a basis for the projection.
fn clean(run: Option<&Run>) -> Option<(&Report, &Cpu)> {
    measured(run).filter(|(r, _)| r.stuck == 0 && r.errors == 0)
}

/// Microseconds of `seconds` per grant of `r`.
fn per_grant_us(seconds: f64, r: &Report) -> f64 {
    seconds * 1e6 / r.grants_total as f64
}

/// redis-server CPU per grant, per master (every grant votes on and
/// releases from all five), µs.
fn master_us(r: &Report, cpu: &Cpu) -> f64 {
    per_grant_us(cpu.servers_s(), r) / cpu.masters().len().max(1) as f64
}

/// `W9 ...` for the summary: clusters / singles, cycles/s and commands.
pub(super) fn summary_line(results: &Results) -> Option<String> {
    let parts: Vec<String> = CLIENTS
        .into_iter()
        .filter_map(|clients| {
            let (single, cluster) = (run(results, clients, false)?, run(results, clients, true)?);
            let (s, c) = (
                single.result.as_ref().ok().filter(|r| r.cycles > 0)?,
                cluster.result.as_ref().ok().filter(|r| r.cycles > 0)?,
            );
            let commands = match (cluster.commands_per_grant(), single.commands_per_grant()) {
                (Some(c), Some(s)) if s > 0.0 => {
                    format!(
                        ", {:.2}× Redis commands per grant ({} vs {})",
                        c / s,
                        num(c),
                        num(s)
                    )
                }
                _ => String::new(),
            };
            Some(format!(
                "{} cycles/s at {clients} client(s) ({} vs {}){commands}",
                ratio(rate(c), Some(rate(s))),
                num(rate(c)),
                num(rate(s)),
            ))
        })
        .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "W9 masters as Redis Clusters of {SHARDS} primaries / as single servers: {} (this machine's cores \
             cannot show what shards add; see W9's projection).",
            parts.join("; ")
        )
    })
}

/// The W9 section; nothing when W9 did not run.
pub(super) fn section(md: &mut String, results: &Results, env: &Environment) {
    if !results
        .runs
        .iter()
        .any(|r| matches!(r.workload, Workload::Clustered { .. }))
    {
        return;
    }
    let processes = MASTERS * SHARDS;
    let _ = writeln!(
        md,
        "## W9: masters as Redis Clusters\n\nW1 for the agent only, one run right after the other: through the \
         run's agent over the five single servers, then through an agent whose five masters are each a Redis \
         Cluster of {SHARDS} primaries (`cluster:` seeds; {processes} `redis-server --cluster-enabled yes` \
         processes, no replicas). Latencies in ms, p50 / p99 / p99.9; ratios are clusters / singles. Redis \
         commands are every primary's, the scripts' inner calls included (on a cluster, a vote's `CLUSTER MYID` \
         too), the agent's topology reads (`CLUSTER SHARDS`, `SLOTS`, `NODES`, `INFO`) left out.\n\n**This machine has {} cores.** The {processes} shards, the agent and the driver share them, \
         so the cluster run cannot show shards adding throughput: what it measures is a shard's cost per \
         grant, and the projection below works from that on paper.\n\n\
         | clients | masters | cycles/s | clusters / singles | acquire | acquire + release | Redis commands / grant | errors |\n|---|---|---|---|---|---|---|---|",
        env.cores
    );
    let singles = format!("{MASTERS} single servers");
    let clusters = format!("{MASTERS} clusters × {SHARDS} shards");
    for clients in CLIENTS {
        paired_rows(
            md,
            clients,
            [
                (singles.as_str(), run(results, clients, false)),
                (clusters.as_str(), run(results, clients, true)),
            ],
        );
    }
    cpu_table(md, results, &singles, &clusters);
    projection(md, results);
}

/// CPU per grant of both kinds of master and of the agent, then the
/// cluster run's shards one by one.
fn cpu_table(md: &mut String, results: &Results, singles: &str, clusters: &str) {
    let _ = writeln!(
        md,
        "\n### CPU per grant\n\nUser + system CPU (`/proc/PID/stat`) of every `redis-server` process that \
         serves keys, and of the agent, over the run (warm-up included, like the command counts), divided by the \
         run's grants. Every grant votes on and releases from all five masters, so a master's cost per grant is \
         the processes' total over five. Busiest: the largest share one process had of its own master's CPU \
         (1 for a single server; 1/{SHARDS} for a cluster whose keys spread evenly; \
         one client locks one resource, so one shard of each cluster does nearly all its work).\n\n\
         | clients | masters | processes | redis-server CPU, s | per grant, all masters, µs | per grant per master, µs | busiest process's share | agent CPU per grant, µs |\n|---|---|---|---|---|---|---|---|"
    );
    for clients in CLIENTS {
        for (cluster, label) in [(false, singles), (true, clusters)] {
            let Some(r) = run(results, clients, cluster) else {
                continue;
            };
            match measured(Some(r)) {
                Some((report, cpu)) => {
                    let trouble = if report.stuck > 0 || report.errors > 0 {
                        format!(
                            " ({} clients stuck, {} errors)",
                            report.stuck, report.errors
                        )
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        md,
                        "| {clients} | {label}{trouble} | {} | {} | {} | {} | {} | {} |",
                        cpu.servers.len(),
                        num(cpu.servers_s()),
                        num(per_grant_us(cpu.servers_s(), report)),
                        num(master_us(report, cpu)),
                        cpu.busiest_share()
                            .map_or("-".into(), |b| format!("{:.0}%", b * 100.0)),
                        cpu.agent_s
                            .map_or("-".into(), |a| num(per_grant_us(a, report))),
                    );
                }
                None => {
                    let _ = writeln!(
                        md,
                        "| {clients} | {label} | not measured: the run failed or granted nothing | | | | | |"
                    );
                }
            }
        }
    }
    let Some((clients, report, cpu)) = CLIENTS
        .into_iter()
        .rev()
        .find_map(|c| measured(run(results, c, true)).map(|(r, cpu)| (c, r, cpu)))
    else {
        md.push('\n');
        return;
    };
    let _ = writeln!(
        md,
        "\nThe cluster run at {clients} client(s), shard by shard (each primary's CPU, s, and its share of its \
         master's):\n\n| master | shards | master CPU per grant, µs |\n|---|---|---|"
    );
    for name in cpu.masters() {
        let total: f64 = cpu.of(name).map(|s| s.cpu_s).sum();
        let shards: Vec<String> = cpu
            .of(name)
            .map(|s| {
                let share = if total > 0.0 {
                    s.cpu_s / total * 100.0
                } else {
                    0.0
                };
                format!("{} {} ({share:.0}%)", s.addr, num(s.cpu_s))
            })
            .collect();
        let _ = writeln!(
            md,
            "| {name} | {} | {} |",
            shards.join(" · "),
            num(per_grant_us(total, report))
        );
    }
    md.push('\n');
}

/// Throughput per added shard, on paper, from the cluster run with the
/// most clients.
fn projection(md: &mut String, results: &Results) {
    let Some((clients, report, cpu)) = CLIENTS
        .into_iter()
        .rev()
        .find_map(|c| clean(run(results, c, true)).map(|(r, cpu)| (c, r, cpu)))
    else {
        let _ = writeln!(
            md,
            "### Projection per added shard\n\nNot made: no cluster run went cleanly to its end with CPU figures.\n"
        );
        return;
    };
    let m = master_us(report, cpu);
    let spread = match cpu.busiest_share().filter(|_| clients >= SPREAD_CLIENTS) {
        Some(busiest) => format!(
            " At the spread measured here (the busiest shard took {:.0}% of its master's CPU), a master of \
             {SHARDS} shards would saturate at {} grants/s, against {} for an even spread.",
            busiest * 100.0,
            num(1e6 / (m * busiest)),
            num(SHARDS as f64 * 1e6 / m)
        ),
        None => format!(
            " A run of {clients} client(s) locks as many resources, on as many slots, so it cannot show how keys \
             spread over the shards: the projection assumes an even spread (CRC16 spreads many names evenly \
             over the 16384 slots)."
        ),
    };
    let agent = cpu.agent_s.map(|a| per_grant_us(a, report));
    let single = clean(run(results, clients, false)).map(|(r, c)| master_us(r, c));
    let limit = |shards: usize| shards as f64 * 1e6 / m;
    let _ = writeln!(
        md,
        "### Projection per added shard (on paper)\n\nFrom the cluster run at {clients} client(s), the one with \
         the most clients that went cleanly to its end: a master spent {} µs of `redis-server` CPU per grant \
         (the five masters' mean). A lock key lives in one hash slot on one shard, and the shards of a master \
         share nothing on the lock path, so a master of S shards, each on a core of its own, with keys spread \
         evenly, serves about S × 10⁶ / {} grants/s before its busiest shard is saturated: each added shard \
         adds about {} grants/s.{spread} Every grant goes to all five masters, so five such masters together \
         serve that rate, on 5 × S cores.{}\n\n\
         | shards per master | projected grants/s | redis-server cores (five masters) | agent cores at that rate |\n|---|---|---|---|",
        num(m),
        num(m),
        num(limit(1)),
        single.map_or(String::new(), |s| format!(
            " For comparison, a single server spent {} µs per grant in the same-sized run: {} grants/s on its \
             one core (W4 measures that limit with `redis-benchmark`).",
            num(s),
            num(1e6 / s)
        )),
    );
    for shards in PROJECTED_SHARDS {
        let rate = limit(shards);
        let _ = writeln!(
            md,
            "| {shards} | {} | {} | {} |",
            num(rate),
            MASTERS * shards,
            agent.map_or("-".into(), |a| num(rate * a / 1e6)),
        );
    }
    let _ = writeln!(
        md,
        "\nWhat the projection leaves out: the figures come from a lightly loaded, shared machine, where idle \
         costs (the cluster bus's heartbeats, the agent's health probes) are spread over few grants, so a grant \
         looks dearer than at full load, where Redis also serves more commands per wake-up (W4); the projection \
         errs low there. It ends where something else saturates first: the agents (the last column; more \
         agents mean more pods), the network, and keys that do not spread (one hot resource lives on one \
         shard whatever the cluster's size).\n"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ServerCpu;
    use crate::report::render;

    fn w9_run(cluster: bool, clients: usize, cycles: u64, commands: u64, cpu: Cpu) -> Run {
        Run {
            workload: Workload::Clustered { clients, cluster },
            peer: Peer::Agent.name(),
            result: Ok(Report {
                peer: "agent".into(),
                clients,
                window_s: 2.0,
                cycles,
                grants_total: cycles,
                ..Report::default()
            }),
            commands: Some(commands),
            master_connections: None,
            cpu: Some(cpu),
        }
    }

    fn cpu(master: &str, shards: &[f64], agent_s: f64) -> Cpu {
        let servers = (1..=MASTERS)
            .flat_map(|m| {
                shards.iter().enumerate().map(move |(i, &cpu_s)| ServerCpu {
                    master: format!("{master}{m}"),
                    addr: format!("127.0.0.1:{}", 7000 + 10 * m + i),
                    cpu_s,
                })
            })
            .collect();
        Cpu {
            servers,
            agent_s: Some(agent_s),
            wall_s: 3.0,
        }
    }

    /// Singles and clusters side by side with their ratio, the CPU per
    /// grant per master, each shard's share, and a projection that grows
    /// with the shards and says the machine cannot show it.
    #[test]
    fn w9_puts_clusters_beside_singles_and_projects_per_shard() {
        let results = Results {
            runs: vec![
                // 10,000 grants; singles: 5 × 0.5 s = 50 µs per grant per master.
                w9_run(false, 64, 10_000, 200_000, cpu("r", &[0.5], 2.0)),
                // 8,000 grants; clusters: 5 × (0.2 + 0.2 + 0.4) s = 100 µs per
                // grant per master, the busiest shard 50% of its master's.
                w9_run(true, 64, 8_000, 240_000, cpu("c", &[0.2, 0.2, 0.4], 1.6)),
            ],
            redis_version: "7".into(),
            ..Results::default()
        };
        let env = Environment {
            cores: 2,
            ..Environment::default()
        };
        let md = render(&results, &env, &[Peer::Agent]);
        assert!(
            md.contains(
                "W9 masters as Redis Clusters of 3 primaries / as single servers: 0.80× cycles/s at 64 client(s) \
                 (4000 vs 5000), 1.50× Redis commands per grant (30.0 vs 20.0)"
            ),
            "{md}"
        );
        assert!(md.contains("**This machine has 2 cores.**"), "{md}");
        assert!(md.contains("| 64 | 5 single servers | 5000 | 1× |"), "{md}");
        assert!(
            md.contains("| 64 | 5 clusters × 3 shards | 4000 | 0.80× |"),
            "{md}"
        );
        assert!(
            md.contains("| 64 | 5 single servers | 5 | 2.50 | 250 | 50.0 | 100% | 200 |"),
            "{md}"
        );
        assert!(
            md.contains("| 64 | 5 clusters × 3 shards | 15 | 4.00 | 500 | 100 | 50% | 200 |"),
            "{md}"
        );
        assert!(
            md.contains("| c1 | 127.0.0.1:7010 0.20 (25%) · 127.0.0.1:7011 0.20 (25%) · 127.0.0.1:7012 0.40 (50%) | 100 |"),
            "{md}"
        );
        // 100 µs per grant per master: 10,000 grants/s per shard.
        assert!(
            md.contains("each added shard adds about 10000 grants/s."),
            "{md}"
        );
        assert!(
            md.contains(
                "(the busiest shard took 50% of its master's CPU), a master of 3 shards would saturate at \
                 20000 grants/s, against 30000 for an even spread"
            ),
            "{md}"
        );
        assert!(
            md.contains("a single server spent 50.0 µs per grant"),
            "{md}"
        );
        assert!(md.contains("| 1 | 10000 | 5 | 2.00 |"), "{md}");
        assert!(md.contains("| 3 | 30000 | 15 | 6.00 |"), "{md}");
        assert!(md.contains("| 12 | 120000 | 60 | 24.0 |"), "{md}");
    }

    /// A cluster run whose clients got stuck shows its CPU, flagged, but
    /// is no basis for the projection: that works from the run with fewer
    /// clients that went cleanly, and says it cannot show the spread.
    #[test]
    fn w9_projects_from_a_run_that_went_cleanly() {
        let mut stuck = w9_run(true, 64, 3_000, 90_000, cpu("c", &[0.1, 0.1, 0.1], 0.3));
        if let Ok(r) = stuck.result.as_mut() {
            r.stuck = 11;
            r.errors = 18;
        }
        let results = Results {
            runs: vec![
                w9_run(false, 1, 1_000, 20_000, cpu("r", &[0.1], 0.2)),
                w9_run(true, 1, 1_000, 30_000, cpu("c", &[0.1, 0.1, 0.1], 0.3)),
                w9_run(false, 64, 4_000, 80_000, cpu("r", &[0.2], 0.4)),
                stuck,
            ],
            redis_version: "7".into(),
            agent_failed: true,
            ..Results::default()
        };
        let md = render(&results, &Environment::default(), &[Peer::Agent]);
        // 1.5 s over 3,000 grants: 500 µs, 100 per master.
        assert!(
            md.contains("| 64 | 5 clusters × 3 shards (11 clients stuck, 18 errors) | 15 | 1.50 | 500 | 100 |"),
            "{md}"
        );
        // 1.5 s over 1,000 grants: 1500 µs, 300 per master.
        assert!(
            md.contains(
                "From the cluster run at 1 client(s), the one with the most clients that went cleanly to its \
                 end: a master spent 300 µs"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "A run of 1 client(s) locks as many resources, on as many slots, so it cannot show how keys spread"
            ),
            "{md}"
        );
    }

    /// A cluster run that failed leaves its rows saying so, and no
    /// projection is made from nothing.
    #[test]
    fn w9_without_a_cluster_figure_makes_no_projection() {
        let mut failed = w9_run(true, 1, 0, 0, Cpu::default());
        failed.result = Err("cannot start cluster c1: redis-server not found".into());
        failed.cpu = None;
        let results = Results {
            runs: vec![
                w9_run(false, 1, 1_000, 20_000, cpu("r", &[0.1], 0.2)),
                failed,
            ],
            redis_version: "7".into(),
            agent_failed: true,
            ..Results::default()
        };
        let md = render(&results, &Environment::default(), &[Peer::Agent]);
        assert!(
            md.contains("| 1 | 5 clusters × 3 shards | n/a: cannot start cluster c1: redis-server not found |"),
            "{md}"
        );
        assert!(
            md.contains("Not made: no cluster run went cleanly to its end with CPU figures."),
            "{md}"
        );
        assert!(
            !md.contains("W9 masters as Redis Clusters of 3 primaries /"),
            "{md}"
        );
    }
}

//! The report's unit tests: each renders a whole report from made-up runs
//! and reads back the lines a section or a target writes.

use super::*;
use crate::idle::Idle;
use crate::plan::PROCESSES;

fn marker_run(check: bool, cycles: u64, commands: u64) -> Run {
    Run {
        workload: Workload::MarkerCheck { clients: 1, check },
        peer: Peer::Agent.name(),
        result: Ok(Report {
            peer: "agent".into(),
            clients: 1,
            window_s: 2.0,
            cycles,
            grants_total: cycles,
            ..Report::default()
        }),
        commands: Some(commands),
        master_connections: None,
        cpu: None,
    }
}

/// W5 shows both runs, the ratio on / off in the summary and its table,
/// and the commands per grant of each.
#[test]
fn the_marker_check_cost_is_a_ratio_of_two_runs() {
    let results = Results {
        runs: vec![
            marker_run(false, 800, 20_000),
            marker_run(true, 600, 21_000),
        ],
        redis_version: "7".into(),
        ..Results::default()
    };
    let md = render(&results, &Environment::default(), &[Peer::Agent]);
    assert!(
        md.contains(
            "with it on / off (plain `SET NX`): 0.75× at 1 client(s) (300 vs 400 cycles/s)"
        ),
        "{md}"
    );
    assert!(md.contains("## W5: the in-vote marker check"), "{md}");
    assert!(md.contains("| 1 | off | 400 | 1× |"), "{md}");
    assert!(md.contains("| 1 | on | 300 | 0.75× |"), "{md}");
    assert!(md.contains("| 25.0 | 0 |"), "commands per grant off: {md}");
    assert!(md.contains("| 35.0 | 0 |"), "commands per grant on: {md}");
}

fn fence_run(fence: bool, cycles: u64, commands: u64) -> Run {
    Run {
        workload: Workload::Fence { clients: 1, fence },
        ..marker_run(false, cycles, commands)
    }
}

/// W6 shows the plain and the fenced run, the ratios fenced / plain of
/// throughput and of Redis commands per grant, in the summary and its
/// table.
#[test]
fn the_fence_cost_is_a_ratio_of_two_runs() {
    let results = Results {
        runs: vec![fence_run(false, 800, 20_000), fence_run(true, 640, 24_000)],
        redis_version: "7".into(),
        ..Results::default()
    };
    let md = render(&results, &Environment::default(), &[Peer::Agent]);
    assert!(
        md.contains(
            "W6 fenced acquire / plain acquire: 0.80× cycles/s at 1 client(s) (320 vs 400), \
             1.50× Redis commands per grant (37.5 vs 25.0)"
        ),
        "{md}"
    );
    assert!(md.contains("## W6: a fenced acquire"), "{md}");
    assert!(md.contains("| 1 | plain | 400 | 1× |"), "{md}");
    assert!(md.contains("| 1 | fenced | 320 | 0.80× |"), "{md}");
    assert!(
        md.contains("| 37.5 | 0 |"),
        "commands per grant fenced: {md}"
    );
}

fn idle(connections: usize, before: u64, open: u64, after: u64) -> Idle {
    Idle {
        connections,
        answered: connections,
        first_failure: None,
        seconds_to_open: 1.0,
        rss_before_kib: before,
        rss_open_kib: open,
        rss_after_kib: after,
        settled: true,
        seconds_to_settle: 1.0,
        fds_before: 20,
        fds_open: 20 + connections,
        fds_after: 20,
    }
}

fn with_idle(measured: Idle) -> String {
    let results = Results {
        runs: Vec::new(),
        idle: Some(Ok(measured)),
        redis_version: "7".into(),
        ..Results::default()
    };
    render(&results, &Environment::default(), &[Peer::Agent])
}

/// W8's targets: under 50 MiB with 10,000 open, and RSS after the close
/// within 5 MiB (or 10%) of before; per connection is the growth over
/// the connections answered.
#[test]
fn idle_targets_compare_rss_open_and_after_with_before() {
    let md = with_idle(idle(10_000, 20 * 1024, 40 * 1024, 24 * 1024));
    assert!(
        md.contains("| 40.0 MiB open (20.0 MiB before, 2.0 KiB per connection) | met |"),
        "{md}"
    );
    assert!(md.contains("+4.0 MiB, 5.0 MiB allowed | met |"), "{md}");
    let md = with_idle(idle(10_000, 20 * 1024, 236 * 1024, 236 * 1024));
    assert!(
        md.contains("(20.0 MiB before, 22.1 KiB per connection) | **MISSED** |"),
        "{md}"
    );
    assert!(
        md.contains("+216.0 MiB, 5.0 MiB allowed | **MISSED** |"),
        "{md}"
    );
    // A smoke run opens fewer: measured, not judged.
    let md = with_idle(idle(300, 20 * 1024, 21 * 1024, 20 * 1024));
    assert!(
        md.contains("(300 of the target's 10000 answered) | not measured |"),
        "{md}"
    );
}

fn process_run(peer: Peer, cycles: u64, connections: u64) -> Run {
    Run {
        workload: Workload::Processes { clients: PROCESSES },
        peer: peer.name(),
        result: Ok(Report {
            peer: peer.name().into(),
            clients: PROCESSES,
            window_s: 2.0,
            cycles,
            grants_total: cycles,
            ..Report::default()
        }),
        commands: Some(cycles * 20),
        master_connections: Some(connections),
        cpu: None,
    }
}

/// W7 gives both peers' cycles/s, agent / pottery, and the masters'
/// added connections for each.
#[test]
fn processes_compare_cycles_and_master_connections() {
    let results = Results {
        runs: vec![
            process_run(Peer::Agent, 4000, 10),
            process_run(Peer::Pottery, 400, 1280),
        ],
        redis_version: "7".into(),
        ..Results::default()
    };
    let md = render(
        &results,
        &Environment::default(),
        &[Peer::Agent, Peer::Pottery],
    );
    assert!(
        md.contains(
            "agent (standard-library client) 2000 cycles/s, pottery 200 cycles/s: agent / pottery 10×; \
             the masters' connections during the run, over the count before it: +10 for the agent \
             (its own), +1280 for pottery."
        ),
        "{md}"
    );
    assert!(md.contains("| agent | 64 | 2000 | 1× |"), "{md}");
    assert!(md.contains("| pottery | 64 | 200 | 0.10× |"), "{md}");
    assert!(md.contains("| 20.0 | +1280 | 0 |"), "{md}");
}

fn w1_run(peer: Peer, workload: Workload, p50: f64, grants: u64, commands: u64) -> Run {
    Run {
        workload,
        peer: peer.name(),
        result: Ok(Report {
            peer: peer.name().into(),
            clients: 1,
            window_s: 1.0,
            cycles: grants,
            grants_total: grants,
            cycle_ms: crate::spec::Percentiles {
                count: grants,
                p50,
                ..Default::default()
            },
            ..Report::default()
        }),
        commands: Some(commands),
        master_connections: None,
        cpu: None,
    }
}

/// Issue 15's rows: one-client latency against 1.2× rslock's, Redis
/// commands per uncontended grant against rslock's, and per hot-key
/// grant against the agent's own uncontended cost plus one.
#[test]
fn latency_and_command_targets_say_what_they_compare() {
    let one = Workload::Uncontended { clients: 1 };
    let results = Results {
        runs: vec![
            w1_run(Peer::Agent, one, 0.6, 1000, 35_000),
            w1_run(Peer::Rslock, one, 0.5, 1000, 20_000),
            w1_run(Peer::Agent, hot(64, false), 0.0, 1000, 40_200),
        ],
        redis_version: "7".into(),
        ..Results::default()
    };
    let md = render(
        &results,
        &Environment::default(),
        &[Peer::Agent, Peer::Rslock],
    );
    assert!(
        md.contains("≤ 1.2× rslock's | agent 0.60 ms, rslock 0.50 ms: 1.20× | met |"),
        "{md}"
    );
    assert!(
        md.contains("≤ rslock's | agent 35.0, rslock 20.0 | **MISSED** |"),
        "{md}"
    );
    assert!(
        md.contains("≤ 1 | 40.2 − 35.0 = +5.20 | **MISSED** |"),
        "{md}"
    );
}

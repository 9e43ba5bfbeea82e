//! What both fuzz tests run on: one agent over three fresh masters, the
//! document it is judged by, and a proptest runner drawing its cases from
//! a fixed seed, or the one `FUZZ_SEED` gives.

use std::time::Duration;

use faults::cluster::{AgentSettings, Cluster};
use faults::openapi::Spec;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// A runtime, three fresh masters and one agent with `settings`, usable
/// (fresh masters are quarantined at first sight for a moment), and the
/// agent's socket.
pub fn start(settings: AgentSettings) -> (tokio::runtime::Runtime, Cluster, std::path::PathBuf) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cluster = runtime
        .block_on(Cluster::start(3, 1, settings))
        .unwrap_or_else(|e| panic!("{e}"));
    runtime
        .block_on(cluster.wait_usable(3, Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("{e}"));
    let socket = runtime.block_on(async { cluster.agents[0].lock().await.socket.clone() });
    (runtime, cluster, socket)
}

/// The seed the cases are drawn from when `FUZZ_SEED` is not set: the
/// same cases on every run, in CI as on a laptop.
const DEFAULT_SEED: u64 = 0x5eed_f022_0000_0001;

/// This run's seed: `FUZZ_SEED`'s number (decimal or `0x` hex), a new one
/// for `FUZZ_SEED=random`, else [`DEFAULT_SEED`]. Printed as `test`'s,
/// with how to repeat it, before any case runs.
pub fn seed(test: &str) -> u64 {
    let given = std::env::var("FUZZ_SEED").unwrap_or_default();
    let seed = match given.trim() {
        "" => DEFAULT_SEED,
        "random" => rand::random(),
        text => text
            .strip_prefix("0x")
            .map_or_else(
                || text.parse().ok(),
                |hex| u64::from_str_radix(hex, 16).ok(),
            )
            .unwrap_or_else(|| {
                panic!("FUZZ_SEED={text:?}: a number (decimal or 0x hex) or \"random\"")
            }),
    };
    eprintln!(
        "{test} seed: {seed:#018x}; set FUZZ_SEED={seed:#018x} to repeat, FUZZ_SEED=random for a new one"
    );
    seed
}

/// A proptest runner of as many cases as the variable `cases_var` says,
/// else `default`, drawn from `seed` (ChaCha, keyed with the seed's 8
/// bytes, little-endian, then zeros), that shrinks a failure briefly and
/// keeps no file.
pub fn runner(cases_var: &str, default: u32, seed: u64) -> (TestRunner, u32) {
    let cases: u32 = std::env::var(cases_var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let runner = TestRunner::new_with_rng(
        Config {
            cases,
            max_shrink_iters: 64,
            failure_persistence: None,
            rng_algorithm: RngAlgorithm::ChaCha,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &key),
    );
    (runner, cases)
}

/// The document the agent on `socket` is judged by ([`Spec::judging`]).
pub fn document(runtime: &tokio::runtime::Runtime, socket: &std::path::Path) -> Spec {
    runtime
        .block_on(Spec::judging(socket))
        .unwrap_or_else(|e| panic!("{e}"))
}

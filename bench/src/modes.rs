//! W15, shared and exclusive locks (the agent only): in one run, through
//! the run's agent over the same masters, what a reader's cycle and a
//! writer's cycle cost next to a lock's, and how many readers' cycles one
//! resource takes at once.
//!
//! An exclusive acquire is a lock's: the client leaves `"mode"` out for
//! both, and on a resource no reader has used the agent votes the same
//! script with the same arguments. So the exclusive cycle measured here is
//! a writer's on a resource that alternates: each client loop takes its
//! own resource shared, then exclusive, in turn, and the two are tallied
//! apart.
//!
//! - Cycles, at [`CLIENTS`], each client on its own keep-alive
//!   `redlock-client` connection and its own resource, looping acquire +
//!   release until the window ends, one loop after the other at the same
//!   client count: `lock` (no mode, as W11's lock cycle); `shared` (a
//!   reader, alone on its resource); `turns` (shared, then exclusive, in
//!   turn), reported as `exclusive` (a writer after a reader) and
//!   `shared-turn` (a reader after a writer).
//! - Readers, at [`READERS`]: every client on one resource, looping a
//!   shared acquire and its release; then as many clients taking that
//!   count's resource exclusively (a hot key: each acquire waits for the
//!   others).
//!
//! Cycles/s and the cycle's p50/p99; ratios to the lock cycle are the
//! result, and nothing here is a timed assertion.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use redlock_client::{AcquireOptions, Client, Error, Mode};
use serde::Serialize;

use crate::spec::Percentiles;
use crate::stats::{ms, percentiles};

/// Client counts of the cycles, in a full run and in the smoke run.
pub const CLIENTS: [usize; 2] = [1, 16];
pub const SMOKE_CLIENTS: [usize; 2] = [1, 4];
/// Readers on one resource, in a full run and in the smoke run.
pub const READERS: [usize; 3] = [1, 8, 64];
pub const SMOKE_READERS: [usize; 2] = [1, 4];
/// The smoke run's warm-up and window of each run, at most: it checks
/// that every cycle works, and runs ten of them.
const SMOKE_WARMUP: Duration = Duration::from_millis(50);
const SMOKE_WINDOW: Duration = Duration::from_millis(200);
/// TTL of every lock: as the other workloads.
const TTL: Duration = Duration::from_secs(10);
/// How long before the window's end a hot key's waiter may give up
/// (`taken`) without it counting as an error: the agent counts the wait
/// from the request's arrival.
const QUEUED: Duration = Duration::from_millis(20);

/// Cycles of one kind at one client count.
#[derive(Debug, Clone, Serialize)]
pub struct Cycles {
    /// `lock`, `shared`, `exclusive` or `shared-turn`.
    pub kind: &'static str,
    pub clients: usize,
    /// For a loop of one kind, its cycles in the window over the window;
    /// for a kind of the `turns` loop, the same scaled by the loop's time
    /// over the kind's: the rate of a loop of that kind alone.
    pub cycles_per_s: f64,
    /// Acquire + release, ms, cycles that ended in the window.
    pub cycle: Percentiles,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// What W15 measured.
#[derive(Debug, Clone, Serialize)]
pub struct Modes {
    /// Each client on its own resource.
    pub cycles: Vec<Cycles>,
    /// Every client on one resource: `shared` (readers) and `exclusive`.
    pub readers: Vec<Cycles>,
}

impl Modes {
    pub fn cycles(&self, kind: &str, clients: usize) -> Option<&Cycles> {
        find(&self.cycles, kind, clients)
    }

    pub fn readers(&self, kind: &str, clients: usize) -> Option<&Cycles> {
        find(&self.readers, kind, clients)
    }

    /// Whether anything failed (the smoke run fails on it).
    pub fn failed(&self) -> bool {
        self.cycles
            .iter()
            .chain(&self.readers)
            .any(|c| c.errors > 0)
    }
}

fn find<'a>(cycles: &'a [Cycles], kind: &str, clients: usize) -> Option<&'a Cycles> {
    cycles
        .iter()
        .find(|c| c.kind == kind && c.clients == clients)
}

/// One step of a client's loop: an acquire in a mode, then the release.
#[derive(Clone, Copy)]
struct Step {
    kind: &'static str,
    /// `None`: no mode given, a lock as before modes.
    mode: Option<Mode>,
}

const LOCK: Step = Step {
    kind: "lock",
    mode: None,
};
const SHARED: Step = Step {
    kind: "shared",
    mode: Some(Mode::Shared),
};

/// Runs W15 through the agent listening on `socket`.
///
/// # Errors
/// When no runtime can be built or a client cannot connect; failed
/// cycles are counted in the result instead.
pub fn measure(
    socket: &Path,
    smoke: bool,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Modes> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (counts, readers, warmup, window): (&[usize], &[usize], _, _) = if smoke {
        (
            &SMOKE_CLIENTS,
            &SMOKE_READERS,
            warmup.min(SMOKE_WARMUP),
            window.min(SMOKE_WINDOW),
        )
    } else {
        (&CLIENTS, &READERS, warmup, window)
    };
    let turns = [
        Step {
            kind: "shared-turn",
            mode: Some(Mode::Shared),
        },
        Step {
            kind: "exclusive",
            mode: Some(Mode::Exclusive),
        },
    ];
    runtime.block_on(async {
        let mut result = Modes {
            cycles: Vec::new(),
            readers: Vec::new(),
        };
        let timing = (warmup, window);
        for &clients in counts {
            for (name, steps) in [
                ("lock", &[LOCK][..]),
                ("shared", &[SHARED]),
                ("turns", &turns),
            ] {
                eprintln!("W15: {name} cycles, {clients} client(s), a resource each");
                let measured = run(socket, name, steps, clients, false, timing).await?;
                result.cycles.extend(measured);
            }
        }
        let exclusive = Step {
            kind: "exclusive",
            mode: Some(Mode::Exclusive),
        };
        for &clients in readers {
            for step in [SHARED, exclusive] {
                eprintln!(
                    "W15: {} cycles, {clients} client(s) on one resource",
                    step.kind
                );
                let measured = run(socket, step.kind, &[step], clients, true, timing).await?;
                result.readers.extend(measured);
            }
        }
        Ok(result)
    })
}

/// What one client's loop saw of one step.
#[derive(Default)]
struct Tally {
    cycles: u64,
    samples: Vec<f64>,
    /// The time of the cycles counted, ms.
    busy: f64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    fn add(&mut self, other: Tally) {
        self.cycles += other.cycles;
        self.samples.extend(other.samples);
        self.busy += other.busy;
        self.errors += other.errors;
        if let Some(e) = other.first_error {
            self.first_error.get_or_insert(e);
        }
    }
}

/// `clients` loops of `steps` in turn, each on a resource of its own or
/// (`hot`) all on one; one [`Cycles`] per step.
async fn run(
    socket: &Path,
    name: &'static str,
    steps: &[Step],
    clients: usize,
    hot: bool,
    (warmup, window): (Duration, Duration),
) -> anyhow::Result<Vec<Cycles>> {
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        let client = Client::new(socket);
        client
            .connect()
            .await
            .with_context(|| format!("connect {}", socket.display()))?;
        connected.push(client);
    }
    let start = Instant::now() + warmup;
    let end = start + window;
    let tasks: Vec<_> = connected
        .into_iter()
        .enumerate()
        .map(|(index, client)| {
            let steps = steps.to_vec();
            let resource = if hot {
                format!("bench-w15-{name}-hot-{clients}")
            } else {
                format!("bench-w15-{name}-{clients}-{index}")
            };
            tokio::spawn(async move {
                let owner = format!("bench-{index}");
                let mut tallies: Vec<Tally> = steps.iter().map(|_| Tally::default()).collect();
                'window: loop {
                    for (step, tally) in steps.iter().zip(&mut tallies) {
                        let began = Instant::now();
                        let left = end.saturating_duration_since(began);
                        if left.is_zero() {
                            break 'window;
                        }
                        // At least 1 ms: 0 would mean a single attempt.
                        let wait = left.max(Duration::from_millis(1));
                        let outcome = cycle(&client, &resource, &owner, *step, wait).await;
                        let ended = Instant::now();
                        match outcome {
                            Ok(()) => {
                                if ended >= start && ended <= end {
                                    tally.cycles += 1;
                                    tally.samples.push(ms(ended - began));
                                    tally.busy += ms(ended - began);
                                }
                            }
                            // The window ended while it waited.
                            Err(Error::Taken { .. }) if ended + QUEUED >= end => {}
                            Err(e) => {
                                tally.error(format!("{}: {e}", step.kind));
                                // Not a busy loop on a broken agent.
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                }
                tallies
            })
        })
        .collect();
    let mut all: Vec<Tally> = steps.iter().map(|_| Tally::default()).collect();
    for task in tasks {
        let tallies = task.await.context("a W15 client panicked")?;
        for (sum, t) in all.iter_mut().zip(tallies) {
            sum.add(t);
        }
    }
    let loop_busy: f64 = all.iter().map(|t| t.busy).sum();
    Ok(steps
        .iter()
        .zip(all)
        .map(|(step, mut t)| {
            // A loop of one step: 1. Else the step's share of the loop.
            let scale = if t.busy > 0.0 {
                loop_busy / t.busy
            } else {
                1.0
            };
            Cycles {
                kind: step.kind,
                clients,
                cycles_per_s: t.cycles as f64 / window.as_secs_f64() * scale,
                cycle: percentiles(&mut t.samples),
                errors: t.errors,
                first_error: t.first_error,
            }
        })
        .collect())
}

/// An acquire in `step`'s mode, then its release; a grant in another mode
/// or a release that finds the lock expired is an error.
async fn cycle(
    client: &Client,
    resource: &str,
    owner: &str,
    step: Step,
    wait: Duration,
) -> Result<(), Error> {
    let mut options = AcquireOptions::new()
        .ttl(TTL)
        .wait(wait)
        .owner(owner.to_string());
    if step.mode == Some(Mode::Shared) {
        options = options.shared();
    }
    let grant = client.acquire(resource, &options).await?;
    let wanted = step.mode.unwrap_or_default();
    if grant.mode != wanted {
        return Err(Error::Protocol(format!(
            "asked for {}, granted {}",
            wanted.as_str(),
            grant.mode.as_str()
        )));
    }
    if !client.release(resource, &grant.token).await? {
        return Err(Error::Protocol("released=false: it had expired".into()));
    }
    Ok(())
}

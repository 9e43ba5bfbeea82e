//! W11, semaphores and elections beside locks (the agent only): in one run,
//! through the run's agent over the same masters, what a permit cycle and a
//! leadership hand-off cost next to a lock cycle and a lock hand-off.
//!
//! - Cycles: each client has its own `redlock-client` connection and loops
//!   acquire + release until the window ends: a lock on a resource of its
//!   own (as W1), then a permit of one semaphore of [`LIMIT`] permits
//!   shared by every client (beyond [`LIMIT`] clients, a cycle includes the
//!   wait for a free permit). Cycles/s and the cycle's p50/p99.
//! - Hand-offs: a lock's, one holder and one waiter on one resource, from
//!   the holder starting its release to the waiter's grant (as W2's); an
//!   election's, [`CAMPAIGNERS`] campaigns through the agent, from the
//!   leader dropping its campaign (resigning) to the next `elected` event
//!   of another. The resigned campaigner campaigns again, so each hand-off
//!   has the same number of campaigners.
//!
//! Ratios (permit / lock, election / lock) are the result; nothing here is
//! a timed assertion.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::select_all;
use redlock_client::{AcquireOptions, CampaignOptions, Client, Error, PermitOptions};
use serde::Serialize;

use crate::spec::Percentiles;
use crate::stats::{ms, percentiles};

/// The semaphore's limit.
pub const LIMIT: u32 = 4;
/// Client counts of the cycles, in a full run and in the smoke run.
pub const CLIENTS: [usize; 2] = [1, 16];
pub const SMOKE_CLIENTS: [usize; 2] = [1, 4];
/// Campaigners of the election.
pub const CAMPAIGNERS: usize = 3;
/// Hand-offs measured of each kind, in a full run and in the smoke run.
pub const HANDOFFS: usize = 200;
pub const SMOKE_HANDOFFS: usize = 10;
/// The smoke run's warm-up and window of each cycle run, at most.
const SMOKE_WARMUP: Duration = Duration::from_millis(100);
const SMOKE_WINDOW: Duration = Duration::from_millis(400);
/// TTL of every lock, permit and leadership: as the other workloads.
const TTL: Duration = Duration::from_secs(10);
/// Left between a grant and the release (or resignation) that hands it
/// off, so the waiter's (campaigners') request is queued at the agent.
const QUEUED: Duration = Duration::from_millis(20);
/// The longest a single hand-off may take before it counts as an error.
const HANDOFF_LIMIT: Duration = Duration::from_secs(5);

/// Acquire + release cycles of one kind at one client count.
#[derive(Debug, Clone, Serialize)]
pub struct Cycles {
    /// `lock` or `permit`.
    pub kind: &'static str,
    pub clients: usize,
    pub cycles_per_s: f64,
    /// Acquire + release, ms, cycles that ended in the window.
    pub cycle: Percentiles,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// Hand-offs of one kind.
#[derive(Debug, Clone, Serialize)]
pub struct Handoffs {
    /// `lock` or `election`.
    pub kind: &'static str,
    /// Ms from the release (resignation) to the next grant (`elected`).
    pub latency: Percentiles,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// What W11 measured.
#[derive(Debug, Clone, Serialize)]
pub struct Primitives {
    pub limit: u32,
    pub campaigners: usize,
    pub cycles: Vec<Cycles>,
    pub handoffs: Vec<Handoffs>,
}

impl Primitives {
    pub fn cycles(&self, kind: &str, clients: usize) -> Option<&Cycles> {
        self.cycles
            .iter()
            .find(|c| c.kind == kind && c.clients == clients)
    }

    pub fn handoff(&self, kind: &str) -> Option<&Handoffs> {
        self.handoffs.iter().find(|h| h.kind == kind)
    }

    /// Whether anything failed (the smoke run fails on it).
    pub fn failed(&self) -> bool {
        self.cycles.iter().any(|c| c.errors > 0) || self.handoffs.iter().any(|h| h.errors > 0)
    }
}

/// Runs W11 through the agent listening on `socket`.
///
/// # Errors
/// When no runtime can be built or a client cannot connect; failed
/// operations are counted in the result instead.
pub fn measure(
    socket: &Path,
    smoke: bool,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Primitives> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (counts, handoffs): (&[usize], usize) = if smoke {
        (&SMOKE_CLIENTS, SMOKE_HANDOFFS)
    } else {
        (&CLIENTS, HANDOFFS)
    };
    // The smoke run checks that every operation works, briefly.
    let (warmup, window) = if smoke {
        (warmup.min(SMOKE_WARMUP), window.min(SMOKE_WINDOW))
    } else {
        (warmup, window)
    };
    runtime.block_on(async {
        let mut result = Primitives {
            limit: LIMIT,
            campaigners: CAMPAIGNERS,
            cycles: Vec::new(),
            handoffs: Vec::new(),
        };
        for &clients in counts {
            for kind in ["lock", "permit"] {
                eprintln!("W11: {kind} cycles, {clients} client(s)");
                result
                    .cycles
                    .push(cycles(socket, kind, clients, warmup, window).await?);
            }
        }
        eprintln!("W11: {handoffs} lock hand-offs");
        result.handoffs.push(lock_handoffs(socket, handoffs).await?);
        eprintln!("W11: {handoffs} election hand-offs, {CAMPAIGNERS} campaigners");
        result
            .handoffs
            .push(election_handoffs(socket, handoffs).await?);
        Ok(result)
    })
}

async fn connect(socket: &Path) -> anyhow::Result<Client> {
    let client = Client::new(socket);
    client
        .connect()
        .await
        .with_context(|| format!("connect {}", socket.display()))?;
    Ok(client)
}

/// What one client's loop saw.
#[derive(Default)]
struct Tally {
    cycles: u64,
    samples: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }
}

async fn cycles(
    socket: &Path,
    kind: &'static str,
    clients: usize,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Cycles> {
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        connected.push(connect(socket).await?);
    }
    let start = Instant::now() + warmup;
    let end = start + window;
    let semaphore = format!("bench-w11-semaphore-{clients}");
    let tasks: Vec<_> = connected
        .into_iter()
        .enumerate()
        .map(|(index, client)| {
            let semaphore = semaphore.clone();
            tokio::spawn(async move {
                let resource = format!("bench-w11-lock-{clients}-{index}");
                let owner = format!("bench-{index}");
                let mut tally = Tally::default();
                loop {
                    let began = Instant::now();
                    let left = end.saturating_duration_since(began);
                    if left.is_zero() {
                        break;
                    }
                    // At least 1 ms: 0 would mean a single attempt.
                    let wait = left.max(Duration::from_millis(1));
                    let outcome = if kind == "lock" {
                        let options = AcquireOptions::new()
                            .ttl(TTL)
                            .wait(wait)
                            .owner(owner.clone());
                        match client.acquire(&resource, &options).await {
                            Ok(grant) => client.release(&resource, &grant.token).await,
                            Err(e) => Err(e),
                        }
                    } else {
                        let options = PermitOptions::new(LIMIT)
                            .ttl(TTL)
                            .wait(wait)
                            .owner(owner.clone());
                        match client.acquire_permit(&semaphore, &options).await {
                            Ok(p) => client.release_permit(&semaphore, &p.token).await,
                            Err(e) => Err(e),
                        }
                    };
                    let ended = Instant::now();
                    match outcome {
                        Ok(true) => {
                            if ended >= start && ended <= end {
                                tally.cycles += 1;
                                tally.samples.push(ms(ended - began));
                            }
                        }
                        Ok(false) => tally.error("released=false: it had expired".into()),
                        // The window ended while it waited (the agent
                        // counts the wait from the request's arrival).
                        Err(Error::Taken { .. }) if ended + QUEUED >= end => {}
                        Err(e) => {
                            tally.error(format!("{kind}: {e}"));
                            // Not a busy loop on a broken agent.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await.context("a W11 client panicked")?;
        all.cycles += t.cycles;
        all.samples.extend(t.samples);
        all.errors += t.errors;
        if let Some(e) = t.first_error {
            all.first_error.get_or_insert(e);
        }
    }
    Ok(Cycles {
        kind,
        clients,
        cycles_per_s: all.cycles as f64 / window.as_secs_f64(),
        cycle: percentiles(&mut all.samples),
        errors: all.errors,
        first_error: all.first_error,
    })
}

/// One holder, one waiter, swapping roles after each hand-off.
async fn lock_handoffs(socket: &Path, count: usize) -> anyhow::Result<Handoffs> {
    let resource = "bench-w11-handoff";
    let mut pair = [connect(socket).await?, connect(socket).await?];
    let mut tally = Tally::default();
    let options = AcquireOptions::new().ttl(TTL).wait(HANDOFF_LIMIT);
    let mut held = match pair[0].acquire(resource, &options).await {
        Ok(grant) => grant.token,
        Err(e) => {
            tally.error(format!("first acquire: {e}"));
            return Ok(handoffs("lock", tally));
        }
    };
    for _ in 0..count {
        let [holder, waiter] = &pair;
        let waiting = waiter.acquire(resource, &options);
        let release = async {
            tokio::time::sleep(QUEUED).await;
            let began = Instant::now();
            (began, holder.release(resource, &held).await)
        };
        let (granted, (began, released)) = tokio::join!(
            async {
                let grant = waiting.await;
                (Instant::now(), grant)
            },
            release
        );
        if let Err(e) = released {
            tally.error(format!("release: {e}"));
        }
        match granted {
            (at, Ok(grant)) => {
                tally.samples.push(ms(at.saturating_duration_since(began)));
                held = grant.token;
                pair.swap(0, 1);
            }
            (_, Err(e)) => {
                tally.error(format!("waiter: {e}"));
                break;
            }
        }
    }
    pair[0].release(resource, &held).await.ok();
    Ok(handoffs("lock", tally))
}

/// [`CAMPAIGNERS`] campaigns; the leader resigns, the next is elected, the
/// resigned one campaigns again.
async fn election_handoffs(socket: &Path, count: usize) -> anyhow::Result<Handoffs> {
    let election = "bench-w11-election";
    let options = CampaignOptions::new().ttl(TTL);
    let mut clients = Vec::with_capacity(CAMPAIGNERS);
    let mut campaigns = Vec::with_capacity(CAMPAIGNERS);
    let mut tally = Tally::default();
    for index in 0..CAMPAIGNERS {
        let client = connect(socket).await?;
        let options = options.clone().owner(format!("bench-{index}"));
        campaigns.push((index, client.campaign(election, &options).await?));
        clients.push(client);
    }
    // The first leader, not measured.
    let (mut leader, mut term) = match next_elected(&mut campaigns).await {
        Ok(elected) => elected,
        Err(e) => {
            tally.error(e);
            return Ok(handoffs("election", tally));
        }
    };
    for _ in 0..count {
        tokio::time::sleep(QUEUED).await;
        let began = Instant::now();
        let (resigned, campaign) = campaigns.remove(leader);
        campaign.resign();
        match next_elected(&mut campaigns).await {
            Ok((next, next_term)) => {
                tally.samples.push(ms(began.elapsed()));
                if next_term <= term {
                    tally.error(format!("term {next_term} after term {term}"));
                }
                leader = next;
                term = next_term;
            }
            Err(e) => {
                tally.error(e);
                break;
            }
        }
        let options = options.clone().owner(format!("bench-{resigned}"));
        match clients[resigned].campaign(election, &options).await {
            Ok(campaign) => campaigns.push((resigned, campaign)),
            Err(e) => {
                tally.error(format!("campaign again: {e}"));
                break;
            }
        }
    }
    Ok(handoffs("election", tally))
}

/// Waits for the next `elected` among `campaigns`: its position and term.
async fn next_elected(
    campaigns: &mut [(usize, redlock_client::Campaign)],
) -> Result<(usize, u64), String> {
    let waits = campaigns
        .iter_mut()
        .map(|(_, c)| Box::pin(c.elected()))
        .collect::<Vec<_>>();
    if waits.is_empty() {
        return Err("no campaigner left".into());
    }
    match tokio::time::timeout(HANDOFF_LIMIT, select_all(waits)).await {
        Err(_) => Err(format!("no leader elected in {HANDOFF_LIMIT:?}")),
        Ok((Ok(Some(term)), position, _)) => Ok((position, term)),
        Ok((Ok(None), _, _)) => Err("a campaign ended before it was elected".into()),
        Ok((Err(e), _, _)) => Err(format!("campaign: {e}")),
    }
}

fn handoffs(kind: &'static str, mut tally: Tally) -> Handoffs {
    Handoffs {
        kind,
        latency: percentiles(&mut tally.samples),
        errors: tally.errors,
        first_error: tally.first_error,
    }
}

//! The clients: each loops lock, critical section, release on a few shared
//! resources and reports every section to the checker and every attempt
//! to the stats.
//!
//! Four kinds, so each way of using the agent is under test:
//! - [`ClientKind::Acquire`]: acquire (sometimes waiting), work for part of
//!   the validity, sometimes extend, release. Stops before validity ends,
//!   as a correct client does.
//! - [`ClientKind::Hold`]: a hold stream; stops on `lost` or a broken stream.
//! - [`ClientKind::ProcessHold`]: the same in a child process
//!   (`faults hold-client`), so the nemesis can SIGKILL it mid-hold.
//! - [`ClientKind::LockCommand`]: `redlock-agent lock -- faults cs-child`,
//!   killable too.
//!
//! And three for the other primitives, on the same quorum:
//! - [`ClientKind::PermitAcquire`]: a semaphore's acquire, work, maybe
//!   extend, release, as a plain acquire.
//! - [`ClientKind::PermitHold`]: a semaphore's hold stream.
//! - [`ClientKind::Campaign`]: a campaign stream; it leads for a while
//!   once elected and resigns, or gives up waiting and resigns.
//! - [`ClientKind::MultiAcquire`], [`ClientKind::MultiHold`]: 2 or 3 of
//!   the locks' resources at once, as an acquire and as a hold.
//! - [`ClientKind::SharedAcquire`], [`ClientKind::SharedHold`]: readers,
//!   the locks' resources taken with `"mode": "shared"`, as an acquire and
//!   as a hold.
//!
//! Every client asks for a fence (`redlock-agent lock` only when it has
//! `--fence`) and writes once inside each section to the fenced store
//! ([`crate::store`]) with it: plain acquires just before they leave the
//! section, holds just after the grant. Readers read: they write nothing
//! (their fence is the last writer's, not above what the store accepted).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::checker::{Checker, ClientKind, Ending, Grant, Primitive, SectionId, StoreWrite};
use crate::client::{
    self, AcquireOptions, Answer, Client, Error, ErrorCode, Held, HoldOptions, Mode,
    PermitHoldOptions, PermitOptions,
};
use crate::clock::Mono;
use crate::store::StoreClient;

mod campaign;
mod holding;
mod mix;
mod multi;
mod processes;
mod stats;

use holding::{keep, HoldEvents};

pub use campaign::campaign_client;
pub use mix::{spawn, Mix};
pub use processes::{process_client, run_cs_child, run_hold_client, Processes, Running};
pub use stats::{Counts, Outcome, Phase, PhaseFlag, Stats, StatsSnapshot};

/// How clients choose what to ask for.
#[derive(Debug, Clone)]
pub struct Plan {
    pub resources: Vec<String>,
    /// TTLs asked for, in ms (inclusive range).
    pub ttl_ms: (u64, u64),
    pub hold_ttl_ms: (u64, u64),
    /// `wait_ms` values to choose from.
    pub waits_ms: Vec<u64>,
    /// Share of the validity a plain acquire's section may use.
    pub work_share: (f64, f64),
    /// How often an acquire client extends once mid-section.
    pub extend_chance: f64,
    /// How long holds are kept, in ms.
    pub hold_ms: (u64, u64),
    /// Pause between a client's attempts, in ms.
    pub think_ms: (u64, u64),
    /// Semaphores and their limits, for the permit clients (plain
    /// acquires take `ttl_ms`, holds `hold_ttl_ms`, as for locks).
    pub semaphores: Vec<(String, u32)>,
    /// Elections, for the campaigners: a leadership's TTL is drawn from
    /// `hold_ttl_ms`, how long it leads from `hold_ms`, how long it waits
    /// to be elected from `waits_ms`.
    pub elections: Vec<String>,
}

/// What every client shares.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub checker: Arc<Checker>,
    pub stats: Arc<Stats>,
    pub phase: Arc<PhaseFlag>,
    pub processes: Arc<Processes>,
    pub stop: watch::Receiver<bool>,
    pub plan: Plan,
    pub agent_bin: PathBuf,
    pub faults_bin: PathBuf,
    /// The fenced store every section writes to, and its URL for client
    /// processes.
    pub store: Option<(StoreClient, String)>,
    /// `redlock-agent lock` takes `--fence` (see [`lock_takes_fence`]).
    pub lock_fence: bool,
}

/// Whether `redlock-agent lock` at `agent_bin` has `--fence` (it exports
/// `REDLOCK_FENCE` to its command); without it, lock commands run unfenced.
pub fn lock_takes_fence(agent_bin: &std::path::Path) -> bool {
    std::process::Command::new(agent_bin)
        .args(["lock", "--help"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("--fence"))
}

impl Ctx {
    pub(crate) fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    async fn sleep(&mut self, d: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            _ = stop.changed() => {}
        }
    }

    /// The section's one write to the fenced store, when it has a fence.
    async fn write(&self, id: SectionId, resource: &str, fence: Option<u64>, data: &str) {
        let (Some((store, _)), Some(fence)) = (&self.store, fence) else {
            return;
        };
        let outcome = store.write(resource, fence, data).await;
        self.checker.wrote(
            id,
            StoreWrite {
                at: Mono::now(),
                outcome,
            },
        );
    }

    fn record(&self, kind: ClientKind, outcome: Outcome) {
        self.stats.attempt(self.phase.get(), kind, outcome);
    }

    /// Classifies a refusal and records it.
    fn refused(&self, kind: ClientKind, code: &str) -> Outcome {
        self.stats.code(code);
        let outcome = match code {
            "taken" => Outcome::Taken,
            "no_quorum" => Outcome::NoQuorum,
            _ => Outcome::Refused,
        };
        self.record(kind, outcome);
        outcome
    }

    fn failed(&self, kind: ClientKind, e: &Error, what: &str) -> Outcome {
        let outcome = match e {
            Error::Connect { .. } => Outcome::Unreachable,
            Error::Protocol(m) => {
                self.stats.malformed(format!("{what}: {m}"));
                Outcome::Malformed
            }
            _ => Outcome::NoAnswer,
        };
        self.record(kind, outcome);
        outcome
    }
}

fn between(rng: &mut StdRng, (lo, hi): (u64, u64)) -> u64 {
    if hi <= lo {
        lo
    } else {
        rng.random_range(lo..=hi)
    }
}

/// Backoff after a failed attempt, so a down agent is not hammered.
fn backoff(outcome: Outcome) -> Duration {
    match outcome {
        Outcome::Unreachable | Outcome::NoAnswer => Duration::from_millis(100),
        Outcome::NoQuorum | Outcome::Refused | Outcome::Malformed => Duration::from_millis(50),
        Outcome::Taken | Outcome::Granted => Duration::ZERO,
    }
}

/// An acquire client until stop: of locks (readers' with `kind`
/// [`ClientKind::SharedAcquire`]), or (`kind`
/// [`ClientKind::PermitAcquire`]) of permits of the plan's semaphores.
pub async fn acquire_client(
    ctx: Ctx,
    name: String,
    kind: ClientKind,
    agent: usize,
    client: Client,
    seed: u64,
) {
    if kind == ClientKind::PermitAcquire {
        return permit_acquire_client(ctx, name, agent, client, seed).await;
    }
    let mut ctx = ctx;
    let mut rng = StdRng::seed_from_u64(seed);
    let (mode, primitive) = mode_of(kind);
    while !ctx.stopped() {
        let resource = ctx.plan.resources[rng.random_range(0..ctx.plan.resources.len())].clone();
        let ttl_ms = between(&mut rng, ctx.plan.ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let mut options = AcquireOptions::new()
            .ttl(Duration::from_millis(ttl_ms))
            .wait(Duration::from_millis(wait_ms))
            .owner(name.clone())
            .fence();
        if mode == Mode::Shared {
            options = options.shared();
        }
        let requested = Mono::now();
        let outcome = match client.acquire(&resource, &options).await {
            Ok(Answer::Ok(grant)) => {
                let granted = Mono::now();
                ctx.record(kind, Outcome::Granted);
                // The mode asked for is what the client believes it holds;
                // an answer in another breaks the contract.
                if grant.mode != mode {
                    ctx.stats.malformed(format!(
                        "acquire of {resource} as {mode:?} answered {:?}",
                        grant.mode
                    ));
                }
                let id = ctx.checker.enter_as(
                    Grant {
                        resource: resource.clone(),
                        client: name.clone(),
                        kind,
                        agent,
                        token: grant.token.clone(),
                        ttl_ms,
                        requested,
                        granted,
                        validity_ms: Some(client::ms(grant.validity)),
                        fence: grant.fence,
                    },
                    granted,
                    primitive.clone(),
                );
                let held = Held::Lock(resource.clone());
                // Readers write nothing to the fenced store.
                let granted_as = (
                    grant.token.as_str(),
                    client::ms(grant.validity),
                    grant.fence.filter(|_| mode == Mode::Exclusive),
                );
                work(
                    &mut ctx, &mut rng, &client, &held, &resource, granted_as, id, granted, ttl_ms,
                )
                .await;
                Outcome::Granted
            }
            Ok(Answer::Refused { code, .. }) => ctx.refused(kind, code.as_str()),
            Err(e) => ctx.failed(kind, &e, "acquire"),
        };
        let pause = backoff(outcome) + Duration::from_millis(between(&mut rng, ctx.plan.think_ms));
        ctx.sleep(pause).await;
    }
}

/// The mode a lock client of `kind` asks for, and what its sections hold.
fn mode_of(kind: ClientKind) -> (Mode, Primitive) {
    if matches!(kind, ClientKind::SharedAcquire | ClientKind::SharedHold) {
        (Mode::Shared, Primitive::Shared)
    } else {
        (Mode::Exclusive, Primitive::Lock)
    }
}

/// A permit acquire client until stop: a permit of one of the plan's
/// semaphores, then the section as a plain acquire's.
async fn permit_acquire_client(
    mut ctx: Ctx,
    name: String,
    agent: usize,
    client: Client,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let kind = ClientKind::PermitAcquire;
    while !ctx.stopped() {
        let (semaphore, limit) =
            ctx.plan.semaphores[rng.random_range(0..ctx.plan.semaphores.len())].clone();
        let ttl_ms = between(&mut rng, ctx.plan.ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let options = PermitOptions::new(limit)
            .ttl(Duration::from_millis(ttl_ms))
            .wait(Duration::from_millis(wait_ms))
            .owner(name.clone())
            .fence();
        let requested = Mono::now();
        let outcome = match client.acquire_permit(&semaphore, &options).await {
            Ok(Answer::Ok(permit)) => {
                let granted = Mono::now();
                ctx.record(kind, Outcome::Granted);
                let resource = Primitive::permit_resource(&semaphore, permit.permit);
                let id = ctx.checker.enter_as(
                    Grant {
                        resource: resource.clone(),
                        client: name.clone(),
                        kind,
                        agent,
                        token: permit.token.clone(),
                        ttl_ms,
                        requested,
                        granted,
                        validity_ms: Some(client::ms(permit.validity)),
                        fence: permit.fence,
                    },
                    granted,
                    Primitive::Permit {
                        semaphore: semaphore.clone(),
                        limit,
                        permit: permit.permit,
                    },
                );
                let held = Held::Permit {
                    semaphore: semaphore.clone(),
                    permit: permit.permit,
                };
                let granted_as = (
                    permit.token.as_str(),
                    client::ms(permit.validity),
                    permit.fence,
                );
                work(
                    &mut ctx, &mut rng, &client, &held, &resource, granted_as, id, granted, ttl_ms,
                )
                .await;
                Outcome::Granted
            }
            Ok(Answer::Refused { code, .. }) => ctx.refused(kind, code.as_str()),
            Err(e) => ctx.failed(kind, &e, "acquire_permit"),
        };
        let pause = backoff(outcome) + Duration::from_millis(between(&mut rng, ctx.plan.think_ms));
        ctx.sleep(pause).await;
    }
}

/// The section of an acquire client: work within the validity, maybe
/// extend once, release. `held` is what to extend and release, `resource`
/// its name in the checker and the fenced store, `(token, validity_ms,
/// fence)` the grant.
#[allow(clippy::too_many_arguments)]
async fn work(
    ctx: &mut Ctx,
    rng: &mut StdRng,
    client: &Client,
    held: &Held,
    resource: &str,
    (token, validity_ms, fence): (&str, u64, Option<u64>),
    id: SectionId,
    granted: Mono,
    ttl_ms: u64,
) {
    // A correct client stops a safety margin before its validity ends.
    let margin = |v: u64| (v / 10).max(30);
    let mut valid_until = granted.plus_ms(validity_ms);
    let share = rng.random_range(ctx.plan.work_share.0..=ctx.plan.work_share.1);
    let mut end = granted
        .plus_ms((validity_ms as f64 * share) as u64)
        .min(Mono(
            valid_until
                .0
                .saturating_sub(margin(validity_ms) * 1_000_000),
        ));
    let mut ending = None;
    if rng.random_bool(ctx.plan.extend_chance) {
        sleep_until(end.0.saturating_sub(end.0.saturating_sub(granted.0) / 2)).await;
        ctx.stats.bump(|s| s.extends += 1);
        let asked = Mono::now();
        let ttl = Duration::from_millis(ttl_ms);
        match client.extend_held(held, token, Some(ttl)).await {
            Ok(Answer::Ok(extended)) => {
                let at = Mono::now();
                let validity_ms = client::ms(extended.validity);
                ctx.checker.renewed(id, asked, at, validity_ms);
                valid_until = at.plus_ms(validity_ms);
                let more = (validity_ms as f64 * share / 2.0) as u64;
                end = at.plus_ms(more).min(Mono(
                    valid_until
                        .0
                        .saturating_sub(margin(validity_ms) * 1_000_000),
                ));
            }
            Ok(Answer::Refused { code, .. }) => {
                let at = Mono::now();
                ctx.stats.code(code.as_str());
                if code == ErrorCode::Lost {
                    ctx.stats.bump(|s| s.extends_lost += 1);
                    ctx.checker.belief_ended(id, at);
                    ending = Some(Ending::Lost {
                        reason: "extend refused: lost".into(),
                    });
                    end = at;
                }
                // no_quorum: the lock is still ours until valid_until.
            }
            Err(_) => {} // unanswered: keep to the old validity
        }
    }
    sleep_until(end.0).await;
    if ending.is_none() {
        let data = format!("{resource} by {}", &token[..token.len().min(8)]);
        ctx.write(id, resource, fence, &data).await;
    }
    let exit = Mono::now();
    ctx.checker.exit(
        id,
        exit,
        ending.clone().unwrap_or(Ending::ReleaseUnanswered),
    );
    match client.release_held(held, token).await {
        Ok(Answer::Ok(released)) => {
            ctx.stats.bump(|s| {
                s.releases += 1;
                s.releases_false += u64::from(!released);
            });
            if ending.is_none() {
                ctx.checker.ended(id, Ending::Released { released });
            }
        }
        _ => ctx.stats.bump(|s| s.releases_unanswered += 1),
    }
}

async fn sleep_until(mono_ns: u64) {
    let left = Mono(mono_ns).since(Mono::now());
    if !left.is_zero() {
        tokio::time::sleep(left).await;
    }
}

/// Opens a hold of `kind`: of a lock (`ClientKind::Hold`, a reader's with
/// `ClientKind::SharedHold`) or of a permit
/// of one of the plan's semaphores; with the resource the checker knows it
/// by and what it holds.
async fn open_hold(
    ctx: &Ctx,
    rng: &mut StdRng,
    kind: ClientKind,
    client: &Client,
    (ttl_ms, wait_ms, owner): (u64, u64, &str),
) -> Result<Answer<(client::Hold, String, Primitive)>, Error> {
    let (ttl, wait) = (
        Duration::from_millis(ttl_ms),
        Duration::from_millis(wait_ms),
    );
    if kind == ClientKind::PermitHold {
        let (semaphore, limit) =
            ctx.plan.semaphores[rng.random_range(0..ctx.plan.semaphores.len())].clone();
        let options = PermitHoldOptions::new(limit)
            .ttl(ttl)
            .wait(wait)
            .owner(owner)
            .fence();
        return Ok(match client.hold_permit(&semaphore, &options).await? {
            Answer::Ok(hold) => {
                let permit = hold.permit();
                Answer::Ok((
                    hold.into_hold(),
                    Primitive::permit_resource(&semaphore, permit),
                    Primitive::Permit {
                        semaphore,
                        limit,
                        permit,
                    },
                ))
            }
            Answer::Refused { code, message } => Answer::Refused { code, message },
        });
    }
    let resource = ctx.plan.resources[rng.random_range(0..ctx.plan.resources.len())].clone();
    let mut options = HoldOptions::new().ttl(ttl).wait(wait).owner(owner).fence();
    let (mode, primitive) = mode_of(kind);
    if mode == Mode::Shared {
        options = options.shared();
    }
    Ok(match client.hold(&resource, &options).await? {
        Answer::Ok(hold) => Answer::Ok((hold, resource, primitive)),
        Answer::Refused { code, message } => Answer::Refused { code, message },
    })
}

/// A hold client (in this process) until stop: of locks (readers' with
/// `kind` [`ClientKind::SharedHold`]), or (`kind`
/// [`ClientKind::PermitHold`]) of permits of the plan's semaphores.
pub async fn hold_client(
    mut ctx: Ctx,
    name: String,
    kind: ClientKind,
    agent: usize,
    client: Client,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !ctx.stopped() {
        let ttl_ms = between(&mut rng, ctx.plan.hold_ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let hold_ms = between(&mut rng, ctx.plan.hold_ms);
        let requested = Mono::now();
        let opened = open_hold(&ctx, &mut rng, kind, &client, (ttl_ms, wait_ms, &name)).await;
        let outcome = match opened {
            Ok(Answer::Ok((mut hold, resource, primitive))) => {
                let granted = Mono::now();
                let (token, fence) = (hold.token().to_string(), hold.fence());
                ctx.record(kind, Outcome::Granted);
                let id = ctx.checker.enter_as(
                    Grant {
                        resource: resource.clone(),
                        client: name.clone(),
                        kind,
                        agent,
                        token: token.clone(),
                        ttl_ms,
                        requested,
                        granted,
                        validity_ms: Some(client::ms(hold.validity())),
                        fence,
                    },
                    granted,
                    primitive,
                );
                if kind != ClientKind::SharedHold {
                    let data = format!("{resource} by {}", &token[..token.len().min(8)]);
                    ctx.write(id, &resource, fence, &data).await;
                }
                let end = granted.plus_ms(hold_ms);
                let ending = keep(&mut ctx, id, end, &mut hold, "hold").await;
                ctx.checker.exit(id, Mono::now(), ending);
                drop(hold); // closing the connection releases
                Outcome::Granted
            }
            Ok(Answer::Refused { code, .. }) => ctx.refused(kind, code.as_str()),
            // A stream that does not start with `acquired` is a protocol
            // error: malformed.
            Err(e) => ctx.failed(kind, &e, "hold"),
        };
        let pause = backoff(outcome) + Duration::from_millis(between(&mut rng, ctx.plan.think_ms));
        ctx.sleep(pause).await;
    }
}

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
//!
//! Every client asks for a fence (`redlock-agent lock` only when it has
//! `--fence`) and writes once inside each section to the fenced store
//! ([`crate::store`]) with it: plain acquires just before they leave the
//! section, holds just after the grant.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlock_wire::HoldEvent;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use crate::checker::{Checker, ClientKind, Ending, Grant, Primitive, SectionId, StoreWrite};
use crate::client::{
    self, next_campaign_event, next_event, AcquireOptions, Answer, CampaignNext, CampaignOptions,
    Client, Error, ErrorCode, Held, HoldNext, HoldOptions, PermitHoldOptions, PermitOptions,
};
use crate::clock::Mono;
use crate::store::{self, StoreClient};
use redlock_wire::CampaignEvent;

mod holding;
mod mix;
mod multi;

use holding::{keep, HoldEvents};

pub use mix::{spawn, Mix};

/// What the system is going through, for availability by phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Quiet = 0,
    Faulted = 1,
    Recovering = 2,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Quiet, Phase::Faulted, Phase::Recovering];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Quiet => "quiet",
            Phase::Faulted => "faulted",
            Phase::Recovering => "recovering",
        }
    }

    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Faulted,
            2 => Phase::Recovering,
            _ => Phase::Quiet,
        }
    }
}

/// The shared phase flag the nemesis sets.
#[derive(Debug, Default)]
pub struct PhaseFlag(AtomicU8);

impl PhaseFlag {
    pub fn set(&self, phase: Phase) {
        self.0.store(phase as u8, Ordering::Relaxed);
    }

    pub fn get(&self) -> Phase {
        Phase::from_u8(self.0.load(Ordering::Relaxed))
    }
}

/// How one lock attempt (acquire or hold) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Granted,
    Taken,
    NoQuorum,
    /// Any other refusal (`too_many_waiters`, ...).
    Refused,
    /// The agent's socket did not accept the connection (agent down).
    Unreachable,
    /// Connected but no whole answer (agent killed mid-request, or slow).
    NoAnswer,
    /// An answer that breaks the API contract.
    Malformed,
}

/// Attempt counts of one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub attempts: u64,
    pub granted: u64,
    pub taken: u64,
    pub no_quorum: u64,
    pub refused: u64,
    pub unreachable: u64,
    pub no_answer: u64,
    pub malformed: u64,
}

impl Counts {
    fn add(&mut self, outcome: Outcome) {
        self.attempts += 1;
        match outcome {
            Outcome::Granted => self.granted += 1,
            Outcome::Taken => self.taken += 1,
            Outcome::NoQuorum => self.no_quorum += 1,
            Outcome::Refused => self.refused += 1,
            Outcome::Unreachable => self.unreachable += 1,
            Outcome::NoAnswer => self.no_answer += 1,
            Outcome::Malformed => self.malformed += 1,
        }
    }

    /// Attempts an agent answered (not unreachable, not unanswered).
    pub fn answered(&self) -> u64 {
        self.granted + self.taken + self.no_quorum + self.refused + self.malformed
    }

    pub fn merge(&mut self, other: &Counts) {
        self.attempts += other.attempts;
        self.granted += other.granted;
        self.taken += other.taken;
        self.no_quorum += other.no_quorum;
        self.refused += other.refused;
        self.unreachable += other.unreachable;
        self.no_answer += other.no_answer;
        self.malformed += other.malformed;
    }
}

/// Everything the clients did, by phase and by kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatsSnapshot {
    pub by_phase: Vec<(String, Counts)>,
    pub by_kind: Vec<(String, Counts)>,
    pub extends: u64,
    pub extends_lost: u64,
    pub renewals: u64,
    pub releases: u64,
    pub releases_false: u64,
    pub releases_unanswered: u64,
    pub holds_lost: u64,
    pub holds_broken: u64,
    /// Contract breaches, with what was received (a few).
    pub malformed_samples: Vec<String>,
    pub refusal_codes: Vec<(String, u64)>,
    /// `/v1/nodes` readings by phase: (readings, without a usable quorum).
    pub quorum_readings: Vec<(String, u64, u64)>,
}

impl StatsSnapshot {
    pub fn total(&self) -> Counts {
        let mut total = Counts::default();
        for (_, c) in &self.by_phase {
            total.merge(c);
        }
        total
    }

    /// Requests made: attempts, extends and releases.
    pub fn operations(&self) -> u64 {
        self.total().attempts + self.extends + self.releases + self.releases_unanswered
    }
}

/// Thread-safe stats.
#[derive(Debug, Default)]
pub struct Stats {
    // A std Mutex: counter bumps only.
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_phase: HashMap<&'static str, Counts>,
    by_kind: HashMap<&'static str, Counts>,
    snapshot: StatsSnapshot,
    codes: HashMap<String, u64>,
    readings: HashMap<&'static str, (u64, u64)>,
}

impl Stats {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn attempt(&self, phase: Phase, kind: ClientKind, outcome: Outcome) {
        let mut inner = self.lock();
        inner
            .by_phase
            .entry(phase.as_str())
            .or_default()
            .add(outcome);
        inner.by_kind.entry(kind.as_str()).or_default().add(outcome);
    }

    /// One `/v1/nodes` reading of one agent: a usable quorum or not.
    pub fn quorum_reading(&self, phase: Phase, available: bool) {
        let mut inner = self.lock();
        let r = inner.readings.entry(phase.as_str()).or_default();
        r.0 += 1;
        r.1 += u64::from(!available);
    }

    fn code(&self, code: &str) {
        *self.lock().codes.entry(code.to_string()).or_default() += 1;
    }

    fn malformed(&self, what: String) {
        let mut inner = self.lock();
        if inner.snapshot.malformed_samples.len() < 10 {
            inner.snapshot.malformed_samples.push(what);
        }
    }

    fn bump(&self, f: impl FnOnce(&mut StatsSnapshot)) {
        f(&mut self.lock().snapshot);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let inner = self.lock();
        let mut s = inner.snapshot.clone();
        s.by_phase = Phase::ALL
            .iter()
            .map(|p| {
                (
                    p.as_str().to_string(),
                    inner.by_phase.get(p.as_str()).cloned().unwrap_or_default(),
                )
            })
            .collect();
        let mut kinds: Vec<(String, Counts)> = inner
            .by_kind
            .iter()
            .map(|(k, c)| (k.to_string(), c.clone()))
            .collect();
        kinds.sort_by(|a, b| a.0.cmp(&b.0));
        s.by_kind = kinds;
        let mut codes: Vec<(String, u64)> =
            inner.codes.iter().map(|(k, v)| (k.clone(), *v)).collect();
        codes.sort();
        s.refusal_codes = codes;
        s.quorum_readings = Phase::ALL
            .iter()
            .map(|p| {
                let (n, down) = inner.readings.get(p.as_str()).copied().unwrap_or_default();
                (p.as_str().to_string(), n, down)
            })
            .collect();
        s
    }
}

/// Running client processes the nemesis may kill.
#[derive(Debug, Default)]
pub struct Processes {
    // A std Mutex: inserts and removals only.
    inner: Mutex<HashMap<u32, Running>>,
}

/// A client process and the section it is in, if any.
#[derive(Debug, Clone)]
pub struct Running {
    pub client: String,
    pub kind: ClientKind,
    pub section: Option<(SectionId, String)>,
}

impl Processes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Running>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, pid: u32, running: Running) {
        self.lock().insert(pid, running);
    }

    fn entered(&self, pid: u32, id: SectionId, token: String) {
        if let Some(r) = self.lock().get_mut(&pid) {
            r.section = Some((id, token));
        }
    }

    fn left(&self, pid: u32) {
        if let Some(r) = self.lock().get_mut(&pid) {
            r.section = None;
        }
    }

    fn remove(&self, pid: u32) {
        self.lock().remove(&pid);
    }

    /// A process inside a section, chosen with `pick` among them.
    pub fn inside(&self, pick: usize) -> Option<(u32, Running)> {
        let map = self.lock();
        let mut inside: Vec<(u32, Running)> = map
            .iter()
            .filter(|(_, r)| r.section.is_some())
            .map(|(p, r)| (*p, r.clone()))
            .collect();
        inside.sort_by_key(|(p, _)| *p);
        if inside.is_empty() {
            None
        } else {
            Some(inside.swap_remove(pick % inside.len()))
        }
    }

    /// Forgets the section of a killed process so its exit is not reported twice.
    pub fn killed(&self, pid: u32) {
        self.left(pid);
    }
}

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

/// An acquire client until stop: of locks, or (`kind`
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
    while !ctx.stopped() {
        let resource = ctx.plan.resources[rng.random_range(0..ctx.plan.resources.len())].clone();
        let ttl_ms = between(&mut rng, ctx.plan.ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let options = AcquireOptions::new()
            .ttl(Duration::from_millis(ttl_ms))
            .wait(Duration::from_millis(wait_ms))
            .owner(name.clone())
            .fence();
        let requested = Mono::now();
        let outcome = match client.acquire(&resource, &options).await {
            Ok(Answer::Ok(grant)) => {
                let granted = Mono::now();
                ctx.record(kind, Outcome::Granted);
                let id = ctx.checker.enter(
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
                );
                let held = Held::Lock(resource.clone());
                let granted_as = (
                    grant.token.as_str(),
                    client::ms(grant.validity),
                    grant.fence,
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

/// Opens a hold of `kind`: of a lock (`ClientKind::Hold`) or of a permit
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
    let options = HoldOptions::new().ttl(ttl).wait(wait).owner(owner).fence();
    Ok(match client.hold(&resource, &options).await? {
        Answer::Ok(hold) => Answer::Ok((hold, resource, Primitive::Lock)),
        Answer::Refused { code, message } => Answer::Refused { code, message },
    })
}

/// A hold client (in this process) until stop: of locks, or (`kind`
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
                let data = format!("{resource} by {}", &token[..token.len().min(8)]);
                ctx.write(id, &resource, fence, &data).await;
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

/// A campaigner until stop: campaigns for one of the plan's elections,
/// waits up to a wait drawn from the plan to be elected (else resigns: a
/// `taken` attempt), leads for a hold's time drawn from the plan, then
/// resigns by closing the stream. Its section is the leadership: from
/// `elected`'s arrival, its token the campaigner's own name for it (the
/// agent never shows a leadership's token), its fence the term; its
/// request time is the campaign's start.
pub async fn campaign_client(mut ctx: Ctx, name: String, agent: usize, client: Client, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let kind = ClientKind::Campaign;
    let mut terms = 0u64;
    while !ctx.stopped() {
        let election = ctx.plan.elections[rng.random_range(0..ctx.plan.elections.len())].clone();
        let ttl_ms = between(&mut rng, ctx.plan.hold_ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let hold_ms = between(&mut rng, ctx.plan.hold_ms);
        let options = CampaignOptions::new()
            .ttl(Duration::from_millis(ttl_ms))
            .owner(name.clone())
            .value(format!("{name} at a{}", agent + 1));
        let requested = Mono::now();
        let outcome = match client.campaign(&election, &options).await {
            Ok(Answer::Ok(mut campaign)) => {
                let give_up = requested.plus_ms(wait_ms);
                let elected = loop {
                    let mut stop = ctx.stop.clone();
                    tokio::select! {
                        () = tokio::time::sleep(give_up.since(Mono::now())) => break Err(Unelected::GaveUp),
                        _ = stop.changed() => break Err(Unelected::GaveUp),
                        next = next_campaign_event(&mut campaign) => match next {
                            CampaignNext::Event(CampaignEvent::Elected { term, validity_ms, .. }) => {
                                break Ok((term, validity_ms));
                            }
                            CampaignNext::Event(CampaignEvent::Waiting { .. }) => {}
                            // The agent ended the campaign (`shutdown`,
                            // `too_many_waiters`): a refusal.
                            CampaignNext::Event(CampaignEvent::Lost { reason }) => {
                                break Err(Unelected::Ended(reason));
                            }
                            CampaignNext::Event(other) => {
                                break Err(Unelected::Malformed(format!("before elected: {other:?}")));
                            }
                            // The agent went away (killed, drained).
                            CampaignNext::Ended | CampaignNext::Broken(_) => break Err(Unelected::Broken),
                        }
                    }
                };
                match elected {
                    Ok((term, validity_ms)) => {
                        let granted = Mono::now();
                        terms += 1;
                        ctx.record(kind, Outcome::Granted);
                        let resource = Primitive::election_resource(&election);
                        let id = ctx.checker.enter_as(
                            Grant {
                                resource: resource.clone(),
                                client: name.clone(),
                                kind,
                                agent,
                                token: format!("{name} leadership {terms}"),
                                ttl_ms,
                                requested,
                                granted,
                                validity_ms: Some(validity_ms),
                                fence: Some(term),
                            },
                            granted,
                            Primitive::Leadership {
                                election: election.clone(),
                                term,
                            },
                        );
                        let data = format!("{election} led by {name} in term {term}");
                        ctx.write(id, &resource, Some(term), &data).await;
                        let ending =
                            lead(&mut ctx, &mut campaign, id, granted.plus_ms(hold_ms)).await;
                        ctx.checker.exit(id, Mono::now(), ending);
                        drop(campaign); // closing the stream resigns
                        Outcome::Granted
                    }
                    Err(Unelected::GaveUp) => {
                        // Not elected within the wait (or the run ended).
                        drop(campaign);
                        ctx.refused(kind, "taken")
                    }
                    Err(Unelected::Ended(reason)) => ctx.refused(kind, &format!("lost:{reason}")),
                    Err(Unelected::Broken) => {
                        ctx.record(kind, Outcome::NoAnswer);
                        Outcome::NoAnswer
                    }
                    Err(Unelected::Malformed(what)) => {
                        ctx.stats.malformed(format!("campaign: {what}"));
                        ctx.record(kind, Outcome::Malformed);
                        Outcome::Malformed
                    }
                }
            }
            Ok(Answer::Refused { code, .. }) => ctx.refused(kind, code.as_str()),
            Err(e) => ctx.failed(kind, &e, "campaign"),
        };
        let pause = backoff(outcome) + Duration::from_millis(between(&mut rng, ctx.plan.think_ms));
        ctx.sleep(pause).await;
    }
}

/// Why a campaign ended without this campaigner being elected.
enum Unelected {
    /// Not elected within the wait, or the run stopped: it resigned.
    GaveUp,
    /// The agent said `lost` before `elected`, with this reason.
    Ended(String),
    /// The stream ended or broke: the agent went away.
    Broken,
    /// An event that has no place before `elected`.
    Malformed(String),
}

/// A leader's time: reads the campaign's renewals into the checker until
/// `until`, `lost`, the stream's end or the run's stop; how it ended.
async fn lead(
    ctx: &mut Ctx,
    campaign: &mut client::Campaign,
    id: SectionId,
    until: Mono,
) -> Ending {
    let mut stop = ctx.stop.clone();
    loop {
        tokio::select! {
            () = tokio::time::sleep(until.since(Mono::now())) => return Ending::Closed,
            _ = stop.changed() => return Ending::Closed,
            next = next_campaign_event(campaign) => {
                let at = Mono::now();
                match next {
                    CampaignNext::Event(CampaignEvent::Renewed { validity_ms }) => {
                        ctx.stats.bump(|s| s.renewals += 1);
                        ctx.checker.renewed(id, at, at, validity_ms);
                    }
                    CampaignNext::Event(CampaignEvent::Lost { reason }) => {
                        ctx.stats.bump(|s| s.holds_lost += 1);
                        ctx.checker.belief_ended(id, at);
                        return Ending::Lost { reason };
                    }
                    CampaignNext::Event(CampaignEvent::Waiting { .. }) => {
                        // Told another leads: stop leading.
                        ctx.stats.malformed("campaign: `waiting` while leading".into());
                        ctx.checker.belief_ended(id, at);
                        return Ending::Lost { reason: "waiting while leading".into() };
                    }
                    CampaignNext::Event(CampaignEvent::Elected { .. }) => {
                        ctx.stats.malformed("campaign: a second `elected`".into());
                    }
                    CampaignNext::Ended | CampaignNext::Broken(_) => {
                        ctx.stats.bump(|s| s.holds_broken += 1);
                        ctx.checker.belief_ended(id, at);
                        return Ending::StreamBroken;
                    }
                }
            }
        }
    }
}

/// A client that runs one hold per child process (`faults hold-client`) or
/// one `redlock-agent lock` per child process, until stop.
pub async fn process_client(
    mut ctx: Ctx,
    name: String,
    kind: ClientKind,
    agent: usize,
    socket: PathBuf,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !ctx.stopped() {
        let resource = ctx.plan.resources[rng.random_range(0..ctx.plan.resources.len())].clone();
        let ttl_ms = between(&mut rng, ctx.plan.hold_ttl_ms);
        let wait_ms = ctx.plan.waits_ms[rng.random_range(0..ctx.plan.waits_ms.len())];
        let hold_ms = between(&mut rng, ctx.plan.hold_ms);
        let mut command = match kind {
            ClientKind::LockCommand => {
                let mut c = tokio::process::Command::new(&ctx.agent_bin);
                c.arg("lock")
                    .arg("--socket")
                    .arg(&socket)
                    .arg("--ttl")
                    .arg(format!("{ttl_ms}ms"))
                    .arg("--wait")
                    .arg(format!("{wait_ms}ms"))
                    .arg("--kill-after")
                    .arg("100ms")
                    .arg("--owner")
                    .arg(&name);
                if ctx.lock_fence {
                    c.arg("--fence");
                }
                c.arg(&resource)
                    .arg("--")
                    .arg(&ctx.faults_bin)
                    .arg("cs-child")
                    .arg("--ms")
                    .arg(hold_ms.to_string());
                if let Some((_, url)) = &ctx.store {
                    c.arg("--store").arg(url).arg("--resource").arg(&resource);
                }
                c
            }
            _ => {
                let mut c = tokio::process::Command::new(&ctx.faults_bin);
                c.arg("hold-client")
                    .arg("--socket")
                    .arg(&socket)
                    .arg("--resource")
                    .arg(&resource)
                    .arg("--ttl-ms")
                    .arg(ttl_ms.to_string())
                    .arg("--wait-ms")
                    .arg(wait_ms.to_string())
                    .arg("--hold-ms")
                    .arg(hold_ms.to_string())
                    .arg("--owner")
                    .arg(&name);
                if let Some((_, url)) = &ctx.store {
                    c.arg("--store").arg(url);
                }
                c
            }
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let requested = Mono::now();
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                ctx.stats
                    .malformed(format!("cannot start a {} client: {e}", kind.as_str()));
                ctx.sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let pid = child.id().unwrap_or(0);
        ctx.processes.add(
            pid,
            Running {
                client: name.clone(),
                kind,
                section: None,
            },
        );
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let err_text = tokio::spawn(async move {
            let mut text = String::new();
            if let Some(mut e) = stderr {
                use tokio::io::AsyncReadExt;
                let _ = e.read_to_string(&mut text).await;
            }
            text
        });
        let mut section: Option<SectionId> = None;
        let mut outcome: Option<Outcome> = None;
        if let Some(out) = stdout {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let words: Vec<&str> = line.split(' ').collect();
                let at = words
                    .get(1)
                    .and_then(|w| Mono::from_wire(w))
                    .unwrap_or_else(Mono::now);
                match words.first().copied() {
                    Some("acquired" | "enter") => {
                        let token = words.get(2).unwrap_or(&"?").to_string();
                        let validity_ms = match kind {
                            ClientKind::LockCommand => None,
                            _ => words.get(3).and_then(|w| w.parse().ok()),
                        };
                        let requested = match kind {
                            ClientKind::LockCommand => None,
                            _ => words.get(4).and_then(|w| Mono::from_wire(w)),
                        }
                        .unwrap_or(requested);
                        let fence = match kind {
                            ClientKind::LockCommand => words.get(3),
                            _ => words.get(5),
                        }
                        .and_then(|w| w.parse().ok());
                        outcome = Some(Outcome::Granted);
                        ctx.record(kind, Outcome::Granted);
                        let id = ctx.checker.enter(
                            Grant {
                                resource: resource.clone(),
                                client: name.clone(),
                                kind,
                                agent,
                                token: token.clone(),
                                ttl_ms,
                                requested,
                                granted: at,
                                validity_ms,
                                fence,
                            },
                            at,
                        );
                        ctx.processes.entered(pid, id, token);
                        section = Some(id);
                    }
                    Some("write") => {
                        if let (Some(id), Some(word), Some(number)) =
                            (section, words.get(2), words.get(3))
                        {
                            let outcome = store::outcome_from_wire(word, number);
                            ctx.checker.wrote(id, StoreWrite { at, outcome });
                        }
                    }
                    Some("renewed") => {
                        if let (Some(id), Some(v)) =
                            (section, words.get(2).and_then(|w| w.parse().ok()))
                        {
                            ctx.stats.bump(|s| s.renewals += 1);
                            ctx.checker.renewed(id, at, at, v);
                        }
                    }
                    Some("lost") => {
                        if let Some(id) = section {
                            ctx.stats.bump(|s| s.holds_lost += 1);
                            ctx.checker.belief_ended(id, at);
                        }
                    }
                    Some("exit") => {
                        if let Some(id) = section {
                            let why = words.get(2).copied().unwrap_or("done");
                            let ending = match why {
                                "done" => Ending::Closed,
                                "broken" => {
                                    ctx.stats.bump(|s| s.holds_broken += 1);
                                    ctx.checker.belief_ended(id, at);
                                    Ending::StreamBroken
                                }
                                other => Ending::Lost {
                                    reason: other.to_string(),
                                },
                            };
                            if why == "sigterm" {
                                ctx.checker.belief_ended(id, at);
                            }
                            ctx.checker.exit(id, at, ending);
                        }
                        ctx.processes.left(pid);
                    }
                    Some("refused") => {
                        let code = words.get(2).copied().unwrap_or("?");
                        outcome = Some(ctx.refused(kind, code));
                    }
                    Some("unreachable") => outcome = Some(Outcome::Unreachable),
                    Some("noanswer") => outcome = Some(Outcome::NoAnswer),
                    _ => {}
                }
            }
        }
        let status = child.wait().await;
        ctx.processes.remove(pid);
        let stderr = err_text.await.unwrap_or_default();
        let outcome = match outcome {
            // Recorded when they were read.
            Some(
                o @ (Outcome::Granted | Outcome::Taken | Outcome::NoQuorum | Outcome::Refused),
            ) => o,
            Some(o) => {
                ctx.record(kind, o);
                o
            }
            None => {
                // The lock command says why on its exit code and stderr.
                use std::os::unix::process::ExitStatusExt;
                let code = status.as_ref().ok().and_then(|s| s.code());
                let killed = status.as_ref().ok().and_then(|s| s.signal()).is_some();
                match code {
                    Some(75) => ctx.refused(kind, "taken"),
                    Some(69) if stderr.contains("no quorum") => ctx.refused(kind, "no_quorum"),
                    Some(69) => {
                        ctx.record(kind, Outcome::Unreachable);
                        Outcome::Unreachable
                    }
                    _ if killed => Outcome::NoAnswer,
                    _ => {
                        ctx.record(kind, Outcome::NoAnswer);
                        Outcome::NoAnswer
                    }
                }
            }
        };
        let pause = backoff(outcome) + Duration::from_millis(between(&mut rng, ctx.plan.think_ms));
        ctx.sleep(pause).await;
    }
}

/// `faults hold-client`: one hold, reported on stdout as lines of
/// `<event> <mono_ns> ...`, for [`process_client`].
///
/// Lines: `acquired <t> <token> <validity_ms> <requested_t> <fence|->`,
/// `write <t> accepted <seq>|refused <highest>|failed -` (with a store
/// and a fence, right after `acquired`), `renewed <t> <validity_ms>`,
/// `lost <t> <reason>`,
/// `exit <t> done|broken|<lost reason>`, `refused <t> <code>`,
/// `unreachable <t>`, `noanswer <t>`. `exit` is printed before the
/// connection closes, so it precedes the release.
pub async fn run_hold_client(
    socket: PathBuf,
    resource: String,
    ttl_ms: u64,
    wait_ms: u64,
    hold_ms: u64,
    owner: String,
    store: Option<String>,
) {
    use std::io::Write;
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let client = Client::new(socket);
    let options = HoldOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .wait(Duration::from_millis(wait_ms))
        .owner(owner)
        .fence();
    let store = match store {
        Some(url) => StoreClient::connect(&url).await.ok(),
        None => None,
    };
    let requested = Mono::now();
    match client.hold(&resource, &options).await {
        Ok(Answer::Ok(mut hold)) => {
            let granted = Mono::now();
            let (token, fence) = (hold.token().to_string(), hold.fence());
            say(format!(
                "acquired {} {token} {} {} {}",
                granted.to_wire(),
                client::ms(hold.validity()),
                requested.to_wire(),
                fence.map_or("-".to_string(), |f| f.to_string())
            ));
            if let (Some(store), Some(fence)) = (&store, fence) {
                let data = format!("{resource} by {}", &token[..token.len().min(8)]);
                let outcome = store.write(&resource, fence, &data).await;
                say(format!(
                    "write {} {}",
                    Mono::now().to_wire(),
                    store::outcome_to_wire(&outcome)
                ));
            }
            let end = granted.plus_ms(hold_ms);
            let why = loop {
                tokio::select! {
                    () = tokio::time::sleep(end.since(Mono::now())) => break "done".to_string(),
                    next = next_event(&mut hold) => match next {
                        HoldNext::Event(HoldEvent::Renewed { validity_ms }) => {
                            say(format!("renewed {} {validity_ms}", Mono::now().to_wire()));
                        }
                        HoldNext::Event(HoldEvent::Lost { reason }) => {
                            say(format!("lost {} {reason}", Mono::now().to_wire()));
                            break reason;
                        }
                        HoldNext::Event(HoldEvent::Acquired { .. }) => {}
                        HoldNext::Ended | HoldNext::Broken(_) => break "broken".to_string(),
                    }
                }
            };
            say(format!("exit {} {why}", Mono::now().to_wire()));
            drop(hold);
        }
        Ok(Answer::Refused { code, .. }) => say(format!(
            "refused {} {}",
            Mono::now().to_wire(),
            code.as_str()
        )),
        Err(Error::Connect { .. }) => say(format!("unreachable {}", Mono::now().to_wire())),
        Err(_) => say(format!("noanswer {}", Mono::now().to_wire())),
    }
}

static TERMINATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigterm(_: libc::c_int) {
    TERMINATED.store(true, Ordering::SeqCst);
}

/// `faults cs-child --ms N [--store URL --resource R]`: the command
/// `redlock-agent lock` runs. Prints `enter <t> <token> <fence|->`; with a
/// store and `REDLOCK_FENCE` set, writes to it once and prints `write <t>
/// ...` as `hold-client` does; works (sleeps) for `ms` or until SIGTERM
/// (the lock was lost), prints `exit <t> done|sigterm`.
pub fn run_cs_child(ms: u64, store: Option<(String, String)>) {
    use std::io::Write;
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_sigterm as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    let token = std::env::var("REDLOCK_TOKEN").unwrap_or_else(|_| "?".into());
    let fence: Option<u64> = std::env::var("REDLOCK_FENCE")
        .ok()
        .and_then(|f| f.parse().ok());
    let entry = Mono::now();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "enter {} {token} {}",
        entry.to_wire(),
        fence.map_or("-".to_string(), |f| f.to_string())
    );
    let _ = out.flush();
    if let (Some((url, resource)), Some(fence)) = (store, fence) {
        let data = format!("{resource} by {}", &token[..token.len().min(8)]);
        let outcome = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .map(|rt| {
                rt.block_on(async {
                    match StoreClient::connect(&url).await {
                        Ok(store) => store.write(&resource, fence, &data).await,
                        Err(error) => crate::checker::WriteOutcome::Failed { error },
                    }
                })
            })
            .unwrap_or_else(|error| crate::checker::WriteOutcome::Failed { error });
        let _ = writeln!(
            out,
            "write {} {}",
            Mono::now().to_wire(),
            store::outcome_to_wire(&outcome)
        );
        let _ = out.flush();
    }
    let end = entry.plus_ms(ms);
    let why = loop {
        if TERMINATED.load(Ordering::SeqCst) {
            break "sigterm";
        }
        if Mono::now() >= end {
            break "done";
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let _ = writeln!(out, "exit {} {why}", Mono::now().to_wire());
    let _ = out.flush();
}

//! Clients in child processes, so the nemesis can SIGKILL them mid-section:
//! `faults hold-client` and `redlock-agent lock -- faults cs-child`, their
//! lines read back into the checker, and the registry of those running.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlock_wire::HoldEvent;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{backoff, between, Ctx, Outcome};
use crate::checker::{ClientKind, Ending, Grant, SectionId, StoreWrite};
use crate::client::{self, next_event, Answer, Client, Error, HoldNext, HoldOptions};
use crate::clock::Mono;
use crate::store::{self, StoreClient};

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

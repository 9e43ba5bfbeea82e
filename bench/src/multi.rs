//! W13, locks on several resources at once (the agent only): in one run,
//! through the run's agent over the same masters, what a lock on
//! [`RESOURCES`] resources costs next to [`RESOURCES`] single locks.
//!
//! Each client has its own connection (keep-alive) and [`RESOURCES`]
//! resources of its own, and loops until the window ends, first one kind,
//! then the other at the same client count:
//! - `multi`: `POST /v1/locks/acquire` of the resources, then
//!   `POST /v1/locks/release` of its token (2 requests);
//! - `singles`: `POST /v1/locks/{r}/acquire` of each in turn, then
//!   `POST /v1/locks/{r}/release` of each (6 requests), so that all of
//!   them are held at once, as with the multi-resource lock.
//!
//! Cycles/s and the cycle's p50/p99; multi / singles is the result, and
//! nothing here is a timed assertion. The multi-resource calls go through
//! a small HTTP/1.1 client of their own ([`Conn`]), the single locks
//! through `redlock-client`, each on one keep-alive connection.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use redlock_client::{AcquireOptions, Client, Error};
use redlock_wire::{
    ErrorResponse, MultiAcquireRequest, MultiAcquireResponse, MultiReleaseRequest, ReleaseResponse,
};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::spec::Percentiles;
use crate::stats::{ms, percentiles};

/// Resources per cycle.
pub const RESOURCES: usize = 3;
/// Client counts, in a full run and in the smoke run.
pub const CLIENTS: [usize; 2] = [1, 16];
pub const SMOKE_CLIENTS: [usize; 2] = [1, 4];
/// The smoke run's warm-up and window of each run, at most.
const SMOKE_WARMUP: Duration = Duration::from_millis(100);
const SMOKE_WINDOW: Duration = Duration::from_millis(400);
/// TTL of every lock: as the other workloads.
const TTL_MS: u64 = 10_000;
/// Past the wait asked for, the longest an answer may take.
const SLACK: Duration = Duration::from_secs(5);

/// Cycles of one kind at one client count.
#[derive(Debug, Clone, Serialize)]
pub struct Cycles {
    /// `multi` or `singles`.
    pub kind: &'static str,
    pub clients: usize,
    pub cycles_per_s: f64,
    /// Acquire + release of every resource, ms, cycles that ended in the
    /// window.
    pub cycle: Percentiles,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// What W13 measured.
#[derive(Debug, Clone, Serialize)]
pub struct Multi {
    pub resources: usize,
    pub cycles: Vec<Cycles>,
}

impl Multi {
    pub fn cycles(&self, kind: &str, clients: usize) -> Option<&Cycles> {
        self.cycles
            .iter()
            .find(|c| c.kind == kind && c.clients == clients)
    }

    /// Whether anything failed (the smoke run fails on it).
    pub fn failed(&self) -> bool {
        self.cycles.iter().any(|c| c.errors > 0)
    }
}

/// Runs W13 through the agent listening on `socket`.
///
/// # Errors
/// When no runtime can be built or a client cannot connect; failed
/// cycles are counted in the result instead.
pub fn measure(
    socket: &Path,
    smoke: bool,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Multi> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (counts, warmup, window): (&[usize], _, _) = if smoke {
        (
            &SMOKE_CLIENTS,
            warmup.min(SMOKE_WARMUP),
            window.min(SMOKE_WINDOW),
        )
    } else {
        (&CLIENTS, warmup, window)
    };
    runtime.block_on(async {
        let mut result = Multi {
            resources: RESOURCES,
            cycles: Vec::new(),
        };
        for &clients in counts {
            for kind in ["multi", "singles"] {
                eprintln!("W13: {kind} cycles of {RESOURCES} resources, {clients} client(s)");
                result
                    .cycles
                    .push(cycles(socket, kind, clients, warmup, window).await?);
            }
        }
        Ok(result)
    })
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

/// One client's connection: a multi-resource one, or `redlock-client`.
enum Caller {
    Multi(Conn),
    Singles(Client),
}

async fn cycles(
    socket: &Path,
    kind: &'static str,
    clients: usize,
    warmup: Duration,
    window: Duration,
) -> anyhow::Result<Cycles> {
    let mut callers = Vec::with_capacity(clients);
    for _ in 0..clients {
        callers.push(if kind == "multi" {
            Caller::Multi(Conn::connect(socket).await?)
        } else {
            let client = Client::new(socket);
            client
                .connect()
                .await
                .with_context(|| format!("connect {}", socket.display()))?;
            Caller::Singles(client)
        });
    }
    let start = Instant::now() + warmup;
    let end = start + window;
    let tasks: Vec<_> = callers
        .into_iter()
        .enumerate()
        .map(|(index, mut caller)| {
            tokio::spawn(async move {
                let resources: Vec<String> = (0..RESOURCES)
                    .map(|r| format!("bench-w13-{kind}-{clients}-{index}-{r}"))
                    .collect();
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
                    let outcome = match &mut caller {
                        Caller::Multi(conn) => multi_cycle(conn, &resources, &owner, wait).await,
                        Caller::Singles(client) => singles_cycle(client, &resources, &owner, wait)
                            .await
                            .map_err(anyhow::Error::from),
                    };
                    let ended = Instant::now();
                    match outcome {
                        Ok(()) => {
                            if ended >= start && ended <= end {
                                tally.cycles += 1;
                                tally.samples.push(ms(ended - began));
                            }
                        }
                        Err(e) => {
                            tally.error(format!("{kind}: {e}"));
                            // Not a busy loop on a broken agent.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            if let Caller::Multi(conn) = &mut caller {
                                // The connection may be out of step.
                                match Conn::connect(&conn.socket).await {
                                    Ok(fresh) => *conn = fresh,
                                    Err(_) => break,
                                }
                            }
                        }
                    }
                }
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await.context("a W13 client panicked")?;
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

/// One lock on every resource, then its release.
async fn multi_cycle(
    conn: &mut Conn,
    resources: &[String],
    owner: &str,
    wait: Duration,
) -> anyhow::Result<()> {
    let request = MultiAcquireRequest {
        resources: resources.to_vec(),
        ttl_ms: Some(TTL_MS),
        wait_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
        owner: Some(owner.to_string()),
        fence: false,
    };
    let grant: MultiAcquireResponse = conn.post("/v1/locks/acquire", &request, wait).await?;
    if grant.resources.len() != resources.len() {
        bail!("granted {:?} for {resources:?}", grant.resources);
    }
    let release = MultiReleaseRequest {
        token: grant.token,
        resources: None,
    };
    let released: ReleaseResponse = conn
        .post("/v1/locks/release", &release, Duration::ZERO)
        .await?;
    if !released.released {
        bail!("released=false: it had expired");
    }
    Ok(())
}

/// A single lock on each resource in turn, then the release of each.
async fn singles_cycle(
    client: &Client,
    resources: &[String],
    owner: &str,
    wait: Duration,
) -> Result<(), Error> {
    let options = AcquireOptions::new()
        .ttl(Duration::from_millis(TTL_MS))
        .wait(wait)
        .owner(owner.to_string());
    let mut tokens = Vec::with_capacity(resources.len());
    for resource in resources {
        tokens.push(client.acquire(resource, &options).await?.token);
    }
    for (resource, token) in resources.iter().zip(&tokens) {
        if !client.release(resource, token).await? {
            return Err(Error::Protocol("released=false: it had expired".into()));
        }
    }
    Ok(())
}

/// One keep-alive HTTP/1.1 connection to the agent's socket, for the
/// multi-resource calls (`redlock-client` has none).
///
/// ## Behavior
/// - Answers are read by `content-length` (the agent's JSON answers carry
///   one); anything else is an error, and the caller opens a new
///   connection after any error.
/// - Each call is bounded by its wait plus [`SLACK`].
struct Conn {
    socket: std::path::PathBuf,
    stream: BufReader<UnixStream>,
}

impl Conn {
    async fn connect(socket: &Path) -> anyhow::Result<Conn> {
        let stream = UnixStream::connect(socket)
            .await
            .with_context(|| format!("connect {}", socket.display()))?;
        Ok(Conn {
            socket: socket.to_path_buf(),
            stream: BufReader::new(stream),
        })
    }

    /// POSTs `body` as JSON to `path` and reads a 200 answer as `T`; an
    /// API error as its code and message.
    async fn post<T: serde::de::DeserializeOwned>(
        &mut self,
        path: &str,
        body: &impl Serialize,
        wait: Duration,
    ) -> anyhow::Result<T> {
        let body = serde_json::to_vec(body)?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let exchange = async {
            let stream = self.stream.get_mut();
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&body).await?;
            self.read().await
        };
        let (status, answer) = tokio::time::timeout(wait + SLACK, exchange)
            .await
            .with_context(|| format!("{path}: no answer within {:?}", wait + SLACK))??;
        if status == 200 {
            return serde_json::from_slice(&answer)
                .with_context(|| format!("{path}: {}", String::from_utf8_lossy(&answer)));
        }
        match serde_json::from_slice::<ErrorResponse>(&answer) {
            Ok(e) => bail!(
                "{path}: {status} {}: {}",
                e.error.code.as_str(),
                e.error.message
            ),
            Err(_) => bail!("{path}: {status}: {}", String::from_utf8_lossy(&answer)),
        }
    }

    /// One answer: its status and body.
    async fn read(&mut self) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            bail!("the agent closed the connection");
        }
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("status line {line:?}"))?;
        let mut length = None;
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                bail!("the agent closed the connection in the head");
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse::<usize>().ok();
                }
            }
        }
        let length = length.context("an answer without content-length")?;
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok((status, body))
    }
}

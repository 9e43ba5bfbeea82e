//! W8, idle connections: what the agent's memory does when many
//! applications keep a connection open and say nothing. 10,000 connections
//! on the agent's socket each send one `GET /healthz`, read the answer and
//! stay open, idle; the agent's resident memory (`VmRSS` in
//! `/proc/PID/status`) is read before, with all of them open, and after
//! they are all closed (polled until it settles, or for a few seconds).
//!
//! The connections are raw Unix streams holding no buffers once answered
//! (the answer is parsed with `httparse`), so this process stays small and
//! only the agent's side is measured.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Idle connections in a full run.
pub const CONNECTIONS: usize = 10_000;
/// Idle connections in the smoke run: it checks that W8 works, no more.
pub const SMOKE_CONNECTIONS: usize = 300;
/// Connections opened at once.
pub const BATCH: usize = 500;
/// Requests on fresh connections, one after the other, before the
/// baseline is read: the agent has served its first connections.
pub const WARMUP_REQUESTS: usize = 100;
/// How long the agent's memory is watched after the connections close.
const SETTLE_FOR: Duration = Duration::from_secs(5);
/// RSS counts as settled when the last readings, 100 ms apart, are this
/// many and within 1% of each other.
const STEADY_READINGS: usize = 10;

const REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n";

/// What W8 measured.
#[derive(Debug, Clone, Serialize)]
pub struct Idle {
    /// Connections asked for.
    pub connections: usize,
    /// Connections that got their `200` and were held open.
    pub answered: usize,
    /// Why the first one that failed did.
    pub first_failure: Option<String>,
    pub seconds_to_open: f64,
    pub rss_before_kib: u64,
    pub rss_open_kib: u64,
    pub rss_after_kib: u64,
    /// Whether RSS had settled (and the agent had closed every connection)
    /// when `rss_after_kib` was read; otherwise it is the reading at the
    /// end of [`SETTLE_FOR`].
    pub settled: bool,
    /// From the close to the reading of `rss_after_kib`.
    pub seconds_to_settle: f64,
    /// The agent's open file descriptors at the three moments.
    pub fds_before: usize,
    pub fds_open: usize,
    pub fds_after: usize,
}

impl Idle {
    /// RSS added per open connection, KiB.
    pub fn kib_per_connection(&self) -> f64 {
        self.rss_open_kib.saturating_sub(self.rss_before_kib) as f64 / self.answered.max(1) as f64
    }
}

/// `VmRSS` of `pid`, KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Raises this process's open-files soft limit to its hard limit; the
/// soft limit now.
fn raise_nofile() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    limit.rlim_cur
}

/// One connection that sent `GET /healthz` and read its `200`, left open.
async fn answered(socket: &Path) -> Result<UnixStream, String> {
    let exchange = async {
        let mut stream = UnixStream::connect(socket)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .write_all(REQUEST)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = Vec::with_capacity(512);
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut response = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head) = response
                .parse(&buf)
                .map_err(|e| format!("bad answer: {e}"))?
            {
                if response.code != Some(200) {
                    return Err(format!(
                        "answered {}: {}",
                        response.code.unwrap_or(0),
                        String::from_utf8_lossy(&buf[head..]).trim()
                    ));
                }
                let length: usize = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                    .ok_or("an answer without content-length")?;
                if buf.len() >= head + length {
                    return Ok(stream);
                }
            }
            let mut chunk = [0u8; 512];
            match stream.read(&mut chunk).await {
                Ok(0) => return Err("closed before the whole answer".into()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .map_err(|_| "no answer in 30 s".to_string())?
}

/// Polls the agent every 100 ms until its RSS has settled and it holds
/// at most `fds_target` descriptors, or `within` passes; the last reading,
/// whether it settled, and how long it took.
async fn settle(pid: u32, fds_target: usize, within: Duration) -> (u64, bool, f64) {
    let started = Instant::now();
    let mut readings: Vec<u64> = Vec::new();
    loop {
        let rss = rss_kib(pid).unwrap_or(0);
        readings.push(rss);
        let last = &readings[readings.len().saturating_sub(STEADY_READINGS)..];
        let (low, high) = last
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        let steady = last.len() == STEADY_READINGS && high - low <= high / 100;
        if steady && fds(pid) <= fds_target {
            return (rss, true, started.elapsed().as_secs_f64());
        }
        if started.elapsed() >= within {
            return (rss, false, started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs W8 against the agent `pid` listening on `socket`.
///
/// # Errors
/// When the open-files limit is too low, the agent cannot be read in
/// `/proc`, or not one connection is answered.
pub fn measure(pid: u32, socket: &Path, connections: usize) -> anyhow::Result<Idle> {
    let nofile = raise_nofile();
    let need = connections as u64 + 256;
    if nofile < need {
        bail!("the open-files limit is {nofile}; {need} are needed (ulimit -Hn)");
    }
    rss_kib(pid).context("cannot read the agent's VmRSS in /proc")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let fds_idle = fds(pid);
        for _ in 0..WARMUP_REQUESTS {
            answered(socket)
                .await
                .map_err(anyhow::Error::msg)
                .context("warm-up request")?;
        }
        let (rss_before_kib, _, _) = settle(pid, fds_idle, Duration::from_secs(3)).await;
        let fds_before = fds(pid);

        let started = Instant::now();
        let mut open: Vec<UnixStream> = Vec::with_capacity(connections);
        let mut failed = 0;
        let mut first_failure = None;
        while open.len() + failed < connections {
            let batch = (connections - open.len() - failed).min(BATCH);
            let results = futures::future::join_all((0..batch).map(|_| answered(socket))).await;
            for r in results {
                match r {
                    Ok(stream) => open.push(stream),
                    Err(e) => {
                        failed += 1;
                        first_failure.get_or_insert(e);
                    }
                }
            }
        }
        let seconds_to_open = started.elapsed().as_secs_f64();
        if open.is_empty() {
            bail!(
                "no connection was answered: {}",
                first_failure.unwrap_or_default()
            );
        }
        // Read once settled, as after the close.
        let fds_open = fds(pid);
        let (rss_open_kib, _, _) = settle(pid, fds_open, Duration::from_secs(3)).await;
        let answered = open.len();
        drop(open);
        let (rss_after_kib, settled, seconds_to_settle) = settle(pid, fds_before, SETTLE_FOR).await;
        Ok(Idle {
            connections,
            answered,
            first_failure,
            seconds_to_open,
            rss_before_kib,
            rss_open_kib,
            rss_after_kib,
            settled,
            seconds_to_settle,
            fds_before,
            fds_open,
            fds_after: fds(pid),
        })
    })
}

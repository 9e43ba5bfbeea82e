//! A master's wall clock, moved by a test: jumped forward or back, frozen,
//! or put back on the real clock, while the process runs.
//!
//! Redis expires keys by its wall clock (`gettimeofday`), so a clock that
//! jumps forward on a majority drops a held lock early, and one that is
//! frozen or jumps back keeps keys past their TTL. A master started with
//! [`crate::Options::clock`] runs with a small `LD_PRELOAD` library (the C
//! source beside this file, built with the system `cc` on first use, once
//! per process) that answers `clock_gettime(CLOCK_REALTIME)`,
//! `gettimeofday` and `time` from a control file in the master's directory;
//! its monotonic clock, which times its event loop, stays real.
//! (libfaketime, the usual tool, cannot start `redis-server` 7.0.)
//!
//! ## Behavior
//! - A move takes effect within a few ms: the library reads the control
//!   file again at most once a millisecond, on the master's next clock read
//!   (it reads it on every command and ten times a second besides).
//! - The control file is replaced by a rename, never written in place, so
//!   the master never reads half a line.
//! - The clock is kept across restarts (same directory, same file): a
//!   master restarted with its clock moved comes back with it moved.
//! - Redis's `TIME`, `INFO server`'s `server_time_usec` and every TTL
//!   follow the moved clock; `uptime_in_seconds` follows it too.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// The library's source, compiled on first use.
const SOURCE: &str = include_str!("clock_shim.c");

/// The environment variable the library reads its control file's path from.
pub const CLOCK_FILE_ENV: &str = "REDLOCK_CLOCK_FILE";

/// Why a master's clock cannot be moved.
#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    #[error("master {0} was started without Options::clock: its clock cannot move")]
    NotShimmed(String),
    #[error(
        "the clock library did not build ({0}); it needs a C compiler as `cc` \
         (`sudo apt-get install -y gcc`)"
    )]
    Build(String),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Where a master's wall clock is, against the real one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Clock {
    /// The real wall clock.
    #[default]
    Real,
    /// The real clock plus this many microseconds (negative: behind).
    Offset(i64),
    /// Stopped at this many microseconds since the epoch.
    Frozen(i64),
}

impl Clock {
    /// What this clock reads, in microseconds since the epoch, when the
    /// real one reads `real_us`.
    pub fn reads(self, real_us: i64) -> i64 {
        match self {
            Clock::Real => real_us,
            Clock::Offset(us) => real_us + us,
            Clock::Frozen(at) => at,
        }
    }

    /// This clock moved by `ms` at once (a frozen one stays frozen there).
    pub fn jumped(self, ms: i64) -> Clock {
        let us = ms.saturating_mul(1000);
        match self {
            Clock::Real => Clock::Offset(us),
            Clock::Offset(off) => Clock::Offset(off + us),
            Clock::Frozen(at) => Clock::Frozen(at + us),
        }
    }

    /// This clock stopped where it reads when the real one reads `real_us`.
    pub fn frozen(self, real_us: i64) -> Clock {
        Clock::Frozen(self.reads(real_us))
    }

    /// This clock running again from where it reads when the real one
    /// reads `real_us` (a frozen clock resumes behind by how long it
    /// stood still).
    pub fn resumed(self, real_us: i64) -> Clock {
        match self {
            Clock::Frozen(at) => Clock::Offset(at - real_us),
            running => running,
        }
    }

    /// How far this clock reads from the real one when that reads `real_us`,
    /// in ms (positive: ahead).
    pub fn offset_ms(self, real_us: i64) -> i64 {
        (self.reads(real_us) - real_us) / 1000
    }

    /// The control file's line; `None` for the real clock (no file).
    fn line(self) -> Option<String> {
        match self {
            Clock::Real => None,
            Clock::Offset(us) => Some(format!("offset {us}\n")),
            Clock::Frozen(at) => Some(format!("freeze {at}\n")),
        }
    }
}

/// The real wall clock now, in microseconds since the epoch.
pub fn real_now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// One shimmed master's clock: its control file and what it says.
#[derive(Debug)]
pub(crate) struct ClockControl {
    library: PathBuf,
    path: PathBuf,
    // A std Mutex: read and replaced around a file write, never across an
    // await.
    clock: Mutex<Clock>,
}

impl ClockControl {
    /// The clock of a master in `dir`, real to begin with (a control file
    /// left there by an earlier process is removed).
    ///
    /// # Errors
    /// When the library does not build, or the old file cannot be removed.
    pub(crate) fn new(dir: &Path) -> Result<ClockControl, ClockError> {
        let control = ClockControl {
            library: library()?,
            path: dir.join("clock"),
            clock: Mutex::new(Clock::Real),
        };
        match std::fs::remove_file(&control.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        Ok(control)
    }

    /// The environment a shimmed `redis-server` starts with.
    pub(crate) fn env(&self) -> [(&'static str, &Path); 2] {
        [
            ("LD_PRELOAD", self.library.as_path()),
            (CLOCK_FILE_ENV, self.path.as_path()),
        ]
    }

    pub(crate) fn get(&self) -> Clock {
        *self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the clock to what `change` makes of it, given the real clock now.
    pub(crate) fn update(
        &self,
        change: impl FnOnce(Clock, i64) -> Clock,
    ) -> Result<Clock, ClockError> {
        let mut clock = self.clock.lock().unwrap_or_else(|p| p.into_inner());
        let next = change(*clock, real_now_us());
        match next.line() {
            Some(line) => {
                let tmp = self.path.with_extension("tmp");
                std::fs::write(&tmp, line)?;
                std::fs::rename(&tmp, &self.path)?;
            }
            None => match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            },
        }
        *clock = next;
        Ok(next)
    }
}

/// The library, built once per process.
///
/// # Errors
/// When `cc` is missing or fails.
pub fn library() -> Result<PathBuf, ClockError> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build().map_err(|e| e.to_string()))
        .clone()
        .map_err(ClockError::Build)
}

/// Builds the library into a directory of the temp dir named by the
/// source's hash (so a changed source builds anew), unless it is there.
/// Processes building at once each write their own file and rename it in:
/// the last rename wins, and every one is whole.
fn build() -> io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("redlock-clock-{:016x}", fnv1a(SOURCE)));
    let lib = dir.join("libredlock_clock.so");
    if lib.is_file() {
        return Ok(lib);
    }
    std::fs::create_dir_all(&dir)?;
    let unique = format!("{}-{:?}", std::process::id(), std::thread::current().id());
    let unique: String = unique.chars().filter(char::is_ascii_alphanumeric).collect();
    let source = dir.join(format!("clock_shim-{unique}.c"));
    let tmp = dir.join(format!("libredlock_clock-{unique}.so"));
    std::fs::write(&source, SOURCE)?;
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&tmp)
        .arg(&source)
        .arg("-ldl")
        .output();
    let _ = std::fs::remove_file(&source);
    let out = out?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(io::Error::other(format!(
            "cc failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    std::fs::rename(&tmp, &lib)?;
    Ok(lib)
}

/// FNV-1a, 64 bits: stable across builds, unlike std's hasher.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::{Options, RedisServer};

    fn query<T: redis::FromRedisValue>(server: &RedisServer, cmd: &mut redis::Cmd) -> T {
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        cmd.query(&mut conn).unwrap()
    }

    /// The master's `TIME`, in microseconds since the epoch.
    fn master_time(server: &RedisServer) -> i64 {
        let [secs, us]: [i64; 2] = query(server, &mut redis::cmd("TIME"));
        secs * 1_000_000 + us
    }

    /// Waits for `done` with a deadline of 2 s; the master reads its control
    /// file again within a millisecond of a command.
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within 2s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn clocks_jump_freeze_and_resume_against_the_real_one() {
        let real = 1_000_000_000;
        assert_eq!(Clock::Real.jumped(1500), Clock::Offset(1_500_000));
        assert_eq!(
            Clock::Offset(2_000_000).jumped(-500),
            Clock::Offset(1_500_000)
        );
        let frozen = Clock::Offset(-1_000_000).frozen(real);
        assert_eq!(frozen, Clock::Frozen(real - 1_000_000));
        assert_eq!(frozen.jumped(1000), Clock::Frozen(real));
        assert_eq!(frozen.resumed(real + 3_000_000), Clock::Offset(-4_000_000));
        assert_eq!(Clock::Offset(-4_000_000).offset_ms(real), -4000);
        assert_eq!(Clock::Real.line(), None);
        assert_eq!(Clock::Frozen(7).line().as_deref(), Some("freeze 7\n"));
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
    }

    /// Redis 7.0 really keeps time by the library: a jump past a key's TTL
    /// expires it, a frozen clock stops its PTTL, `TIME` and
    /// `server_time_usec` follow, and the clock is kept across a restart.
    #[test]
    fn a_shimmed_master_expires_keys_by_its_moved_clock() {
        let dir = tempfile::tempdir().unwrap();
        let mut server = RedisServer::start_opts(dir.path(), "r1", &Options::new().clock())
            .unwrap_or_else(|e| panic!("{e}"));
        let off = master_time(&server) - real_now_us();
        assert!(
            off.abs() < 1_000_000,
            "a fresh master runs on the real clock: {off}us"
        );
        let _: () = query(
            &server,
            redis::cmd("SET").arg("k").arg("v").arg("PX").arg(10_000),
        );

        assert_eq!(
            server.jump_clock(15_000).unwrap(),
            Clock::Offset(15_000_000)
        );
        wait_for("the key expired by the jump", || {
            query::<i64>(&server, redis::cmd("EXISTS").arg("k")) == 0
        });
        let ahead = master_time(&server) - real_now_us();
        assert!(
            (14_000_000..16_000_000).contains(&ahead),
            "TIME is 15s ahead: {ahead}us"
        );
        let info: String = query(&server, redis::cmd("INFO").arg("server"));
        let server_us: i64 = info
            .lines()
            .find_map(|l| l.strip_prefix("server_time_usec:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("server_time_usec in INFO server");
        assert!(server_us - real_now_us() > 14_000_000, "{info}");

        let _: () = query(
            &server,
            redis::cmd("SET").arg("f").arg("v").arg("PX").arg(10_000),
        );
        let Clock::Frozen(at) = server.freeze_clock().unwrap() else {
            panic!("a freeze freezes");
        };
        wait_for("TIME stopped", || master_time(&server) == at);
        let pttl = |server: &RedisServer| query::<i64>(server, redis::cmd("PTTL").arg("f"));
        let stopped = pttl(&server);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(pttl(&server), stopped, "a frozen clock holds the TTL still");

        server.restart().unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(server.clock(), Some(Clock::Frozen(_))));
        let t1 = master_time(&server);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(master_time(&server), t1, "still frozen after a restart");

        server.clear_clock().unwrap();
        wait_for("back on the real clock", || {
            (master_time(&server) - real_now_us()).abs() < 1_000_000
        });
        let plain = RedisServer::start(dir.path(), "r2").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            plain.jump_clock(1),
            Err(ClockError::NotShimmed(name)) if name == "r2"
        ));
    }
}

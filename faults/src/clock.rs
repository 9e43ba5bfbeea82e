//! The one clock every record is taken on: `CLOCK_MONOTONIC`, read raw so
//! that the harness and its client processes share it.
//!
//! `std::time::Instant` reads the same clock on Linux but hides the value,
//! and a child process has to print its readings for the checker; so every
//! timestamp in the suite is a [`Mono`].

use std::fmt;
use std::time::Duration;

/// Nanoseconds on `CLOCK_MONOTONIC`: comparable across processes on one
/// machine, never stepped by NTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize)]
pub struct Mono(pub u64);

impl Mono {
    /// Now.
    pub fn now() -> Mono {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes only the struct passed; the
        // monotonic clock always exists on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        Mono(secs * 1_000_000_000 + nanos)
    }

    pub fn plus(self, d: Duration) -> Mono {
        Mono(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    pub fn plus_ms(self, ms: u64) -> Mono {
        Mono(self.0.saturating_add(ms.saturating_mul(1_000_000)))
    }

    /// `self - earlier`, zero when `earlier` is later.
    pub fn since(self, earlier: Mono) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Signed milliseconds from `other` to `self`.
    pub fn ms_after(self, other: Mono) -> f64 {
        (self.0 as f64 - other.0 as f64) / 1e6
    }

    pub fn elapsed(self) -> Duration {
        Mono::now().since(self)
    }

    /// As text for a child process's report line.
    pub fn to_wire(self) -> String {
        self.0.to_string()
    }

    pub fn from_wire(text: &str) -> Option<Mono> {
        text.parse().ok().map(Mono)
    }
}

impl fmt::Display for Mono {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.0 as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_never_go_back_and_round_trip_as_text() {
        let a = Mono::now();
        let b = Mono::now();
        assert!(b >= a);
        assert_eq!(Mono::from_wire(&a.to_wire()), Some(a));
        assert_eq!(a.plus_ms(5).since(a), Duration::from_millis(5));
        assert_eq!(a.since(a.plus_ms(5)), Duration::ZERO);
        assert!((a.plus_ms(5).ms_after(a) - 5.0).abs() < 1e-9);
    }
}

//! Keys a master kept past their TTL because its wall clock was moved (a
//! nemesis clock fault), not because anyone renewed them: how much longer
//! each master may keep a key, and until when.
//!
//! A master expires keys by its own wall clock. Frozen, or jumped back by
//! `J`, it keeps every key up to that much longer, and shows TTLs up to
//! `J` above what was set; jumped forward by `J` and then put back, it
//! keeps the keys written meanwhile `J` longer. The checker adds the
//! excuse to its leak bounds on that master from the move until the keys
//! written under the moved clock are gone: its restore plus the excuse,
//! `max_ttl` and [`CLOCK_SLACK_MS`].

use super::Mono;

/// Added to the end of every excuse: one observer scan period and more.
pub const CLOCK_SLACK_MS: u64 = 1000;

/// One master's moved clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockExcuse {
    pub master: String,
    pub from: Mono,
    /// How much longer the master may keep a key, in ms.
    pub extra_ms: u64,
    /// `None` while the clock is still moved.
    pub until: Option<Mono>,
}

/// The most `master` may keep a key past its TTL at `at`, in ms.
pub fn extra_ms(excuses: &[ClockExcuse], master: &str, at: Mono) -> u64 {
    excuses
        .iter()
        .filter(|e| e.master == master && e.from <= at && e.until.is_none_or(|u| at <= u))
        .map(|e| e.extra_ms)
        .max()
        .unwrap_or(0)
}

/// Closes the open excuses of `master`: its clock was put back at `at`,
/// `extra_ms` from the real one at most.
pub fn close(excuses: &mut [ClockExcuse], master: &str, at: Mono, extra_ms: u64, max_ttl_ms: u64) {
    for e in excuses
        .iter_mut()
        .filter(|e| e.master == master && e.until.is_none())
    {
        e.extra_ms = e.extra_ms.max(extra_ms);
        e.until = Some(at.plus_ms(e.extra_ms + max_ttl_ms + CLOCK_SLACK_MS));
    }
}

/// When the last excuse ends (the moment every key written under a moved
/// clock is gone); `None` without any, or while one is open.
pub fn last_end(excuses: &[ClockExcuse]) -> Option<Mono> {
    excuses
        .iter()
        .map(|e| e.until)
        .collect::<Option<Vec<Mono>>>()?
        .into_iter()
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excuse_covers_its_master_from_the_move_until_its_keys_are_gone() {
        let at = |ms| Mono(ms * 1_000_000);
        let mut excuses = vec![ClockExcuse {
            master: "r1".into(),
            from: at(1000),
            extra_ms: 500,
            until: None,
        }];
        assert_eq!(extra_ms(&excuses, "r1", at(999)), 0, "not before the move");
        assert_eq!(
            extra_ms(&excuses, "r1", at(50_000)),
            500,
            "open: every later sighting"
        );
        assert_eq!(extra_ms(&excuses, "r2", at(2000)), 0, "another master");
        assert_eq!(last_end(&excuses), None, "open");
        close(&mut excuses, "r1", at(3000), 1200, 2000);
        assert_eq!(
            excuses[0].until,
            Some(at(3000 + 1200 + 2000 + CLOCK_SLACK_MS))
        );
        assert_eq!(extra_ms(&excuses, "r1", at(7000)), 1200, "the larger extra");
        assert_eq!(extra_ms(&excuses, "r1", at(8000)), 0, "over");
        assert_eq!(last_end(&excuses), excuses[0].until);
    }
}

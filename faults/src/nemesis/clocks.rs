//! The faults a vote does not see by itself: a master's wall clock moved,
//! and a majority restored from old snapshots.
//!
//! Redis expires keys by its wall clock. A clock jumped forward past every
//! TTL on a majority drops the held locks there at once; one jumped back
//! or frozen keeps keys longer, and put back on the real clock (the heal)
//! it jumps forward by as much, so the keys written meanwhile expire
//! early. The agent must see a master's clock move unlike its own
//! monotonic one (its clock watch) and keep it out.
//!
//! A master restored from a snapshot has its incarnation marker back and
//! the locks of then, none granted since. An agent whose link keeps its
//! connection open (a Redis proxy, a managed endpoint) sees no reconnect;
//! its vote's script is missing on the new process (NOSCRIPT), and that
//! must make it ask whether the process changed before the vote counts.

use std::time::Duration;

use rand::Rng;

use super::{FaultKind, Nemesis, Undo};
use crate::clock::Mono;

/// Masters whose clocks a fault moved, for the heal.
#[derive(Debug)]
pub(super) struct Moved {
    masters: Vec<usize>,
    at: Mono,
    /// How far the clocks were moved, in ms; `None` for a freeze (as far
    /// as it lasted).
    jump_ms: Option<u64>,
}

impl Nemesis {
    /// Moves the wall clock of one master, or of a majority at once, as
    /// `kind` says ([`FaultKind::ClockForward`], [`FaultKind::ClockBack`],
    /// [`FaultKind::ClockFreeze`]); the checker is told each master may
    /// keep keys longer from now on.
    pub(super) fn inject_clocks(&mut self, kind: FaultKind, busy: &mut Vec<usize>) -> Option<Undo> {
        let majority = self.cluster.masters.len() / 2 + 1;
        let k = if self.rng.random_bool(0.5) {
            1
        } else {
            majority
        };
        let picked = self.pick_masters(k, busy);
        if picked.is_empty() {
            self.report
                .skipped
                .push(format!("{}: no free master", kind.as_str()));
            return None;
        }
        let max_ttl_ms = u64::try_from(self.cluster.settings.max_ttl.as_millis()).unwrap_or(0);
        // The jump (signed) and how much longer a master may keep a key
        // because of it; a freeze's grows with it, at most its longest.
        let (jump_ms, extra_ms) = match kind {
            FaultKind::ClockForward => {
                let jump = max_ttl_ms + self.rng.random_range(200..=1500);
                (jump, jump)
            }
            FaultKind::ClockBack => {
                let jump = self.rng.random_range(500..=2500);
                (jump, jump)
            }
            _ => (0, self.fault_ms.1),
        };
        let signed = if kind == FaultKind::ClockBack {
            -(jump_ms as i64)
        } else {
            jump_ms as i64
        };
        let held = self.checker.open();
        let at = Mono::now();
        let mut moved = Vec::new();
        for j in picked {
            let m = &self.cluster.masters[j];
            let done = if kind == FaultKind::ClockFreeze {
                m.freeze_clock()
            } else {
                m.jump_clock(signed)
            };
            match done {
                Ok(_) => {
                    self.checker.clock_moved(&m.name, at, extra_ms);
                    moved.push(j);
                }
                Err(e) => self.report.skipped.push(format!("{}: {e}", kind.as_str())),
            }
        }
        if moved.is_empty() {
            return None;
        }
        let how = match kind {
            FaultKind::ClockFreeze => "frozen".to_string(),
            _ => format!("{signed:+}ms"),
        };
        let detail = format!("{} {how} ({held} sections open)", self.names(&moved));
        self.record(kind, detail);
        Some(Undo::ClearClocks(Moved {
            masters: moved,
            at,
            jump_ms: (kind != FaultKind::ClockFreeze).then_some(jump_ms),
        }))
    }

    /// Puts the moved clocks back on the real one; the checker is told how
    /// far they were off, and the cycle's liveness bound grows by as much.
    pub(super) fn clear_clocks(&mut self, moved: Moved) {
        let off_ms = moved
            .jump_ms
            .unwrap_or_else(|| u64::try_from(moved.at.elapsed().as_millis()).unwrap_or(0));
        let max_ttl_ms = u64::try_from(self.cluster.settings.max_ttl.as_millis()).unwrap_or(0);
        let now = Mono::now();
        for j in moved.masters {
            let m = &self.cluster.masters[j];
            if let Err(e) = m.clear_clock() {
                self.report.liveness_failures.push(e);
            }
            self.checker
                .clock_restored(&m.name, now, off_ms, max_ttl_ms);
        }
        self.cycle_extra_ms = self.cycle_extra_ms.max(off_ms);
    }

    /// `SAVE` on a majority, a wait while the locks move on, then each
    /// restarted from its snapshot at once ([`FaultKind::RestoreMajority`]).
    pub(super) async fn inject_restore(&mut self, busy: &mut Vec<usize>) -> Option<Undo> {
        let kind = FaultKind::RestoreMajority;
        let picked = self.pick_majority(kind, busy)?;
        let saves = picked.iter().map(|&j| {
            let m = self.cluster.masters[j].clone();
            async move { m.save().await }
        });
        let mut failed = Vec::new();
        for r in futures::future::join_all(saves).await {
            if let Err(e) = r {
                failed.push(e);
            }
        }
        if !failed.is_empty() {
            self.report
                .skipped
                .push(format!("{}: {}", kind.as_str(), failed.join("; ")));
            return None;
        }
        let saved_held = self.checker.open();
        let wait = self.rng.random_range(300..=1500u64);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let held = self.checker.open();
        let restores = picked.iter().map(|&j| {
            let m = self.cluster.masters[j].clone();
            async move { m.restore().await }
        });
        for r in futures::future::join_all(restores).await {
            if let Err(e) = r {
                self.report.skipped.push(format!("{}: {e}", kind.as_str()));
            }
        }
        let detail = format!(
            "{} from snapshots saved {wait}ms earlier ({saved_held} sections open then, {held} now)",
            self.names(&picked)
        );
        self.record(kind, detail);
        Some(Undo::Nothing)
    }
}

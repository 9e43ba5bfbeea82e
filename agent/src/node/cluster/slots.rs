//! A cluster master's hash slots, each trusted or in quarantine on its own.
//!
//! ## Why per slot
//! In a Redis Cluster a lock key lives in one slot, on the shard that owns
//! it, and so does that slot's incarnation marker (its name carries a hash
//! tag of the slot; see `redlock_wire::keys::slot_key`). A shard that
//! restarts empty, fails over to a replica or receives a migrated slot
//! loses, or may have lost, the keys of its slots only: the other slots'
//! votes are as good as before, so only the affected slots are kept out.
//!
//! ## The life of a slot
//! `Trusted` → (a vote finds the marker missing or naming another node, the
//! first read of every marker or the sweep of a shard found without one
//! does, or a probe saw its shard restart, evict keys or hand the slot to
//! another node) `Lost` → (this agent wrote its
//! witness in the slot, on the node that serves it) `Witnessed` →
//! (`max_ttl + extra` after the witness, the witness still there on the
//! same node: nothing was lost since) `Trusted`, with the marker rewritten
//! and the fencing counter caught up. A witness found gone or moved sends
//! the slot back to `Lost`.
//!
//! ## Here
//! The table of every slot's state ([`Slots`]), and the node's side of it:
//! a vote or a probe takes slots out (`Node::slot_lost`,
//! `Node::slots_lost`); the votes, readiness and `/v1/nodes` read it.
//! The way back is in [`super::readmit`].

use std::time::{Duration, Instant};

use redlock_wire::keys::{key_slot, slot_key, SLOTS};

use super::sweep::SWEEP_DELETE;
use super::LostSlots;
use crate::node::{Conn, Detector, Node};

/// Where one slot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Votes in this slot count.
    Trusted,
    /// The slot may have lost keys; its witness is not written yet.
    Lost,
    /// Witness `nonce` is written; the slot may be readmitted at `until`.
    Witnessed { until: Instant, nonce: u64 },
}

/// Every slot's state, and how many are out.
#[derive(Debug)]
pub struct Slots {
    states: Vec<SlotState>,
    out: usize,
    next_nonce: u64,
}

impl Default for Slots {
    fn default() -> Self {
        Slots::new()
    }
}

impl Slots {
    /// All slots trusted: the votes' own check finds any that are not.
    pub fn new() -> Slots {
        Slots {
            states: vec![SlotState::Trusted; usize::from(SLOTS)],
            out: 0,
            next_nonce: 1,
        }
    }

    pub fn state(&self, slot: u16) -> SlotState {
        self.states[usize::from(slot % SLOTS)]
    }

    /// The slot is kept out of votes and extensions.
    pub fn is_out(&self, slot: u16) -> bool {
        self.state(slot) != SlotState::Trusted
    }

    /// Slots kept out.
    pub fn out(&self) -> usize {
        self.out
    }

    /// Slots kept out among the inclusive `ranges`.
    pub fn out_in(&self, ranges: &[[u16; 2]]) -> usize {
        ranges
            .iter()
            .flat_map(|[start, end]| *start..=(*end).min(SLOTS - 1))
            .filter(|slot| self.is_out(*slot))
            .count()
    }

    /// Keeps `slot` out; true when it was trusted until now. A slot already
    /// out keeps its witness and its time.
    pub fn lose(&mut self, slot: u16) -> bool {
        let state = &mut self.states[usize::from(slot % SLOTS)];
        if *state != SlotState::Trusted {
            return false;
        }
        *state = SlotState::Lost;
        self.out += 1;
        true
    }

    /// The slot's witness is gone or on another node: it starts over.
    pub fn start_over(&mut self, slot: u16) {
        self.lose(slot);
        self.states[usize::from(slot % SLOTS)] = SlotState::Lost;
    }

    /// Slots that wait for their witness.
    pub fn need_witness(&self) -> Vec<u16> {
        self.slots_where(|s| s == SlotState::Lost)
    }

    /// A fresh nonce for a witness about to be written.
    pub fn nonce(&mut self) -> u64 {
        self.next_nonce += 1;
        self.next_nonce
    }

    /// The witness `nonce` was written in `slot`; readmission at `until`.
    /// Ignored unless the slot still waits for a witness.
    pub fn witnessed(&mut self, slot: u16, nonce: u64, until: Instant) {
        let state = &mut self.states[usize::from(slot % SLOTS)];
        if *state == SlotState::Lost {
            *state = SlotState::Witnessed { until, nonce };
        }
    }

    /// Witnessed slots whose time has come, with their nonces.
    pub fn due(&self, now: Instant) -> Vec<(u16, u64)> {
        (0..SLOTS)
            .filter_map(|slot| match self.state(slot) {
                SlotState::Witnessed { until, nonce } if until <= now => Some((slot, nonce)),
                _ => None,
            })
            .collect()
    }

    /// The earliest readmission still to come.
    pub fn next_due(&self) -> Option<Instant> {
        self.states
            .iter()
            .filter_map(|s| match s {
                SlotState::Witnessed { until, .. } => Some(*until),
                _ => None,
            })
            .min()
    }

    /// Whether each slot is kept out, by slot number.
    pub fn out_mask(&self) -> Vec<bool> {
        self.states
            .iter()
            .map(|s| *s != SlotState::Trusted)
            .collect()
    }

    /// How long until the last slot kept out may be readmitted, from `now`:
    /// the latest readmission scheduled, or a whole `period` for a slot
    /// whose witness is not written yet (its time starts at that write).
    /// Zero with no slot out.
    pub fn left(&self, now: Instant, period: std::time::Duration) -> std::time::Duration {
        self.states
            .iter()
            .map(|s| match s {
                SlotState::Trusted => std::time::Duration::ZERO,
                SlotState::Lost => period,
                SlotState::Witnessed { until, .. } => until.saturating_duration_since(now),
            })
            .max()
            .unwrap_or_default()
    }

    /// `slot` was readmitted with witness `nonce`: trusted again. Ignored if
    /// the slot was lost again meanwhile (its state no longer names `nonce`).
    pub fn readmitted(&mut self, slot: u16, nonce: u64) {
        let state = &mut self.states[usize::from(slot % SLOTS)];
        if matches!(*state, SlotState::Witnessed { nonce: n, .. } if n == nonce) {
            *state = SlotState::Trusted;
            self.out -= 1;
        }
    }

    fn slots_where(&self, keep: impl Fn(SlotState) -> bool) -> Vec<u16> {
        (0..SLOTS).filter(|slot| keep(self.state(*slot))).collect()
    }
}

impl Node {
    pub(super) fn slots(&self) -> Option<std::sync::MutexGuard<'_, Slots>> {
        self.part()
            .map(|p| p.slots.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The slot of `key` on a cluster master, `None` on a single server.
    pub(crate) fn slot_of(&self, key: &str) -> Option<u16> {
        self.part().map(|_| key_slot(key.as_bytes()))
    }

    /// A cluster master keeps `key`'s slot out of votes and extensions.
    pub(crate) fn slot_out(&self, key: &str) -> bool {
        match (self.slot_of(key), self.slots()) {
            (Some(slot), Some(slots)) => slots.is_out(slot),
            _ => false,
        }
    }

    /// A vote or extension in `slot` found its marker missing or naming
    /// another node: the slot may have lost keys. Quarantined at once; the
    /// health task writes its witness.
    pub(crate) fn slot_lost(&self, slot: u16, why: &'static str) {
        let (newly, out) = match self.slots() {
            Some(mut slots) => (slots.lose(slot), slots.out()),
            None => return,
        };
        if newly {
            self.observer.quarantined_slots(out);
            if out == 1 {
                self.restart_detected(Detector::Marker);
                tracing::warn!(
                    node = %self.name,
                    slot,
                    why,
                    quarantine = ?self.quarantine,
                    "a cluster slot may have lost its keys: quarantined (others may follow)"
                );
            } else {
                tracing::debug!(node = %self.name, slot, why, "cluster slot quarantined");
            }
            self.lost_keys();
            self.wake.notify_one();
        }
    }

    /// Slots in quarantine (0 on a single server).
    pub fn quarantined_slots(&self) -> usize {
        self.slots().map_or(0, |s| s.out())
    }

    /// For readiness: which slots a cluster master can vote in now (served
    /// by a primary that answered the last probe, and not in quarantine),
    /// by slot number, and how long until the last slot in quarantine may
    /// be readmitted. `None` on a single server.
    pub fn slot_usability(&self) -> Option<(Vec<bool>, Duration)> {
        let part = self.part()?;
        let shards = part
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut usable = vec![false; usize::from(SLOTS)];
        for shard in shards.iter().filter(|s| s.up) {
            for slot in shard.slot_list() {
                if let Some(u) = usable.get_mut(usize::from(slot)) {
                    *u = true;
                }
            }
        }
        let slots = self.slots()?;
        for (u, out) in usable.iter_mut().zip(slots.out_mask()) {
            *u &= !out;
        }
        Some((usable, slots.left(Instant::now(), self.quarantine)))
    }

    /// The earliest slot readmission to come.
    pub(crate) fn next_slot_due(&self) -> Option<Instant> {
        self.slots()
            .and_then(|s| s.next_due())
            .filter(|until| *until > Instant::now())
    }

    /// Slots a probe saw lose keys (see [`LostSlots`]): their markers are
    /// deleted, so every agent's next vote in each of them quarantines it,
    /// and this agent quarantines them now.
    pub(crate) async fn slots_lost(&self, conn: &Conn, lost: &LostSlots) {
        tracing::warn!(
            node = %self.name,
            shard = %lost.addr,
            slots = lost.slots.len(),
            detector = lost.detector.as_str(),
            "cluster slots may have lost keys (a shard restarted, evicted keys, failed over, or slots moved): quarantined"
        );
        self.restart_detected(lost.detector);
        let slots = lost.slots.clone();
        if let Some(mut table) = self.slots() {
            for slot in &slots {
                table.lose(*slot);
            }
            self.observer.quarantined_slots(table.out());
        }
        self.lost_keys();
        let keys: Vec<(u16, Vec<String>)> = slots
            .iter()
            .map(|slot| (*slot, vec![slot_key(&self.marker_key, *slot)]))
            .collect();
        let failures: usize = self
            .sweep(conn, &SWEEP_DELETE, keys, &[])
            .await
            .into_iter()
            .filter(|(_, answer)| answer.is_err())
            .count();
        if failures > 0 {
            tracing::warn!(
                node = %self.name,
                shard = %lost.addr,
                failures,
                "could not delete every marker of a restarted shard; its slots stay quarantined here"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_slot_goes_out_and_comes_back_only_with_its_own_witness() {
        let mut slots = Slots::new();
        assert!(slots.lose(7));
        assert!(!slots.lose(7), "already out");
        assert_eq!((slots.out(), slots.need_witness()), (1, vec![7]));
        let now = Instant::now();
        let nonce = slots.nonce();
        slots.witnessed(7, nonce, now + Duration::from_secs(5));
        assert!(slots.need_witness().is_empty());
        assert!(slots.due(now).is_empty());
        assert_eq!(slots.due(now + Duration::from_secs(5)), vec![(7, nonce)]);
        // Lost again while witnessed: a new witness is needed, and the old
        // readmission is ignored.
        slots.start_over(7);
        slots.readmitted(7, nonce);
        assert!(slots.is_out(7));
        assert_eq!(slots.out(), 1);
        let again = slots.nonce();
        slots.witnessed(7, again, now);
        slots.readmitted(7, again);
        assert!(!slots.is_out(7));
        assert_eq!(slots.out(), 0);
    }

    #[test]
    fn the_time_left_is_the_last_readmission_or_a_whole_period_before_the_witness() {
        let mut slots = Slots::new();
        let now = Instant::now();
        let period = Duration::from_secs(10);
        assert_eq!(slots.left(now, period), Duration::ZERO);
        slots.lose(1);
        slots.lose(2);
        let nonce = slots.nonce();
        slots.witnessed(1, nonce, now + Duration::from_secs(3));
        assert_eq!(slots.left(now, period), period, "slot 2 has no witness yet");
        let nonce = slots.nonce();
        slots.witnessed(2, nonce, now + Duration::from_secs(4));
        assert_eq!(slots.left(now, period), Duration::from_secs(4));
        let mask = slots.out_mask();
        assert_eq!((mask[0], mask[1], mask[2]), (false, true, true));
    }

    #[test]
    fn counts_out_slots_in_ranges() {
        let mut slots = Slots::new();
        for slot in [0, 5, 5460, 5461, 16383] {
            slots.lose(slot);
        }
        assert_eq!(slots.out_in(&[[0, 5460]]), 3);
        assert_eq!(slots.out_in(&[[5461, 10922], [10923, 16383]]), 2);
    }
}

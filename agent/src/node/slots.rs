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
//! `Trusted` → (a vote finds the marker missing or naming another node, or
//! a probe saw its shard restart) `Lost` → (this agent wrote its witness in
//! the slot, on the node that serves it) `Witnessed` → (`max_ttl + extra`
//! after the witness, the witness still there on the same node: nothing
//! was lost since) `Trusted`, with the marker rewritten and the fencing
//! counter caught up. A witness found gone or moved sends the slot back to
//! `Lost`.

use std::time::Instant;

use redlock_wire::keys::SLOTS;

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

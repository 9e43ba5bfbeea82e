//! A cluster slot's way back from quarantine: this agent's witness written
//! in each slot it keeps out, and readmission once the quarantine ran out,
//! where the witness is still there on the node that serves the slot (see
//! [`super::slots`]).

use std::time::{Duration, Instant};

use redlock_wire::keys::slot_key;

use super::sweep::{SWEEP_READMIT, SWEEP_WITNESSES};
use crate::node::{ttl_ms, Conn, Node, MARKER_SUFFIX, WITNESS_SUFFIX};
use crate::redlock::master::NodeError;

impl Node {
    fn witness_key(&self, slot: u16) -> Option<String> {
        let part = self.part()?;
        let prefix = self.marker_key.trim_end_matches(MARKER_SUFFIX);
        Some(slot_key(
            &format!("{prefix}{}{WITNESS_SUFFIX}", part.witness_id),
            slot,
        ))
    }

    /// Writes this agent's witness in every slot that waits for one, on the
    /// node serving it, and counts each slot's quarantine from its write.
    pub(crate) async fn write_slot_witnesses(&self, conn: &Conn) {
        let wanted: Vec<(u16, u64)> = {
            let Some(mut slots) = self.slots() else {
                return;
            };
            slots
                .need_witness()
                .into_iter()
                .map(|slot| (slot, slots.nonce()))
                .collect()
        };
        if wanted.is_empty() {
            return;
        }
        let ttl = ttl_ms(self.quarantine * 2 + Duration::from_secs(60)).to_string();
        let nonces: std::collections::HashMap<u16, u64> = wanted.iter().copied().collect();
        let keys: Vec<(u16, Vec<String>)> = wanted
            .iter()
            .map(|(slot, nonce)| {
                let witness = self.witness_key(*slot).unwrap_or_default();
                (*slot, vec![witness, nonce.to_string()])
            })
            .collect();
        let written: Vec<(u16, u64, bool)> = self
            .sweep(conn, &SWEEP_WITNESSES, keys, &[&ttl])
            .await
            .into_iter()
            .map(|(slot, answer)| (slot, nonces[&slot], matches!(answer, Ok(1))))
            .collect();
        let until = Instant::now() + self.quarantine;
        let mut failed = 0;
        if let Some(mut slots) = self.slots() {
            for (slot, nonce, ok) in written {
                if ok {
                    slots.witnessed(slot, nonce, until);
                } else {
                    failed += 1;
                }
            }
        }
        if failed > 0 {
            tracing::debug!(node = %self.name, failed, "some quarantine witnesses not written; trying again");
        }
    }

    /// Readmits the slots whose quarantine ran out, each with its fencing
    /// counter caught up to `catch_up(slot)`: the marker is rewritten with
    /// the serving node's ID only where this agent's witness is still there
    /// and was written by that node; elsewhere the slot starts over.
    pub(crate) async fn readmit_slots(&self, conn: &Conn, due: Vec<(u16, u64)>, catch_up: &[u64]) {
        let nonces: std::collections::HashMap<u16, u64> = due.iter().copied().collect();
        let keys: Vec<(u16, Vec<String>)> = due
            .iter()
            .zip(catch_up)
            .map(|((slot, nonce), counter)| {
                (
                    *slot,
                    vec![
                        slot_key(&self.marker_key, *slot),
                        self.witness_key(*slot).unwrap_or_default(),
                        slot_key(&self.fence_key, *slot),
                        nonce.to_string(),
                        counter.to_string(),
                    ],
                )
            })
            .collect();
        let results: Vec<(u16, u64, Result<i64, NodeError>)> = self
            .sweep(conn, &SWEEP_READMIT, keys, &[])
            .await
            .into_iter()
            .map(|(slot, answer)| (slot, nonces[&slot], answer))
            .collect();
        let (mut back, mut again, mut failed) = (0, 0, None);
        if let Some(mut slots) = self.slots() {
            for (slot, nonce, answer) in results {
                match answer {
                    Ok(1) => {
                        slots.readmitted(slot, nonce);
                        back += 1;
                    }
                    Ok(_) => {
                        slots.start_over(slot);
                        again += 1;
                    }
                    Err(e) => failed = Some(e),
                }
            }
            self.observer.quarantined_slots(slots.out());
        }
        if back > 0 {
            tracing::info!(node = %self.name, slots = back, "cluster slots readmitted: markers rewritten");
        }
        if let Some(error) = failed {
            tracing::debug!(node = %self.name, %error, "some cluster slots not readmitted; trying again");
        }
        if again > 0 {
            tracing::warn!(
                node = %self.name,
                slots = again,
                "cluster slots lost their witness while quarantined (lost keys again, or moved): the quarantine starts over"
            );
        }
    }

    /// Slots due for readmission now.
    pub(crate) fn due_slots(&self) -> Vec<(u16, u64)> {
        self.slots()
            .map(|s| s.due(Instant::now()))
            .unwrap_or_default()
    }
}

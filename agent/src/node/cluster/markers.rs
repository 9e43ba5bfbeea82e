//! A cluster master's slot markers as the health probe reads them: every
//! slot's at first sight, then one slot's per shard at every probe.
//!
//! ## Why one per shard is enough
//! A shard that loses its keys while its process lives on (`FLUSHALL`, a
//! restart empty that no `run_id` change gave away) loses every marker it
//! holds at once, and no `INFO` field says so. Votes see it one slot at a
//! time, and only in the slots they happen to hit, so readiness would count
//! one slot out where thousands are. One marker read per shard and probe
//! notices the loss within a probe; the shard is then swept whole and every
//! slot found without its marker quarantined, so readiness counts them all.
//! The slot read turns with each probe over the shard's trusted slots, so a
//! loss of fewer keys is found in time too.
//!
//! ## Cost
//! One script call per shard that answered the probe (`CLUSTER MYID` and
//! one `GET`); the sweep over a shard's slots (a few calls of
//! [`super::sweep`]) only on a loss found.

use std::sync::atomic::Ordering::Relaxed;

use redlock_wire::keys::{slot_key, SLOTS};

use super::slots::Slots;
use super::sweep::SWEEP_MARKERS;
use super::Shard;
use crate::node::{Conn, Detector, Node};

/// What a read of some slots' markers found.
#[derive(Debug, Default)]
struct Read {
    /// Slots whose marker is missing or names another node.
    lost: Vec<u16>,
    /// Slots that did not answer (a shard down, a slot moving, a slot on
    /// no known shard): read again later.
    unanswered: Vec<u16>,
}

impl Node {
    /// Reads the slots' markers, every slot's at first sight (see
    /// [`Node::read_every_marker`]) and one slot's per shard at every
    /// probe after (see [`Node::sample_markers`]); a slot found without
    /// its marker, or with one naming another node, is quarantined.
    pub(crate) async fn read_slot_markers(&self, conn: &Conn, fresh: bool) {
        let Some(part) = self.part() else { return };
        if part.markers_read.load(Relaxed) {
            self.sample_markers(conn).await;
        } else {
            self.read_every_marker(conn, fresh).await;
        }
    }

    /// At first sight, reads every slot's marker: a slot whose marker is
    /// missing or names another node is quarantined at once, rather than at
    /// its first vote. With masters this process started empty, writes the
    /// markers instead. Done once; tried again at the next probe until every
    /// slot answered.
    async fn read_every_marker(&self, conn: &Conn, fresh: bool) {
        let Some(part) = self.part() else { return };
        let mode = if fresh { "write" } else { "read" };
        let read = self.read_markers(conn, (0..SLOTS).collect(), mode).await;
        let lost = self.lose_slots(&read.lost);
        if lost > 0 {
            self.restart_detected(Detector::Marker);
            tracing::warn!(
                node = %self.name,
                slots = lost,
                quarantine = ?self.quarantine,
                "cluster slots without this node's marker (a new cluster, or lost keys): quarantined"
            );
        }
        if read.unanswered.is_empty() {
            part.markers_read.store(true, Relaxed);
        } else {
            tracing::debug!(node = %self.name, unanswered = read.unanswered.len(), "slot markers not all read; trying again");
        }
    }

    /// Reads the marker of one trusted slot on each shard that answered
    /// the probe, a different slot each time. A shard found without it is
    /// swept whole, and each of its slots found without its marker is
    /// quarantined; a shard whose sweep did not answer for every slot is
    /// swept again at the next probe, instead of sampled.
    async fn sample_markers(&self, conn: &Conn) {
        let Some(part) = self.part() else { return };
        let turn = part.samples.fetch_add(1, Relaxed);
        let shards: Vec<Shard> = part
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|s| s.up)
            .cloned()
            .collect();
        let mut to_sweep: Vec<String> =
            std::mem::take(&mut *part.to_sweep.lock().unwrap_or_else(|e| e.into_inner()));
        let picks = match self.slots() {
            Some(slots) => sample(&shards, &slots, turn, &to_sweep),
            None => return,
        };
        let sample = self.read_markers(conn, picks, "read").await;
        if !sample.unanswered.is_empty() {
            tracing::debug!(node = %self.name, unanswered = sample.unanswered.len(), "slot markers sampled not all read; trying again");
        }
        let owner = |slot: u16| shards.iter().find(|s| s.serves(slot));
        for shard in sample.lost.iter().filter_map(|slot| owner(*slot)) {
            to_sweep.push(shard.node_id.clone());
        }
        // Sampled slots without their marker are out whatever the sweep
        // finds.
        let mut lost = self.lose_slots(&sample.lost);
        let sweeping: Vec<&Shard> = shards
            .iter()
            .filter(|s| to_sweep.contains(&s.node_id))
            .collect();
        if sweeping.is_empty() {
            return;
        }
        let rest: Vec<u16> = match self.slots() {
            Some(slots) => sweeping
                .iter()
                .flat_map(|shard| shard.slot_list())
                .filter(|s| !slots.is_out(*s))
                .collect(),
            None => return,
        };
        let swept = self.read_markers(conn, rest, "read").await;
        lost += self.lose_slots(&swept.lost);
        let unswept: Vec<String> = sweeping
            .iter()
            .filter(|shard| swept.unanswered.iter().any(|slot| shard.serves(*slot)))
            .map(|shard| shard.node_id.clone())
            .collect();
        if !unswept.is_empty() {
            tracing::debug!(node = %self.name, unanswered = swept.unanswered.len(), "slot markers swept not all read; sweeping again");
        }
        *part.to_sweep.lock().unwrap_or_else(|e| e.into_inner()) = unswept;
        if lost > 0 {
            self.restart_detected(Detector::Marker);
            let addrs: Vec<String> = sweeping.iter().map(|s| s.addr()).collect();
            tracing::warn!(
                node = %self.name,
                shards = %addrs.join(" "),
                slots = lost,
                quarantine = ?self.quarantine,
                "cluster shards lost slot markers (flushed, or their keys lost otherwise): every slot found without its marker quarantined"
            );
        }
    }

    /// Reads (or, in mode "write", writes and reads) the markers of
    /// `slots`, shard by shard.
    async fn read_markers(&self, conn: &Conn, slots: Vec<u16>, mode: &str) -> Read {
        if slots.is_empty() {
            return Read::default();
        }
        let keys: Vec<(u16, Vec<String>)> = slots
            .iter()
            .map(|slot| (*slot, vec![slot_key(&self.marker_key, *slot)]))
            .collect();
        let answers = self.sweep(conn, &SWEEP_MARKERS, keys, &[mode]).await;
        let mut read = Read::default();
        let mut answered = vec![false; usize::from(SLOTS)];
        for (slot, answer) in answers {
            match answer {
                Ok(1) => answered[usize::from(slot)] = true,
                Ok(_) => {
                    answered[usize::from(slot)] = true;
                    read.lost.push(slot);
                }
                Err(e) => {
                    tracing::trace!(node = %self.name, slot, error = %e, "slot marker not read");
                }
            }
        }
        // Slots on no known shard (a topology being changed) were not sent.
        read.unanswered = slots
            .into_iter()
            .filter(|slot| !answered[usize::from(*slot)])
            .collect();
        read
    }

    /// Quarantines `slots`; returns how many were trusted until now.
    fn lose_slots(&self, slots: &[u16]) -> usize {
        let (newly, out) = match self.slots() {
            Some(mut table) => (
                slots.iter().filter(|slot| table.lose(**slot)).count(),
                table.out(),
            ),
            None => return 0,
        };
        self.observer.quarantined_slots(out);
        if newly > 0 {
            self.lost_keys();
        }
        newly
    }
}

/// The slots whose markers a probe reads: of each shard not in `skip`
/// (node IDs of shards swept whole anyway), its trusted slot number `turn`
/// (modulo how many it has), so successive probes read different slots. A
/// shard with every slot out has none to read.
fn sample(shards: &[Shard], slots: &Slots, turn: usize, skip: &[String]) -> Vec<u16> {
    shards
        .iter()
        .filter(|shard| !skip.contains(&shard.node_id))
        .filter_map(|shard| {
            let trusted = || shard.slot_list().filter(|s| !slots.is_out(*s));
            trusted().nth(turn.checked_rem(trusted().count())?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, slots: Vec<[u16; 2]>) -> Shard {
        Shard {
            host: "127.0.0.1".into(),
            port: 7000,
            node_id: id.into(),
            slots,
            replicas: 0,
            run_id: None,
            evicted_keys: None,
            up: true,
        }
    }

    #[test]
    fn the_sample_reads_one_trusted_slot_per_shard_and_turns() {
        let shards = [shard("a", vec![[0, 2], [10, 10]]), shard("b", vec![[3, 5]])];
        let mut slots = Slots::new();
        assert_eq!(sample(&shards, &slots, 0, &[]), vec![0, 3]);
        assert_eq!(sample(&shards, &slots, 3, &[]), vec![10, 3]);
        assert_eq!(sample(&shards, &slots, 4, &[]), vec![0, 4]);
        // Slots out are not read; a shard with none trusted is left out.
        slots.lose(0);
        for slot in 3..=5 {
            slots.lose(slot);
        }
        assert_eq!(sample(&shards, &slots, 0, &[]), vec![1]);
        // Nor a shard swept whole anyway.
        assert!(sample(&shards, &slots, 0, &["a".to_string()]).is_empty());
    }
}

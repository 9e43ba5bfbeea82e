//! Readiness: whether a lock on any resource could get a quorum now,
//! counted slot by slot from what each master can vote in (a cluster
//! master's slots in quarantine, or on a shard that is down, do not count).

/// What one master can vote in now, as readiness counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Usability {
    /// Down, quarantined, or a duplicate of another master.
    Unusable,
    /// Every resource (a single server that is up).
    Everywhere,
    /// A cluster master: whether it can vote in each hash slot, by slot
    /// number (served by a primary that is up, and not in quarantine).
    Slots(Vec<bool>),
}

/// Whether a lock on any resource could get a quorum now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// Hash slots (of 16384) in which fewer than a quorum of masters can
    /// vote: a lock on a resource there answers `no_quorum`.
    pub slots_without_quorum: u64,
    /// The fewest masters that can vote in any one slot.
    pub fewest: usize,
}

impl Readiness {
    /// Ready: no slot without a quorum.
    pub fn ready(&self) -> bool {
        self.slots_without_quorum == 0
    }
}

/// Counts, slot by slot, the masters that can vote there; with only single
/// servers every slot counts the same.
pub fn readiness(masters: &[Usability], quorum: usize) -> Readiness {
    let everywhere = masters
        .iter()
        .filter(|m| **m == Usability::Everywhere)
        .count();
    let clusters: Vec<&Vec<bool>> = masters
        .iter()
        .filter_map(|m| match m {
            Usability::Slots(slots) => Some(slots),
            _ => None,
        })
        .collect();
    let mut fewest = usize::MAX;
    let mut without = 0;
    for slot in 0..usize::from(redlock_wire::keys::SLOTS) {
        let here = everywhere
            + clusters
                .iter()
                .filter(|c| c.get(slot).copied().unwrap_or(false))
                .count();
        fewest = fewest.min(here);
        without += u64::from(here < quorum);
        if clusters.is_empty() {
            // Every slot counts the same.
            without *= u64::from(redlock_wire::keys::SLOTS);
            break;
        }
    }
    Readiness {
        slots_without_quorum: without,
        fewest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_counts_the_masters_that_can_vote_in_each_slot() {
        use Usability::*;
        let slots = usize::from(redlock_wire::keys::SLOTS);
        let all_out = Slots(vec![false; slots]);
        let half: Vec<bool> = (0..slots).map(|s| s < slots / 2).collect();
        // Single servers only: every slot or none.
        let r = readiness(&[Everywhere, Everywhere, Unusable], 2);
        assert_eq!((r.slots_without_quorum, r.fewest, r.ready()), (0, 2, true));
        let r = readiness(&[Everywhere, Unusable, Unusable], 2);
        assert_eq!((r.slots_without_quorum, r.fewest), (16384, 1));
        // Clusters whose every slot is in quarantine: up, yet no lock.
        let r = readiness(&[all_out.clone(), all_out.clone(), all_out.clone()], 2);
        assert_eq!(
            (r.slots_without_quorum, r.fewest, r.ready()),
            (16384, 0, false)
        );
        // One such cluster among single servers: the others are a quorum.
        let r = readiness(&[all_out, Everywhere, Everywhere], 2);
        assert!(r.ready());
        // Half the slots out in two of three clusters: those lack a quorum.
        let r = readiness(&[Slots(half.clone()), Slots(half), Everywhere], 2);
        assert_eq!((r.slots_without_quorum, r.fewest), (8192, 1));
    }
}

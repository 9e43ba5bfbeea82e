//! Fence order and the fenced store's writes over every section.

use std::collections::HashMap;

use super::{
    shared::is_reader, FenceFindings, FenceInversion, Section, StaleWrite, StoreWrite, WriteOutcome,
};

/// Fence order and the fenced store's writes over every section.
///
/// For each fenced section B, the earlier sections are those whose grant
/// arrived before B's request was sent; the one with the highest fence
/// (of B's resource, and of any other) is the witness: B's fence must be
/// above it; a reader's fence is the last writer's it follows, never
/// raised, so a reader B's fence must only not be below it. A stale write is an accepted write of A that the store placed
/// after an accepted write of some B requested after A was answered.
pub(super) fn fences(sections: &[Section]) -> FenceFindings {
    let mut out = FenceFindings::default();
    for s in sections {
        if s.fence.is_some() {
            out.fenced_grants += 1;
        } else {
            out.unfenced_grants += 1;
        }
        match s.write.as_ref().map(|w| &w.outcome) {
            Some(WriteOutcome::Accepted { .. }) => out.writes_accepted += 1,
            Some(WriteOutcome::Refused { .. }) => out.writes_refused += 1,
            Some(WriteOutcome::Failed { .. }) => out.writes_failed += 1,
            None => {}
        }
    }
    let fenced: Vec<&Section> = sections.iter().filter(|s| s.fence.is_some()).collect();
    let mut by_granted = fenced.clone();
    by_granted.sort_by_key(|s| s.granted);
    let mut by_requested = fenced;
    by_requested.sort_by_key(|s| s.requested);
    // The highest fence answered so far, per resource, and its section.
    let mut highest: HashMap<&str, &Section> = HashMap::new();
    let mut next = 0;
    for b in by_requested {
        while next < by_granted.len() && by_granted[next].granted < b.requested {
            let a = by_granted[next];
            let slot = highest.entry(a.resource.as_str()).or_insert(a);
            if a.fence > slot.fence {
                *slot = a;
            }
            next += 1;
        }
        let fence_b = b.fence.unwrap_or(0);
        let mut across: Option<&Section> = None;
        for (resource, a) in &highest {
            let fence_a = a.fence.unwrap_or(0);
            if fence_a < fence_b || (fence_a == fence_b && is_reader(b)) {
                continue;
            }
            if *resource == b.resource {
                out.out_of_order.push(FenceInversion {
                    earlier: (*a).clone(),
                    later: b.clone(),
                    across_resources: false,
                });
            } else if across.is_none_or(|w| a.fence > w.fence) {
                across = Some(a);
            }
        }
        if let Some(a) = across {
            out.out_of_order_across.push(FenceInversion {
                earlier: a.clone(),
                later: b.clone(),
                across_resources: true,
            });
        }
    }
    out.stale_writes_accepted = stale_writes(sections);
    out
}

/// Per resource: accepted writes the store ordered after the accepted write
/// of a section requested after theirs was answered.
pub(super) fn stale_writes(sections: &[Section]) -> Vec<StaleWrite> {
    let mut by_resource: HashMap<&str, Vec<(&Section, u64)>> = HashMap::new();
    for s in sections {
        if let Some(StoreWrite {
            outcome: WriteOutcome::Accepted { seq },
            ..
        }) = &s.write
        {
            by_resource
                .entry(s.resource.as_str())
                .or_default()
                .push((s, *seq));
        }
    }
    let mut out = Vec::new();
    for (_, mut writes) in by_resource {
        // By request time; the suffix minimum of `seq` says, for any time
        // t, which accepted write of a section requested after t came first.
        writes.sort_by_key(|(s, _)| s.requested);
        let n = writes.len();
        let mut first_after: Vec<usize> = (0..n).collect();
        for i in (0..n.saturating_sub(1)).rev() {
            let j = first_after[i + 1];
            if writes[j].1 < writes[i].1 {
                first_after[i] = j;
            }
        }
        for (a, seq_a) in &writes {
            let from = writes.partition_point(|(s, _)| s.requested <= a.granted);
            if from == writes.len() {
                continue;
            }
            let (b, seq_b) = writes[first_after[from]];
            if seq_b < *seq_a {
                out.push(StaleWrite {
                    stale: (*a).clone(),
                    newer: b.clone(),
                });
            }
        }
    }
    out.sort_by_key(|w| w.stale.granted);
    out
}

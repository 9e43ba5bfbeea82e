//! The semaphore and election properties over every section: permits
//! believed at once against the limit, leaderships believed at once, and
//! terms in the order their `elected` arrived.

use std::collections::HashMap;

use super::{LeaderOverlap, Primitive, PrimitiveFindings, Section, SemaphoreExcess, TermInversion};
use crate::clock::Mono;

/// The semaphore property (never more believed permits at once than the
/// limit) and the election properties (never two believed leaders at
/// once; terms in the order their `elected` arrived) over every section.
pub(super) fn primitives(sections: &[Section], now: Mono) -> PrimitiveFindings {
    let mut out = PrimitiveFindings::default();
    let mut semaphores: HashMap<&str, (u32, Vec<&Section>)> = HashMap::new();
    let mut elections: HashMap<&str, Vec<&Section>> = HashMap::new();
    for s in sections {
        match &s.primitive {
            Primitive::Lock | Primitive::Shared | Primitive::Multi { .. } => {}
            Primitive::Permit {
                semaphore, limit, ..
            } => {
                out.permits += 1;
                let entry = semaphores
                    .entry(semaphore.as_str())
                    .or_insert((*limit, Vec::new()));
                // Every client asks for the same limit; the smallest is
                // the strictest reading if one did not.
                entry.0 = entry.0.min(*limit);
                entry.1.push(s);
            }
            Primitive::Leadership { election, .. } => {
                out.leaderships += 1;
                elections.entry(election.as_str()).or_default().push(s);
            }
        }
    }
    let mut names: Vec<&str> = semaphores.keys().copied().collect();
    names.sort_unstable();
    for name in names {
        let (limit, permits) = &semaphores[name];
        let (most, excess) = excess(name, *limit, permits, now);
        out.most_believed.push((name.to_string(), *limit, most));
        out.semaphore_excess.extend(excess);
    }
    out.elections = elections.len();
    for (election, leaderships) in elections {
        out.leader_overlaps
            .extend(leader_overlaps(election, &leaderships, now));
        out.term_inversions
            .extend(term_inversions(election, &leaderships));
    }
    out.semaphore_excess.sort_by_key(|e| e.from);
    out.leader_overlaps.sort_by_key(|o| o.second.entry);
    out.term_inversions.sort_by_key(|i| i.later.granted);
    out
}

/// Stretches of time in which more than `limit` of `permits` were believed
/// (counted from the answers' arrival), each marked strict when more than
/// `limit` were also believed in it counting from the requests; and the
/// most believed at one instant.
fn excess(
    semaphore: &str,
    limit: u32,
    permits: &[&Section],
    now: Mono,
) -> (usize, Vec<SemaphoreExcess>) {
    let limit_n = usize::try_from(limit).unwrap_or(usize::MAX);
    let stretches = |strict: bool| {
        // (time, +1 start / -1 end, section); ends before starts at the
        // same instant: a hand-off at one instant is no overlap.
        let mut events: Vec<(Mono, i8, usize)> = Vec::new();
        for (i, s) in permits.iter().enumerate() {
            if let Some((start, end)) = s.believed_part(now, strict) {
                events.push((start, 1, i));
                events.push((end, -1, i));
            }
        }
        events.sort_by_key(|&(t, delta, _)| (t, delta));
        let mut believed: Vec<usize> = Vec::new();
        let mut most = 0;
        // (from, until, most at once, sections believed in the stretch)
        let mut out: Vec<(Mono, Mono, usize, Vec<usize>)> = Vec::new();
        let mut open: Option<(Mono, usize, Vec<usize>)> = None;
        for (t, delta, i) in events {
            if delta > 0 {
                believed.push(i);
            } else {
                believed.retain(|&j| j != i);
            }
            most = most.max(believed.len());
            match (&mut open, believed.len() > limit_n) {
                (None, true) => open = Some((t, believed.len(), believed.clone())),
                (Some((_, peak, seen)), true) => {
                    *peak = (*peak).max(believed.len());
                    for &j in &believed {
                        if !seen.contains(&j) {
                            seen.push(j);
                        }
                    }
                }
                (Some(_), false) => {
                    if let Some((from, peak, seen)) = open.take() {
                        out.push((from, t, peak, seen));
                    }
                }
                (None, false) => {}
            }
        }
        (most, out)
    };
    let (most, loose) = stretches(false);
    let (_, strict) = stretches(true);
    let found = loose
        .into_iter()
        .map(|(from, until, peak, seen)| SemaphoreExcess {
            semaphore: semaphore.to_string(),
            limit,
            believed: peak,
            from,
            until,
            strict: strict.iter().any(|(f, u, _, _)| *f < until && from < *u),
            sections: seen.into_iter().map(|i| permits[i].clone()).collect(),
        })
        .collect();
    (most, found)
}

/// Pairs of leaderships of one election believed at the same instant.
fn leader_overlaps(election: &str, leaderships: &[&Section], now: Mono) -> Vec<LeaderOverlap> {
    let mut parts: Vec<(Mono, Mono, &Section)> = leaderships
        .iter()
        .filter_map(|s| s.believed_part(now, false).map(|(a, b)| (a, b, *s)))
        .collect();
    parts.sort_by_key(|&(start, _, _)| start);
    let mut out = Vec::new();
    for (i, &(a0, a1, a)) in parts.iter().enumerate() {
        for &(b0, b1, b) in &parts[i + 1..] {
            if b0 >= a1 {
                break; // sorted by start: no later part overlaps `a`
            }
            out.push(LeaderOverlap {
                election: election.to_string(),
                first: a.clone(),
                second: b.clone(),
                overlap_ms: a1.min(b1).ms_after(a0.max(b0)),
            });
        }
    }
    out
}

/// Leaderships whose `elected` arrived after another's had, with a term
/// not above it: one per later leadership, against the earlier one with
/// the highest term.
fn term_inversions(election: &str, leaderships: &[&Section]) -> Vec<TermInversion> {
    let mut by_elected: Vec<&Section> = leaderships.to_vec();
    by_elected.sort_by_key(|s| s.granted);
    let mut highest: Option<&Section> = None;
    let mut out = Vec::new();
    for s in by_elected {
        if let Some(h) = highest {
            if h.granted < s.granted && s.fence <= h.fence {
                out.push(TermInversion {
                    election: election.to_string(),
                    earlier: h.clone(),
                    later: s.clone(),
                });
            }
        }
        if highest.is_none_or(|h| s.fence > h.fence) {
            highest = Some(s);
        }
    }
    out
}

//! The read-write property: an exclusive grant never overlaps any other
//! believed grant of the same resource; shared grants (readers) may
//! overlap each other.
//!
//! A reader's section is [`Primitive::Shared`]: the lock of its resource
//! taken with `"mode": "shared"`. Two readers at once are what the mode is
//! for, so they are left out of the safety property's pairs; here each
//! reader stands beside the exclusive sections of its resource (a lock,
//! or a grant of several resources that names it), and a reader and an
//! exclusive grant whose believed parts overlap are a finding. Two
//! exclusive grants at once stay the safety (or multi-resource) finding
//! they were. A grant is believed from its answer's arrival to the end of
//! its validity, its release, or its `lost`, as any lock.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::{overlaps, Primitive, Section, Violation};
use crate::clock::Mono;

/// A reader and an exclusive grant of one resource believed at once.
#[derive(Debug, Clone, Serialize)]
pub struct SharedOverlap(pub Violation);

impl SharedOverlap {
    /// The exclusive grant of the pair.
    pub fn writer(&self) -> &Section {
        if is_reader(&self.0.first) {
            &self.0.second
        } else {
            &self.0.first
        }
    }

    /// The reader of the pair.
    pub fn reader(&self) -> &Section {
        if is_reader(&self.0.first) {
            &self.0.first
        } else {
            &self.0.second
        }
    }
}

impl fmt::Display for SharedOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.0;
        write!(
            f,
            "WRITER BESIDE A READER on {:?}: {:.1}ms of overlap{}\n    writer: {}\n    reader: {}",
            v.resource,
            v.overlap_ms,
            if v.strict {
                ""
            } else {
                " (only when validity is counted from the answer's arrival)"
            },
            self.writer().brief(),
            self.reader().brief(),
        )
    }
}

/// What the read-write property says.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SharedFindings {
    /// Readers' sections.
    pub readers: usize,
    /// Exclusive sections of the resources readers held.
    pub writers: usize,
    /// The most readers believed at one instant on one resource (what
    /// shows the mode was used).
    pub most_readers: usize,
    /// Each (writer, reader) pair once.
    pub overlaps: Vec<SharedOverlap>,
}

/// Whether a section is a reader's.
pub fn is_reader(section: &Section) -> bool {
    matches!(section.primitive, Primitive::Shared)
}

/// The read-write property over every section, as of `now` (open
/// sections count as inside).
pub(super) fn findings(sections: &[Section], now: Mono) -> SharedFindings {
    let mut out = SharedFindings::default();
    let mut by_resource: HashMap<&str, Vec<&Section>> = HashMap::new();
    for s in sections {
        match &s.primitive {
            Primitive::Shared => {
                out.readers += 1;
                by_resource.entry(s.resource.as_str()).or_default().push(s);
            }
            Primitive::Lock => by_resource.entry(s.resource.as_str()).or_default().push(s),
            Primitive::Multi { resources } => {
                for r in resources {
                    by_resource.entry(r.as_str()).or_default().push(s);
                }
            }
            Primitive::Permit { .. } | Primitive::Leadership { .. } => {}
        }
    }
    for (resource, on) in by_resource {
        if !on.iter().any(|s| is_reader(s)) {
            continue;
        }
        out.writers += on.iter().filter(|s| !is_reader(s)).count();
        let readers: Vec<&Section> = on.iter().copied().filter(|s| is_reader(s)).collect();
        out.most_readers = out.most_readers.max(most_at_once(&readers, now));
        let (found, _) = overlaps(resource, &on, now);
        out.overlaps.extend(
            found
                .into_iter()
                .filter(|v| is_reader(&v.first) != is_reader(&v.second))
                .map(SharedOverlap),
        );
    }
    out.overlaps
        .sort_by(|a, b| (a.0.second.entry, &a.0.resource).cmp(&(b.0.second.entry, &b.0.resource)));
    out
}

/// The most of `sections` believed at one instant (validity counted from
/// the answers' arrival).
fn most_at_once(sections: &[&Section], now: Mono) -> usize {
    // Ends before starts at the same instant: a hand-off is no overlap.
    let mut events: Vec<(Mono, i8)> = Vec::new();
    for s in sections {
        if let Some((start, end)) = s.believed_part(now, false) {
            events.push((start, 1));
            events.push((end, -1));
        }
    }
    events.sort_unstable();
    let (mut now_in, mut most) = (0i64, 0i64);
    for (_, delta) in events {
        now_in += i64::from(delta);
        most = most.max(now_in);
    }
    usize::try_from(most).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::super::{Checker, ClientKind, Ending, Grant, SectionId};
    use super::*;

    fn at(ms: u64) -> Mono {
        Mono(1_000_000_000).plus_ms(ms)
    }

    /// A section of `resource`, a reader's when `shared`, granted at
    /// `granted` for 900 ms of validity, left at `exit`.
    fn section(
        c: &Checker,
        resource: &str,
        shared: bool,
        token: &str,
        granted: u64,
        exit: u64,
    ) -> SectionId {
        fenced(c, (resource, shared), token, (granted, exit), None)
    }

    /// [`section`] with the fence its grant carried.
    fn fenced(
        c: &Checker,
        (resource, shared): (&str, bool),
        token: &str,
        (granted, exit): (u64, u64),
        fence: Option<u64>,
    ) -> SectionId {
        let grant = Grant {
            resource: resource.into(),
            client: format!("c-{token}"),
            kind: if shared {
                ClientKind::SharedAcquire
            } else {
                ClientKind::Acquire
            },
            agent: 0,
            token: token.into(),
            ttl_ms: 1000,
            requested: at(granted.saturating_sub(2)),
            granted: at(granted),
            validity_ms: Some(900),
            fence,
        };
        let primitive = if shared {
            Primitive::Shared
        } else {
            Primitive::Lock
        };
        let id = c.enter_as(grant, at(granted), primitive);
        c.exit(id, at(exit), Ending::Released { released: true });
        id
    }

    #[test]
    fn a_writer_believed_beside_a_reader_is_found() {
        let c = Checker::new();
        // Two readers at once: what the mode is for.
        section(&c, "r0", true, "s1", 0, 500);
        section(&c, "r0", true, "s2", 100, 400);
        // A writer granted while s1 still reads: 200 ms beside it.
        section(&c, "r0", false, "w1", 300, 700);
        // A reader of another resource at the same time: fine.
        section(&c, "r1", true, "s3", 300, 700);
        let f = c.findings(at(2000));
        let s = &f.shared;
        assert_eq!((s.readers, s.writers, s.most_readers), (3, 1, 2));
        let pairs: Vec<(&str, &str)> = s
            .overlaps
            .iter()
            .map(|o| (o.writer().token.as_str(), o.reader().token.as_str()))
            .collect();
        assert_eq!(pairs, [("w1", "s1"), ("w1", "s2")]);
        assert!((s.overlaps[0].0.overlap_ms - 200.0).abs() < 1e-6);
        assert!((s.overlaps[1].0.overlap_ms - 100.0).abs() < 1e-6);
        let text = s.overlaps[0].to_string();
        assert!(text.contains("WRITER BESIDE A READER on \"r0\""), "{text}");
        assert!(
            text.contains("writer: c-w1") && text.contains("reader: c-s1"),
            "{text}"
        );
        // Readers are not the single locks' safety property.
        assert!(f.violations.is_empty(), "{:?}", f.violations);
    }

    #[test]
    fn readers_together_and_writers_in_turn_are_fine() {
        let c = Checker::new();
        section(&c, "r0", true, "s1", 0, 300);
        section(&c, "r0", true, "s2", 50, 290);
        section(&c, "r0", true, "s3", 100, 305);
        section(&c, "r0", false, "w1", 310, 600);
        section(&c, "r0", true, "s4", 610, 800);
        section(&c, "r0", true, "s5", 620, 900);
        section(&c, "r0", false, "w2", 910, 1200);
        let f = c.findings(at(2000));
        let s = &f.shared;
        assert_eq!((s.readers, s.writers, s.most_readers), (5, 2, 3));
        assert!(s.overlaps.is_empty(), "{:?}", s.overlaps);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
    }

    #[test]
    fn a_reader_told_lost_is_no_longer_believed() {
        let c = Checker::new();
        let s1 = section(&c, "r0", true, "s1", 0, 500);
        c.belief_ended(s1, at(250));
        section(&c, "r0", false, "w1", 260, 400);
        let f = c.findings(at(2000));
        assert!(f.shared.overlaps.is_empty(), "{:?}", f.shared.overlaps);
    }

    /// A grant of several resources is exclusive on each: beside a reader
    /// of one of them it is found here, not as a multi-resource overlap.
    #[test]
    fn a_grant_of_several_resources_beside_a_reader_is_found() {
        let c = Checker::new();
        section(&c, "r1", true, "s1", 0, 500);
        let grant = Grant {
            resource: "r0+r1".into(),
            client: "c-m1".into(),
            kind: ClientKind::MultiAcquire,
            agent: 0,
            token: "m1".into(),
            ttl_ms: 1000,
            requested: at(98),
            granted: at(100),
            validity_ms: Some(900),
            fence: None,
        };
        let primitive = Primitive::Multi {
            resources: vec!["r0".into(), "r1".into()],
        };
        let id = c.enter_as(grant, at(100), primitive);
        c.exit(id, at(200), Ending::Released { released: true });
        let f = c.findings(at(2000));
        assert_eq!(f.shared.overlaps.len(), 1, "{:?}", f.shared.overlaps);
        assert_eq!(f.shared.overlaps[0].writer().token, "m1");
        assert!(f.multi.overlaps.is_empty(), "{:?}", f.multi.overlaps);
    }

    /// A reader's fence is the last writer's, never raised: equal to an
    /// answered writer's is in order, below it is not; a writer after a
    /// reader must still be above it.
    #[test]
    fn a_readers_fence_may_equal_the_writers_it_follows_but_not_fall_below() {
        let c = Checker::new();
        let grant = |shared: bool, token: &str, granted: u64, fence: u64| {
            fenced(
                &c,
                ("r0", shared),
                token,
                (granted, granted + 50),
                Some(fence),
            );
        };
        grant(false, "w1", 0, 100);
        grant(true, "s1", 60, 100);
        grant(true, "s2", 120, 100);
        grant(false, "w2", 180, 101);
        let f = c.findings(at(2000)).fences;
        assert!(f.out_of_order.is_empty(), "{:?}", f.out_of_order);
        grant(true, "s3", 240, 100); // below w2's
        grant(false, "w3", 300, 100); // not above w2's
        let f = c.findings(at(2000)).fences;
        let later: Vec<&str> = f
            .out_of_order
            .iter()
            .map(|i| i.later.token.as_str())
            .collect();
        assert_eq!(later, ["s3", "w3"], "{:?}", f.out_of_order);
    }

    #[test]
    fn two_writers_at_once_stay_a_safety_violation() {
        let c = Checker::new();
        section(&c, "r0", true, "s1", 2000, 2100);
        section(&c, "r0", false, "w1", 0, 500);
        section(&c, "r0", false, "w2", 300, 700);
        let f = c.findings(at(3000));
        assert_eq!(f.violations.len(), 1);
        assert!(f.shared.overlaps.is_empty(), "{:?}", f.shared.overlaps);
    }
}

//! The multi-resource property: no resource is held by two believed
//! grants at once, a grant of several resources counted on each of them.
//!
//! A grant of several resources is one section ([`Primitive::Multi`]): one
//! token, one validity, the resources it names. Here it stands on each of
//! them beside the single-resource sections of that resource, and two
//! sections of one resource whose believed parts overlap are a finding when
//! at least one of them is a grant of several resources (two single
//! grants are the safety violations already). A grant is believed from its
//! answer's arrival to the end of its validity, its release, or its `lost`,
//! as any lock.
//!
//! The agent stores at each key of such a grant a value of its own, not
//! the token: the token's random part with a check made for that key. The
//! leak checks find the grant's section by that shared part ([`shared`]).

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::{overlaps, Primitive, Section, Violation};
use crate::clock::Mono;

/// Two believed grants of one resource at once, one of them (or both) of
/// several resources.
#[derive(Debug, Clone, Serialize)]
pub struct MultiOverlap(pub Violation);

impl fmt::Display for MultiOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.0;
        write!(
            f,
            "MULTI-RESOURCE OVERLAP on {:?}: {:.1}ms of overlap{}\n    first:  {} on {}\n    second: {} on {}",
            v.resource,
            v.overlap_ms,
            if v.strict {
                ""
            } else {
                " (only when validity is counted from the answer's arrival)"
            },
            v.first.brief(),
            held(&v.first).join("+"),
            v.second.brief(),
            held(&v.second).join("+"),
        )
    }
}

/// What the multi-resource property says.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MultiFindings {
    /// Sections of grants of several resources.
    pub grants: usize,
    /// Resource-sections they stood on (a grant of 3 counts 3).
    pub resource_sections: usize,
    /// Each pair once per resource they share.
    pub overlaps: Vec<MultiOverlap>,
}

/// The resources a lock's section holds: its own, or those of a grant of
/// several; none for a permit or a leadership (their own properties), nor
/// for a reader (a grant of several resources beside it is the read-write
/// property's finding, [`super::shared`]).
pub fn held(section: &Section) -> Vec<&str> {
    match &section.primitive {
        Primitive::Lock => vec![section.resource.as_str()],
        Primitive::Multi { resources } => resources.iter().map(String::as_str).collect(),
        Primitive::Shared | Primitive::Permit { .. } | Primitive::Leadership { .. } => Vec::new(),
    }
}

/// The part of a token that the values at every key of its grant share:
/// the agent's token format `rl2-<40 hex digits>-...`, cut after the
/// random part; `None` for a token of another format.
pub fn shared(token: &str) -> Option<&str> {
    let part = token.get(..44)?;
    (part.starts_with("rl2-") && part[4..].bytes().all(|b| b.is_ascii_hexdigit())).then_some(part)
}

/// The section a value seen at a lock key belongs to: the token itself
/// (a lock, a permit, a leadership), or the shared part of a grant of
/// several resources.
pub(super) fn section_of(
    by_token: &HashMap<String, usize>,
    multi_values: &HashMap<String, usize>,
    value: &str,
) -> Option<usize> {
    by_token
        .get(value)
        .or_else(|| multi_values.get(shared(value)?))
        .copied()
}

/// The multi-resource property over every section, as of `now` (open
/// sections count as inside).
pub(super) fn findings(sections: &[Section], now: Mono) -> MultiFindings {
    let mut out = MultiFindings::default();
    let mut by_resource: HashMap<&str, Vec<&Section>> = HashMap::new();
    for s in sections {
        let resources = held(s);
        if matches!(s.primitive, Primitive::Multi { .. }) {
            out.grants += 1;
            out.resource_sections += resources.len();
        }
        for r in resources {
            by_resource.entry(r).or_default().push(s);
        }
    }
    for (resource, on) in by_resource {
        if !on
            .iter()
            .any(|s| matches!(s.primitive, Primitive::Multi { .. }))
        {
            continue;
        }
        let (found, _) = overlaps(resource, &on, now);
        out.overlaps.extend(
            found
                .into_iter()
                .filter(|v| {
                    matches!(v.first.primitive, Primitive::Multi { .. })
                        || matches!(v.second.primitive, Primitive::Multi { .. })
                })
                .map(MultiOverlap),
        );
    }
    out.overlaps
        .sort_by(|a, b| (a.0.second.entry, &a.0.resource).cmp(&(b.0.second.entry, &b.0.resource)));
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Checker, ClientKind, Ending, Grant, SectionId};
    use super::*;

    fn at(ms: u64) -> Mono {
        Mono(1_000_000_000).plus_ms(ms)
    }

    /// A section of `resources` (one: a lock; more: a grant of several)
    /// granted at `granted` for `validity` ms, left at `exit`.
    fn section(c: &Checker, resources: &[&str], token: &str, granted: u64, exit: u64) -> SectionId {
        let grant = Grant {
            resource: resources.join("+"),
            client: format!("c-{token}"),
            kind: if resources.len() > 1 {
                ClientKind::MultiAcquire
            } else {
                ClientKind::Acquire
            },
            agent: 0,
            token: token.into(),
            ttl_ms: 1000,
            requested: at(granted.saturating_sub(2)),
            granted: at(granted),
            validity_ms: Some(900),
            fence: None,
        };
        let id = if resources.len() > 1 {
            let primitive = Primitive::Multi {
                resources: resources.iter().map(|r| r.to_string()).collect(),
            };
            c.enter_as(grant, at(granted), primitive)
        } else {
            c.enter(grant, at(granted))
        };
        c.exit(id, at(exit), Ending::Released { released: true });
        id
    }

    #[test]
    fn grants_of_several_resources_that_overlap_on_one_are_found() {
        let c = Checker::new();
        // {r0,r1} then {r1,r2} while the first is believed: r1 twice.
        section(&c, &["r0", "r1"], "m1", 0, 500);
        section(&c, &["r1", "r2"], "m2", 300, 700);
        // A single lock of r2 inside the second: r2 twice.
        section(&c, &["r2"], "s1", 600, 650);
        // A single lock of r0 after the first ended: fine.
        section(&c, &["r0"], "s2", 510, 800);
        let f = c.findings(at(2000));
        let m = &f.multi;
        assert_eq!((m.grants, m.resource_sections), (2, 4));
        let on: Vec<(&str, &str, &str)> = m
            .overlaps
            .iter()
            .map(|o| {
                (
                    o.0.resource.as_str(),
                    o.0.first.token.as_str(),
                    o.0.second.token.as_str(),
                )
            })
            .collect();
        assert_eq!(on, [("r1", "m1", "m2"), ("r2", "m2", "s1")]);
        assert!((m.overlaps[0].0.overlap_ms - 200.0).abs() < 1e-6);
        let text = m.overlaps[0].to_string();
        assert!(text.contains("MULTI-RESOURCE OVERLAP on \"r1\""), "{text}");
        assert!(
            text.contains("on r0+r1") && text.contains("on r1+r2"),
            "{text}"
        );
        // Sections of several resources are not the single locks' safety
        // property: no violation there.
        assert!(f.violations.is_empty(), "{:?}", f.violations);
    }

    #[test]
    fn grants_of_several_resources_in_turn_or_apart_are_fine() {
        let c = Checker::new();
        section(&c, &["r0", "r1"], "m1", 0, 300);
        section(&c, &["r1", "r2"], "m2", 310, 600);
        // At the same time as m2, on other resources.
        section(&c, &["r0", "r3"], "m3", 320, 700);
        section(&c, &["r1"], "s1", 610, 900);
        section(&c, &["r2", "r0"], "m4", 710, 1000);
        let f = c.findings(at(2000));
        assert_eq!(f.multi.grants, 4);
        assert!(f.multi.overlaps.is_empty(), "{:?}", f.multi.overlaps);
        assert!(f.violations.is_empty());
    }

    #[test]
    fn a_grant_told_lost_is_no_longer_believed() {
        let c = Checker::new();
        let m1 = section(&c, &["r0", "r1"], "m1", 0, 500);
        c.belief_ended(m1, at(250));
        section(&c, &["r1"], "s1", 260, 400);
        let f = c.findings(at(2000));
        assert!(f.multi.overlaps.is_empty(), "{:?}", f.multi.overlaps);
    }

    /// A key of a grant of several resources that stays past the section's
    /// end and its TTL is a leak, found by the value's shared part.
    #[test]
    fn a_key_of_a_grant_of_several_that_outlives_it_is_a_leak() {
        let c = Checker::new();
        let random = "ab".repeat(20);
        let token = format!("rl2-{random}-{}", "00".repeat(8));
        section(&c, &["r0", "r1"], &token, 0, 300);
        assert_eq!(shared(&token), Some(&token[..44]));
        // The value at r1's key: the same random part, another check.
        let value = format!("rl2-{random}-{}@a1", "11".repeat(8));
        let sighting = |seen| crate::checker::Sighting {
            master: "r1",
            resource: "r1",
            token: &value,
            pttl_ms: 500,
            seen: at(seen),
        };
        c.key_seen(sighting(400), 5000, 100);
        assert!(c.findings(at(400)).leaks.is_empty());
        // First seen after the exit at 400; its TTL is 1000, the slack 100.
        c.key_seen(sighting(1600), 5000, 100);
        let leaks = c.findings(at(1600)).leaks;
        assert_eq!(leaks.len(), 1, "{leaks:?}");
        assert!(
            leaks[0].why.contains("neither released nor expired"),
            "{leaks:?}"
        );
        assert_eq!(shared("not a token of that format"), None);
    }

    #[test]
    fn two_single_locks_at_once_are_a_violation_not_a_multi_overlap() {
        let c = Checker::new();
        section(&c, &["r0", "r1"], "m1", 2000, 2100);
        section(&c, &["r0"], "s1", 0, 500);
        section(&c, &["r0"], "s2", 300, 700);
        let f = c.findings(at(3000));
        assert_eq!(f.violations.len(), 1);
        assert!(f.multi.overlaps.is_empty(), "{:?}", f.multi.overlaps);
    }
}

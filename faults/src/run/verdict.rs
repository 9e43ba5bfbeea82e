//! One line per report, `PASS ...` or `FAIL ...`: a run without a
//! control passes with no problem; a control run without its protection
//! passes only when the checker found what the missing protection lets
//! through.

use super::{
    intrusion, multi, shared, FenceControl, Property, Report, FENCE_CONTROL_GRANTS, PLANTED,
};
use crate::cluster::{
    FENCE_CLOCK_SKEW_ENV, NO_EVICTION_CHECK_ENV, NO_FENCE_WRITEBACK_ENV, NO_MARKER_CHECK_ENV,
};
use crate::nemesis::FaultKind;

/// The fence control's verdict: with the write-back, no problem and
/// enough fenced grants; without it, fences out of order must be found.
fn fence_verdict(r: &Report, fence: FenceControl) -> String {
    if r.property == Property::Election {
        return term_verdict(r, fence);
    }
    let f = &r.findings.fences;
    let found = f.out_of_order.len() + f.out_of_order_across.len();
    if fence.writeback {
        let mut problems = r.problems();
        if f.fenced_grants < FENCE_CONTROL_GRANTS {
            problems.push(format!(
                "only {} fenced grants: too few to judge the order",
                f.fenced_grants
            ));
        }
        if problems.is_empty() {
            format!(
                "PASS {}: {} fenced grants, none out of order",
                r.name, f.fenced_grants
            )
        } else {
            format!("FAIL {}: {}", r.name, problems.join(", "))
        }
    } else if found > 0 {
        format!(
            "PASS {}: the checker saw {found} fences out of order ({} across resources), as it must",
            r.name,
            f.out_of_order_across.len()
        )
    } else {
        format!(
            "FAIL {}: no fence out of order in {} fenced grants; the checker cannot see, \
             or the agents ignored {NO_FENCE_WRITEBACK_ENV}=1 or {FENCE_CLOCK_SKEW_ENV}",
            r.name, f.fenced_grants
        )
    }
}

/// The term control's verdict: with the write-back, no problem and
/// enough leaderships; without it, terms out of order must be found.
fn term_verdict(r: &Report, fence: FenceControl) -> String {
    let p = &r.findings.primitives;
    let found = p.term_inversions.len();
    if fence.writeback {
        let mut problems = r.problems();
        if p.leaderships < FENCE_CONTROL_GRANTS {
            problems.push(format!(
                "only {} leaderships: too few to judge the order of terms",
                p.leaderships
            ));
        }
        if problems.is_empty() {
            format!(
                "PASS {}: {} leaderships, no term out of order",
                r.name, p.leaderships
            )
        } else {
            format!("FAIL {}: {}", r.name, problems.join(", "))
        }
    } else if found > 0 {
        format!(
            "PASS {}: the checker saw {found} terms out of order in {} leaderships, as it must",
            r.name, p.leaderships
        )
    } else {
        format!(
            "FAIL {}: no term out of order in {} leaderships; the checker cannot see, \
             or the agents ignored {NO_FENCE_WRITEBACK_ENV}=1 or {FENCE_CLOCK_SKEW_ENV}",
            r.name, p.leaderships
        )
    }
}

/// What an unprotected control of `property` found, and how to say it.
fn control_findings(r: &Report) -> (usize, &'static str, &'static str) {
    let p = &r.findings.primitives;
    match r.property {
        Property::Lock => (r.findings.violations.len(), "violations", "a double grant"),
        Property::Semaphore => (
            p.semaphore_excess.len(),
            "semaphore excesses",
            "more permits than the limit",
        ),
        Property::Election => (
            p.leader_overlaps.len(),
            "times two leaders at once",
            "two leaders",
        ),
    }
}

/// One line per report: `PASS ...` or `FAIL ...`. A control run without
/// its protection passes only when it found violations (and, for the
/// restart control, the planted leak).
pub fn verdicts(reports: &[Report]) -> Vec<String> {
    reports
        .iter()
        .map(|r| {
            let unprotected = r.control.filter(|c| !c.protected);
            let evictions = r.control.filter(|c| c.fault == FaultKind::Evict);
            if let Some(verdict) = intrusion::verdict(r) {
                verdict
            } else if let Some(verdict) = multi::verdict(r) {
                verdict
            } else if let Some(verdict) = shared::verdict(r) {
                verdict
            } else if let Some(fence) = r.fence_control {
                fence_verdict(r, fence)
            } else if evictions.is_some() && r.nemesis.faults.is_empty() {
                format!(
                    "FAIL {}: the held lock's key was never evicted from a majority; \
                     the run proves nothing ({})",
                    r.name,
                    r.nemesis.skipped.join("; ")
                )
            } else if let Some(control) = unprotected {
                let (n, what, excess) = control_findings(r);
                let planted = control.fault != FaultKind::RestartMajority
                    || r.findings.leaks.iter().any(|l| l.resource == PLANTED);
                let also = if control.fault == FaultKind::RestartMajority {
                    " and the planted leak"
                } else {
                    ""
                };
                match (n > 0, planted) {
                    (true, true) => format!(
                        "PASS {}: the checker saw {n} {what}{also}, as it must",
                        r.name
                    ),
                    (false, _) if control.fault == FaultKind::Evict => format!(
                        "FAIL {}: no violation found; the checker cannot see {excess}, \
                         or the agents ignored {NO_EVICTION_CHECK_ENV}=1, or a probe \
                         quarantined the masters before every second vote",
                        r.name
                    ),
                    (false, _)
                        if matches!(
                            control.fault,
                            FaultKind::FlushMajority | FaultKind::ShardFailover
                        ) =>
                    {
                        format!(
                            "FAIL {}: none found; the checker cannot see {excess}, \
                             or the agents ignored {NO_MARKER_CHECK_ENV}=1",
                            r.name
                        )
                    }
                    (false, _) => format!(
                        "FAIL {}: none found; the checker cannot see {excess}",
                        r.name
                    ),
                    (true, false) => format!(
                        "FAIL {}: the planted key without a TTL was not reported as a leak",
                        r.name
                    ),
                }
            } else {
                let problems = r.problems();
                if problems.is_empty() {
                    format!("PASS {}", r.name)
                } else {
                    format!("FAIL {}: {}", r.name, problems.join(", "))
                }
            }
        })
        .collect()
}

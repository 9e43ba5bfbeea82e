//! The leak scanner's commands on the lock connection: its fenced writes
//! (its claim, repairs and report) and a standby scanner's look at the
//! fleet's report (see `crate::scanner`), read by the health probe's own
//! call while the agent is idle ([`Look`]).

use std::time::{Duration, Instant};

use redlock_wire::keys::{key_slot, slot_key};

use super::scan::key_states;
use super::{scripts, ttl_ms, Node};
use crate::redlock::master::NodeError;
use crate::redlock::observe::Op;

impl Node {
    /// One of the leak scanner's fenced writes (see
    /// [`scripts::LEAK_FENCED`]): the master refuses it when it has seen a
    /// higher scan fence than `fence`, a newer scanner's. `fence_key` is
    /// the prefix's scan fence (`<prefix> leak fence`); on a cluster the
    /// one of the written key's slot is used, so the script's keys share a
    /// slot. `check` is false only under the test switch.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn leak_write(
        &self,
        fence_key: &str,
        fence: u64,
        check: bool,
        write: &LeakWrite<'_>,
    ) -> Result<Fenced, NodeError> {
        let key = write.key();
        let fence_key = if self.is_cluster() {
            slot_key(fence_key, key_slot(key.as_bytes()))
        } else {
            fence_key.to_string()
        };
        let answer = self
            .request(Op::Scan, |mut conn| async move {
                let mut invocation = scripts::LEAK_FENCED.prepare_invoke();
                invocation
                    .key(&fence_key)
                    .key(key)
                    .arg(fence.to_string())
                    .arg(if check { "1" } else { "0" });
                match write {
                    LeakWrite::Claim { .. } => {
                        invocation.arg("c");
                    }
                    LeakWrite::Repair { value, ttl, .. } => {
                        invocation.arg("x").arg(*value).arg(ttl_ms(*ttl));
                    }
                    LeakWrite::Report { json, ttl, .. } => {
                        invocation.arg("w").arg(*json).arg(ttl_ms(*ttl));
                    }
                }
                invocation.invoke_async::<i64>(&mut conn).await
            })
            .await?;
        Ok(match answer {
            -1 => Fenced::Refused,
            0 => Fenced::Unchanged,
            _ => Fenced::Written,
        })
    }

    /// What a standby scanner looks at once per interval: the value of
    /// `report_key` (the fleet's last leak report) and whether `lease_key`
    /// (the fleet's scan lock) is there, in one script call on the lock
    /// connection ([`scripts::READ_KEYS`]; on a cluster, one per slot).
    /// Not the scanner's own connection: an agent that does not scan opens
    /// none, so a fleet of them adds no connection per agent to a master.
    ///
    /// `folded`: the standby is idle and looks once per
    /// `health.idle_interval` (see `crate::scanner::shared::folded`), as
    /// often as its probes come; the probes of a single server then read
    /// both keys in their own call, and this look answers with what the
    /// last of them read, when it is at most this old, instead of a call of
    /// its own (see [`Look`]). `woken`: a reader of `/v1/leaks` woke the
    /// look, which then reads the master now.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn leak_view(
        &self,
        report_key: &str,
        lease_key: &str,
        folded: Option<Duration>,
        woken: bool,
    ) -> Result<(Option<String>, bool), NodeError> {
        if !self.is_cluster() {
            let mut look = self.look();
            look.keys = folded.map(|_| (report_key.to_string(), lease_key.to_string()));
            match (folded, &look.read) {
                (None, _) => look.read = None,
                (Some(age), Some((at, report, leased))) if !woken && at.elapsed() <= age => {
                    return Ok((report.clone(), *leased));
                }
                _ => {}
            }
        }
        let read = |keys: Vec<String>| {
            self.request(Op::Scan, move |mut conn| async move {
                let mut invocation = scripts::READ_KEYS.prepare_invoke();
                for key in &keys {
                    invocation.key(key);
                }
                invocation
                    .invoke_async::<Vec<redis::Value>>(&mut conn)
                    .await
            })
        };
        let (report, lease) = if self.is_cluster()
            && key_slot(report_key.as_bytes()) != key_slot(lease_key.as_bytes())
        {
            let (report, lease) = futures::future::join(
                read(vec![report_key.to_string()]),
                read(vec![lease_key.to_string()]),
            )
            .await;
            (
                key_states(std::iter::once(report_key.to_string()), &report?),
                key_states(std::iter::once(lease_key.to_string()), &lease?),
            )
        } else {
            let reply = read(vec![report_key.to_string(), lease_key.to_string()]).await?;
            let mut states = key_states(
                [report_key, lease_key].into_iter().map(str::to_string),
                &reply,
            );
            let lease = states.split_off(1);
            (states, lease)
        };
        let report = report.into_iter().next().and_then(|s| s.value);
        let leased = lease.first().is_some_and(|s| s.pttl != -2);
        Ok((report, leased))
    }
}

/// A standby scanner's look, folded into the health probes of an idle
/// agent: one call per master per `health.idle_interval` for both, where
/// there were two, at times of their own. A look answers with the last
/// probe's read when it is recent enough (the scanner allows half an
/// interval more than its own, for the probe's round trip and timer); a
/// look that finds none so recent (a probe failed, or the agent was busy)
/// reads the master itself.
#[derive(Debug, Default)]
pub(super) struct Look {
    /// The fleet's report key and scan lock key, while the standby's looks
    /// are folded into the probes: the probes read them.
    keys: Option<(String, String)>,
    /// What the last probe read, and when: the report, and whether the
    /// scan lock is there.
    read: Option<(Instant, Option<String>, bool)>,
}

impl Node {
    fn look(&self) -> std::sync::MutexGuard<'_, Look> {
        // Poisoning needs a panic while held; the sections only assign.
        self.look.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The keys an idle probe reads for the standby scanner's next look,
    /// while its looks are folded into the probes.
    pub(super) fn look_keys(&self) -> Option<(String, String)> {
        self.look().keys.clone()
    }

    /// An idle probe read the standby scanner's keys: kept for its next
    /// look.
    pub(super) fn looked(&self, report: Option<String>, leased: bool) {
        let mut look = self.look();
        if look.keys.is_some() {
            look.read = Some((Instant::now(), report, leased));
        }
    }
}

/// A write of the leak scanner, fenced by [`Node::leak_write`].
#[derive(Debug, Clone, Copy)]
pub enum LeakWrite<'a> {
    /// Raise the scan fence only: a new scanner's first write on each
    /// master. `key` is the report's key (on a cluster, it names the slot).
    Claim { key: &'a str },
    /// Give a lock key left without TTL one of `ttl`, if it still holds
    /// `value` and has no TTL.
    Repair {
        key: &'a str,
        value: &'a str,
        ttl: Duration,
    },
    /// Write the fleet's report (`json`) under `key` with `ttl`.
    Report {
        key: &'a str,
        json: &'a str,
        ttl: Duration,
    },
}

impl LeakWrite<'_> {
    fn key(&self) -> &str {
        match self {
            LeakWrite::Claim { key }
            | LeakWrite::Repair { key, .. }
            | LeakWrite::Report { key, .. } => key,
        }
    }
}

/// What a master did with a fenced write of the leak scanner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Written: the claim or report stored, the repair's TTL set.
    Written,
    /// A repair left alone: the key changed or got a TTL since the scan.
    Unchanged,
    /// Refused: the master has seen a higher scan fence, a newer
    /// scanner's; nothing was written.
    Refused,
}

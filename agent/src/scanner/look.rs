//! A standby scanner's look at the fleet's report and scan lock (see
//! [`super::shared`]): once per interval, or, while the agent is idle and
//! another agent scans, once per `health.idle_interval` when that is
//! longer, and then read by the health probes' own call on each
//! single-server master ([`shared::folded`]).

use std::sync::Arc;
use std::time::Duration;

use redlock_wire::LeaksResponse;

use super::{shared, Scanner};
use crate::node::Node;
use crate::redlock::Resource;

impl Scanner {
    /// A standby's look: every master's copy of the fleet's report and
    /// whether the scan lock is there, in one call per master. Keeps the
    /// freshest report; true when the lock is on fewer than a quorum of
    /// masters (free, or about to be), so this agent may try to take it.
    ///
    /// `folded`: for an idle standby behind a live scanner, looking as
    /// often as its probes come ([`shared::folded`]), how old a probe's
    /// read of what it looks at may be (its own interval and half of it
    /// more; see [`Node::leak_view`]); `woken`: a reader of `/v1/leaks`
    /// woke the look, which reads the masters now.
    pub(super) async fn look(
        &self,
        nodes: &[Arc<Node>],
        folded: Option<Duration>,
        woken: bool,
    ) -> bool {
        let lease_key = Resource::leak_scan().key(&self.settings.key_prefix);
        let answers = futures::future::join_all(
            nodes
                .iter()
                .map(|n| n.leak_view(&self.report_key, &lease_key, folded, woken)),
        )
        .await;
        let (mut copies, mut unread, mut leased) = (Vec::new(), Vec::new(), 0);
        for (node, answer) in nodes.iter().zip(answers) {
            match answer {
                Ok((copy, held)) => {
                    leased += usize::from(held);
                    match copy.map(|json| serde_json::from_str::<LeaksResponse>(&json)) {
                        Some(Ok(report)) => copies.push(report),
                        Some(Err(e)) => {
                            tracing::warn!(node = node.name(), error = %e, "the fleet's leak report on this master does not parse; ignored");
                            unread.push(node.name().to_string());
                        }
                        None => {}
                    }
                }
                Err(e) => {
                    tracing::debug!(node = node.name(), error = %e, "could not read the fleet's leak report");
                    unread.push(node.name().to_string());
                }
            }
        }
        let mut view = self.view();
        if let Some(fresher) = shared::freshest(copies) {
            if shared::newer(&fresher, &view.report) {
                view.report = fresher;
            }
        }
        view.copies_unread = unread;
        view.scanning = false;
        self.export_view(&view.report);
        leased < self.settings.quorum
    }
}

//! A cluster's reads shard by shard: `SCAN` on one shard at a time (a
//! cluster has no scan over all its shards; the cursor names the shard),
//! and the fencing counters, one per slot.

use std::time::{Duration, Instant};

use redlock_wire::keys::{slot_key, SLOTS};

use super::sweep::SWEEP_COUNTERS;
use super::OnNode;
use crate::node::conn::bounded;
use crate::node::scan::scan_cmd;
use crate::node::{classify, Conn, Node};
use crate::redlock::master::NodeError;
use crate::redlock::observe::Op;

impl Node {
    /// This master's fencing counters for `slots` (each slot's on a
    /// cluster; the one counter, for every slot, on a single server), or
    /// for a single server's catch-up (`slots` empty) the highest of all.
    ///
    /// # Errors
    /// When the master does not answer in time or a counter is not a number.
    pub async fn read_fences(&self, slots: &[u16]) -> Result<Vec<u64>, NodeError> {
        if self.part().is_none() {
            let counter = self.read_fence().await?;
            return Ok(vec![counter; slots.len().max(1)]);
        }
        let wanted: Vec<u16> = if slots.is_empty() {
            (0..SLOTS).collect()
        } else {
            slots.to_vec()
        };
        let keys: Vec<String> = wanted
            .iter()
            .map(|slot| slot_key(&self.fence_key, *slot))
            .collect();
        let Some(conn) = self.connection() else {
            return Err(NodeError::NotConnected);
        };
        let keys: Vec<(u16, Vec<String>)> = wanted
            .iter()
            .zip(keys)
            .map(|(slot, key)| (*slot, vec![key]))
            .collect();
        let answers: std::collections::HashMap<u16, Result<i64, NodeError>> = self
            .sweep(&conn, &SWEEP_COUNTERS, keys, &[])
            .await
            .into_iter()
            .collect();
        let mut counters = Vec::with_capacity(wanted.len());
        for slot in &wanted {
            match answers.get(slot) {
                Some(Ok(counter)) => counters.push(u64::try_from(*counter).unwrap_or(0)),
                Some(Err(e)) => return Err(e.clone()),
                None => {
                    return Err(NodeError::Other(format!(
                        "slot {slot} is on no known shard"
                    )))
                }
            }
        }
        if slots.is_empty() {
            return Ok(vec![counters.into_iter().max().unwrap_or(0)]);
        }
        Ok(counters)
    }

    /// `SCAN` on shard `index` of the last probe's list (by address), for
    /// listings and the leak scan: a cluster has no scan over all its
    /// shards. `None` when there is no such shard.
    pub(crate) async fn scan_shard(
        &self,
        conn: &Conn,
        index: usize,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Option<Result<(u64, Vec<String>), NodeError>> {
        let (host, port) = self.shard_addresses().into_iter().nth(index)?;
        let mut node = OnNode::new(conn.cluster()?.clone(), host, port);
        let started = Instant::now();
        let result = bounded(
            self.timeout.max(Duration::from_secs(1)),
            scan_cmd(cursor, pattern, count).query_async::<(u64, Vec<String>)>(&mut node),
        )
        .await;
        self.observer.request(Op::Scan, started.elapsed());
        Some(result.map_err(|e| classify(&e)))
    }
}

/// A cursor over all shards: the shard's index in the high 16 bits, its own
/// `SCAN` cursor in the low 48 (Redis cursors stay far below 2^48).
pub fn shard_cursor(index: usize, cursor: u64) -> u64 {
    ((index as u64) << 48) | (cursor & ((1 << 48) - 1))
}

/// The shard index and shard cursor of a cursor from [`shard_cursor`].
pub fn split_cursor(cursor: u64) -> (usize, u64) {
    ((cursor >> 48) as usize, cursor & ((1 << 48) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_cursors_round_trip() {
        assert_eq!(split_cursor(shard_cursor(2, 12345)), (2, 12345));
        assert_eq!(split_cursor(0), (0, 0));
    }
}

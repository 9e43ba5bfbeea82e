//! Each uid's share of the streams this agent serves: holds (of locks and
//! permits), campaigns and observers. A stream keeps a connection, a task
//! and its reads or renewals on the masters for as long as it is open, so
//! one client that opens thousands would load the masters and this agent
//! for everyone; `lock.max_streams_per_uid` bounds what one uid (the
//! peer's, from the socket) may have open at once. A peer the kernel
//! gave no uid for is not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The streams open per uid, and the most one uid may have.
#[derive(Debug)]
pub struct Streams {
    open: Arc<Mutex<HashMap<u32, usize>>>,
    per_uid: usize,
}

/// A stream's place in its uid's share, given back when dropped (the
/// stream's body ended: its connection closed or its events ran out).
#[derive(Debug)]
pub struct Slot {
    open: Arc<Mutex<HashMap<u32, usize>>>,
    uid: Option<u32>,
}

/// Why a stream was not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("uid {uid} already has {limit} streams (holds, campaigns, observers) open on this agent, the most one uid may have (lock.max_streams_per_uid)")]
pub struct TooManyStreams {
    pub uid: u32,
    pub limit: usize,
}

impl Streams {
    pub fn new(per_uid: usize) -> Streams {
        Streams {
            open: Arc::default(),
            per_uid,
        }
    }

    /// A slot for one more stream of `uid`.
    ///
    /// # Errors
    /// [`TooManyStreams`] when `uid` has `lock.max_streams_per_uid` open.
    pub fn open(&self, uid: Option<u32>) -> Result<Slot, TooManyStreams> {
        if let Some(uid) = uid {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            let count = open.entry(uid).or_default();
            if *count >= self.per_uid {
                return Err(TooManyStreams {
                    uid,
                    limit: self.per_uid,
                });
            }
            *count += 1;
        }
        Ok(Slot {
            open: Arc::clone(&self.open),
            uid,
        })
    }

    /// Streams open for `uid` now.
    pub fn count(&self, uid: u32) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(&uid).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(uid) = self.uid else { return };
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&uid) {
            *count -= 1;
            if *count == 0 {
                open.remove(&uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_gets_its_share_and_a_closed_stream_gives_its_slot_back() {
        let streams = Streams::new(2);
        let a = streams.open(Some(7)).unwrap();
        let _b = streams.open(Some(7)).unwrap();
        assert_eq!(
            streams.open(Some(7)).unwrap_err(),
            TooManyStreams { uid: 7, limit: 2 }
        );
        let _other = streams.open(Some(8)).unwrap();
        let _unknown = streams.open(None).unwrap();
        drop(a);
        assert_eq!(streams.count(7), 1);
        let _c = streams.open(Some(7)).unwrap();
        assert!(streams
            .open(Some(7))
            .unwrap_err()
            .to_string()
            .contains("(lock.max_streams_per_uid)"));
    }
}

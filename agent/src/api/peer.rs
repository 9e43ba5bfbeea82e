//! Who is on the other end of a Unix-socket connection, as the kernel says
//! (`SO_PEERCRED`, read once when the connection is accepted), and the
//! rules that admit it: uid and gid allow lists, and each uid's share of
//! the connection slots.
//!
//! The credentials are those of the process that called `connect(2)`; a
//! descriptor passed on to another process keeps them. Only the primary
//! (effective) gid is reported, never supplementary groups.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use tokio::net::UnixStream;

use crate::lock::isolation::Pod;

/// The process at the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    /// Absent where the platform does not report it; 0 for a process in a
    /// pid namespace the agent does not see.
    pub pid: Option<u32>,
    /// Its pod, read at accept under `socket.isolate: pod` only
    /// ([`super::pod`]).
    pub pod: Option<Pod>,
}

impl Peer {
    /// Reads the credentials of `stream`'s peer.
    ///
    /// # Errors
    /// When the kernel does not report them (not expected for a connected
    /// Unix stream socket on Linux).
    pub fn of(stream: &UnixStream) -> io::Result<Peer> {
        let cred = stream.peer_cred()?;
        Ok(Peer {
            uid: cred.uid(),
            gid: cred.gid(),
            pid: cred.pid().and_then(|pid| u32::try_from(pid).ok()),
            pod: None,
        })
    }
}

/// The uids and gids admitted on one socket.
#[derive(Debug, Clone, Default)]
pub struct Allow {
    uids: Vec<u32>,
    gids: Vec<u32>,
}

impl Allow {
    /// Empty lists admit everyone the socket file's mode lets connect.
    pub fn new(uids: &[u32], gids: &[u32]) -> Allow {
        Allow {
            uids: uids.to_vec(),
            gids: gids.to_vec(),
        }
    }

    /// Whether `peer` may use the socket: always when both lists are
    /// empty; otherwise its uid or its gid is listed. A peer whose
    /// credentials could not be read is admitted only by empty lists.
    pub fn admits(&self, peer: Option<&Peer>) -> bool {
        if self.uids.is_empty() && self.gids.is_empty() {
            return true;
        }
        peer.is_some_and(|p| self.uids.contains(&p.uid) || self.gids.contains(&p.gid))
    }
}

/// Open connections per uid, bounded by `socket.max_connections_per_uid`.
#[derive(Debug)]
pub struct UidShares {
    limit: usize,
    // A std Mutex: the critical sections are a map lookup, never across an
    // await.
    open: Mutex<HashMap<u32, usize>>,
}

impl UidShares {
    /// Shares of `limit` connections per uid (`socket.max_connections_per_uid`).
    pub fn new(limit: usize) -> Arc<UidShares> {
        Arc::new(UidShares {
            limit,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Connections one uid may hold at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for one more connection of `uid`, or `None` when it already
    /// has `limit` open. The slot is given back when dropped.
    pub fn try_take(self: &Arc<UidShares>, uid: u32) -> Option<UidSlot> {
        let mut open = self.lock();
        let count = open.entry(uid).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(UidSlot {
            shares: Arc::clone(self),
            uid,
        })
    }

    /// Connections `uid` has open now.
    pub fn open(&self, uid: u32) -> usize {
        self.lock().get(&uid).copied().unwrap_or(0)
    }
}

/// One open connection counted against its uid's share.
#[derive(Debug)]
pub struct UidSlot {
    shares: Arc<UidShares>,
    uid: u32,
}

impl Drop for UidSlot {
    fn drop(&mut self) {
        let mut open = self.shares.lock();
        if let Some(count) = open.get_mut(&self.uid) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32) -> Peer {
        Peer {
            uid,
            gid,
            pid: Some(1),
            pod: None,
        }
    }

    #[test]
    fn empty_lists_admit_everyone_and_lists_admit_by_uid_or_gid() {
        assert!(Allow::new(&[], &[]).admits(Some(&peer(5, 5))));
        assert!(Allow::new(&[], &[]).admits(None));
        let allow = Allow::new(&[1000], &[2000]);
        assert!(allow.admits(Some(&peer(1000, 1))));
        assert!(allow.admits(Some(&peer(1, 2000))));
        assert!(!allow.admits(Some(&peer(0, 0))));
        assert!(!allow.admits(None));
    }

    #[test]
    fn each_uid_gets_at_most_its_share_and_gets_slots_back() {
        let shares = UidShares::new(2);
        let a = shares.try_take(7).unwrap();
        let _b = shares.try_take(7).unwrap();
        assert!(shares.try_take(7).is_none());
        let _other = shares.try_take(8).expect("another uid has its own share");
        drop(a);
        assert_eq!(shares.open(7), 1);
        assert!(shares.try_take(7).is_some());
    }

    #[tokio::test]
    async fn a_socket_pair_reports_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let peer = Peer::of(&a).unwrap();
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!((peer.uid, peer.gid), (uid, gid));
        assert_eq!(peer.pid, Some(std::process::id()));
    }
}

//! Which masters hold a lock's key: those whose vote (or whose answer to
//! the last extension) said yes, less those seen to lose keys since. A
//! lock stays safe only while a quorum of them remains, so a hold can be
//! told `lost` the moment a loss takes them below it, instead of at its
//! next renewal.
//!
//! The caller gets its grant (or extension) at the quorum-th yes; the
//! other masters' answers are still on their way, and fill this in as they
//! come (see [`super::Redlock::acquire_once`] and [`super::Redlock::extend`]),
//! so a master that said yes a moment after the quorum counts too. One
//! still unanswered counts as not holding: the count never includes a
//! master that may not hold the key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::master::Master;

/// The masters a grant or an extension is known to hold on.
#[derive(Debug)]
pub struct Holding {
    /// Per configured master, in config order: it said yes.
    yes: Vec<AtomicBool>,
    /// Per master, its [`Master::losses`] read before the request was
    /// sent: a loss seen after that may have taken the key.
    marks: Vec<u64>,
}

impl Holding {
    /// Nothing confirmed yet; the masters' loss counts read now, before
    /// the request is sent.
    pub(crate) fn new<M: Master>(nodes: &[Arc<M>]) -> Arc<Holding> {
        Arc::new(Holding {
            yes: nodes.iter().map(|_| AtomicBool::new(false)).collect(),
            marks: nodes.iter().map(|n| n.losses()).collect(),
        })
    }

    /// Master `index` (in config order) said yes.
    pub(crate) fn confirm(&self, index: usize) {
        // A flag read on its own: no other memory depends on its order.
        if let Some(yes) = self.yes.get(index) {
            yes.store(true, Ordering::Relaxed);
        }
    }

    /// How many of `nodes` (the engine's, in config order) said yes and
    /// have not lost `key` since.
    pub fn still_on<M: Master>(&self, nodes: &[Arc<M>], key: &str) -> usize {
        nodes
            .iter()
            .zip(self.yes.iter().zip(&self.marks))
            .filter(|(node, (yes, mark))| {
                yes.load(Ordering::Relaxed) && !node.lost_since(key, **mark)
            })
            .count()
    }
}

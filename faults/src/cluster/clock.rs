//! A single master's wall clock and snapshot, for the nemesis's clock
//! faults and restores: each moves what one `redis-server` believes while
//! its process lives on (a clock) or brings back what it held earlier (a
//! snapshot). Cluster masters have neither.
//!
//! ## Behavior
//! - A clock move takes effect within a few ms and is kept across the
//!   master's restarts, until [`Master::clear_clock`].
//! - [`Master::save`] replaces the master's snapshot; a restore kills the
//!   process and starts it from that snapshot on the same port, so the
//!   agents' links see their upstream connections end (a
//!   connection-keeping link connects again behind the agent's back).

use redlock_testkit::{Clock, RedisServer};

use super::Master;

impl Master {
    /// `f` on a single master's process, blocking (on a blocking thread).
    async fn blocking<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut RedisServer) -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            me.with(f)
                .unwrap_or_else(|| Err(me.single_only(what)))
                .map_err(|e| format!("{what} {}: {e}", me.name))
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// `SAVE` on a single master, kept as its snapshot (the incarnation
    /// marker in it, and the lock keys held right now).
    ///
    /// # Errors
    /// When the master does not answer or cannot write its dump, or for a
    /// cluster master.
    pub async fn save(&self) -> Result<(), String> {
        self.blocking("save", |s| s.save().map_err(|e| e.to_string()))
            .await
    }

    /// Kills a single master and starts it again from its last
    /// [`Master::save`]: a master restored from an old snapshot.
    ///
    /// # Errors
    /// When it has no snapshot or does not come back, or for a cluster
    /// master.
    pub async fn restore(&self) -> Result<(), String> {
        self.blocking("restore", |s| {
            s.restart_from_snapshot().map_err(|e| e.to_string())
        })
        .await
    }

    /// Jumps a single master's wall clock by `ms` (negative: back).
    ///
    /// # Errors
    /// For a cluster master, or when the clock cannot be moved.
    pub fn jump_clock(&self, ms: i64) -> Result<Clock, String> {
        self.move_clock("jump the clock of", |s| s.jump_clock(ms))
    }

    /// Stops a single master's wall clock where it reads now.
    ///
    /// # Errors
    /// As [`Master::jump_clock`].
    pub fn freeze_clock(&self) -> Result<Clock, String> {
        self.move_clock("freeze the clock of", RedisServer::freeze_clock)
    }

    /// Puts a single master back on the real wall clock.
    ///
    /// # Errors
    /// As [`Master::jump_clock`].
    pub fn clear_clock(&self) -> Result<Clock, String> {
        self.move_clock("clear the clock of", RedisServer::clear_clock)
    }

    fn move_clock(
        &self,
        what: &str,
        f: impl FnOnce(&RedisServer) -> Result<Clock, redlock_testkit::ClockError>,
    ) -> Result<Clock, String> {
        self.with(|s| f(s).map_err(|e| format!("{what} {}: {e}", self.name)))
            .unwrap_or_else(|| Err(self.single_only(what)))
    }
}

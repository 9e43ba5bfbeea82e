//! Pure data behind the views: what the agent last said, shaped for tables.
//!
//! Nothing here does I/O or reads a clock: every instant is passed in, so
//! sorting, filtering, countdowns and the summary's windowed rates are plain
//! functions that unit tests drive directly.
//!
//! - [`countdown`]: TTLs read at one instant, projected to any later one.
//! - [`filter`]: the `/` regex filter (`/!` inverts).
//! - [`sort`]: which column a table is sorted by, and which way.
//! - [`table`]: filter + sort + selection + scrolling over any row set.
//! - [`history`]: bounded series for sparklines.
//! - [`nodes`], [`locks`], [`leaks`]: each view's rows and columns.
//! - [`kind`]: permits and leaderships told apart from locks by name.
//! - [`primitives`]: the semaphores and elections they belong to.
//! - [`summary`]: acquire rate, wait percentiles and failures over the last
//!   minute, from the agent's cumulative counters.

pub mod countdown;
pub mod filter;
pub mod history;
pub mod kind;
pub mod leaks;
pub mod locks;
pub mod nodes;
pub mod primitives;
pub mod sort;
pub mod summary;
pub mod table;

/// What the TUI knows about one endpoint's data.
///
/// `Unknown` replaces the data as soon as it can no longer be trusted (the
/// connection dropped, the endpoint failed), so a view never shows a stale
/// number: it shows `-` and the reason.
#[derive(Debug, Clone, PartialEq)]
pub enum Known<T> {
    /// Nothing read yet, or the connection is down.
    Unknown,
    /// The agent answered with an error (an older agent without the
    /// endpoint answers `404 not_found`).
    Failed(String),
    Known(T),
}

impl<T> Known<T> {
    pub fn get(&self) -> Option<&T> {
        match self {
            Known::Known(value) => Some(value),
            _ => None,
        }
    }

    /// Why there is no value, for the view's notice line.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Known::Unknown => Some("no data from the agent"),
            Known::Failed(reason) => Some(reason),
            Known::Known(_) => None,
        }
    }
}

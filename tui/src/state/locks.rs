//! The locks view's rows: one per lock key found on the masters, with a
//! countdown per master so TTLs tick between polls.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use redlock_wire::{LockInfo, LockResponse, LocksResponse, Mode, Reader};

use super::countdown::Countdown;
use super::filter::Filter;
use super::nodes::cmp_known;
use super::table::Rows;
use super::Known;

/// One master's copy of a lock key, as the matrix shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// Same holder as the quorum, with its TTL.
    Held(Option<Countdown>),
    /// No key on this master.
    Missing,
    /// A different holder, with its TTL.
    Other(Option<Countdown>),
    /// The master could not be read (or the agent said something new).
    Unknown,
}

impl KeyState {
    fn from_wire(state: &str, pttl_ms: Option<u64>, read_at: Instant) -> KeyState {
        let ttl = pttl_ms.map(|ms| Countdown::from_ms(ms, read_at));
        match state {
            "held" => KeyState::Held(ttl),
            "missing" => KeyState::Missing,
            "other" => KeyState::Other(ttl),
            _ => KeyState::Unknown,
        }
    }
}

/// One lock key.
#[derive(Debug, Clone, PartialEq)]
pub struct LockRow {
    pub info: LockInfo,
    pub validity: Option<Countdown>,
    /// One per master, in the order of [`LockTable::masters`].
    pub keys: Vec<KeyState>,
    /// The longest TTL seen for this resource, the scale for its colours.
    pub full: Duration,
}

impl LockRow {
    /// Masters holding the quorum's value.
    pub fn held_on(&self) -> usize {
        self.keys
            .iter()
            .filter(|c| matches!(c, KeyState::Held(_)))
            .count()
    }
}

/// Held by readers: the wire's `mode`, never guessed from the name.
pub fn is_shared(info: &LockInfo) -> bool {
    info.mode == Mode::Shared
}

/// Who holds it, in a word: the owner of an exclusive lock (none when it
/// has no owner label), `3 readers` for a shared one, whose readers each
/// have their own.
pub fn holder_label(info: &LockInfo) -> Option<String> {
    if !is_shared(info) {
        return info.owner.clone();
    }
    Some(match info.readers.len() {
        1 => "1 reader".to_string(),
        n => format!("{n} readers"),
    })
}

/// Readers a detail pane lists at most, the `and N more` line included,
/// so that many readers leave room for the table above.
pub const READERS_SHOWN: usize = 5;

/// The readers to list, in the agent's order (most masters first), and
/// how many are left out: all when they fit in `room` lines, else one
/// line fewer and a count of the others.
pub fn readers_shown(readers: &[Reader], room: usize) -> (&[Reader], usize) {
    if readers.len() <= room {
        return (readers, 0);
    }
    let shown = room.saturating_sub(1);
    (&readers[..shown], readers.len() - shown)
}

/// An answer to `GET /v1/locks`, shaped for the table.
#[derive(Debug, Clone, PartialEq)]
pub struct LockTable {
    pub quorum: usize,
    pub masters: Vec<String>,
    pub rows: Vec<LockRow>,
    /// The agent listed only some of the keys.
    pub truncated: bool,
    /// Lock keys under the prefix on the masters the agent read.
    pub total: u64,
    /// Masters the agent could not read: the list may miss locks.
    pub unread: Vec<String>,
}

/// An answer to `GET /v1/locks/{resource}`: the detail pane's lock.
#[derive(Debug, Clone, PartialEq)]
pub struct LockDetail {
    pub quorum: usize,
    pub masters: Vec<String>,
    pub row: LockRow,
    /// Masters the agent could not read.
    pub unread: Vec<String>,
}

/// One lock's row from its wire form, its TTLs counted from `read_at`;
/// `seen` is the longest TTL seen for it before.
fn row_of(info: &LockInfo, masters: &[String], seen: Duration, read_at: Instant) -> LockRow {
    let keys: Vec<KeyState> = masters
        .iter()
        .map(|master| {
            info.nodes
                .iter()
                .find(|key| &key.node == master)
                .map_or(KeyState::Unknown, |key| {
                    KeyState::from_wire(&key.state, key.pttl_ms, read_at)
                })
        })
        .collect();
    let longest = info
        .nodes
        .iter()
        .filter_map(|k| k.pttl_ms)
        .chain(info.validity_ms)
        .max()
        .map_or(Duration::ZERO, Duration::from_millis);
    LockRow {
        info: info.clone(),
        validity: info.validity_ms.map(|ms| Countdown::from_ms(ms, read_at)),
        keys,
        full: seen.max(longest),
    }
}

impl LockDetail {
    /// Takes in an answer to `GET /v1/locks/{resource}` requested at
    /// `read_at`; `previous` keeps the colour scale across polls.
    pub fn from_response(
        response: &LockResponse,
        previous: Option<&LockDetail>,
        read_at: Instant,
    ) -> LockDetail {
        let seen = previous
            .filter(|p| p.row.info.resource == response.lock.resource)
            .map_or(Duration::ZERO, |p| p.row.full);
        LockDetail {
            quorum: response.quorum,
            masters: response.masters.clone(),
            row: row_of(&response.lock, &response.masters, seen, read_at),
            unread: response.unread.clone(),
        }
    }
}

/// Columns the locks table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockColumn {
    Resource,
    Owner,
    Validity,
    Quorum,
    Waiters,
    Here,
}

/// The locks view's data.
#[derive(Debug, Clone, PartialEq)]
pub struct Locks {
    pub table: Known<LockTable>,
    /// Longest TTL seen per resource, kept across polls for the colours.
    full: HashMap<String, Duration>,
}

impl Default for Locks {
    fn default() -> Locks {
        Locks {
            table: Known::Unknown,
            full: HashMap::new(),
        }
    }
}

impl Locks {
    /// Takes in an answer to `GET /v1/locks` requested at `read_at`.
    pub fn apply(&mut self, response: &LocksResponse, read_at: Instant) {
        let mut full = HashMap::with_capacity(response.locks.len());
        let rows = response
            .locks
            .iter()
            .map(|info| {
                let seen = self.full.get(&info.resource).copied().unwrap_or_default();
                let row = row_of(info, &response.masters, seen, read_at);
                full.insert(info.resource.clone(), row.full);
                row
            })
            .collect();
        self.full = full;
        self.table = Known::Known(LockTable {
            quorum: response.quorum,
            masters: response.masters.clone(),
            rows,
            truncated: response.truncated,
            total: response.total,
            unread: response.unread.clone(),
        });
    }

    /// Forgets every lock: the connection dropped or the endpoint failed.
    pub fn forget(&mut self, why: Known<LockTable>) {
        self.table = why;
    }

    pub fn rows(&self) -> &[LockRow] {
        self.table.get().map_or(&[], |t| &t.rows)
    }

    pub fn masters(&self) -> &[String] {
        self.table.get().map_or(&[], |t| &t.masters)
    }

    pub fn find(&self, resource: &str) -> Option<&LockRow> {
        self.rows().iter().find(|r| r.info.resource == resource)
    }
}

impl Rows for Locks {
    type Column = LockColumn;

    fn len(&self) -> usize {
        self.rows().len()
    }

    fn key(&self, i: usize) -> &str {
        &self.rows()[i].info.resource
    }

    fn keep(&self, i: usize, filter: &Filter) -> bool {
        let info = &self.rows()[i].info;
        // The kind word too: `/leader` finds every election's lock.
        let kind = super::kind::Kind::of(&info.resource).word();
        filter.keeps(
            [info.resource.as_str(), kind]
                .into_iter()
                .chain(info.owner.as_deref())
                .chain(info.readers.iter().filter_map(|r| r.owner.as_deref())),
        )
    }

    fn compare(&self, a: usize, b: usize, column: LockColumn) -> Ordering {
        let rows = self.rows();
        let (a, b) = (&rows[a], &rows[b]);
        match column {
            LockColumn::Resource => a.info.resource.cmp(&b.info.resource),
            LockColumn::Owner => cmp_known(a.info.owner.as_ref(), b.info.owner.as_ref()),
            // All rows were read together: the order at read is the order now.
            LockColumn::Validity => cmp_known(
                a.validity.map(|c| c.at_read()),
                b.validity.map(|c| c.at_read()),
            ),
            LockColumn::Quorum => a.info.quorum_agrees.cmp(&b.info.quorum_agrees),
            LockColumn::Waiters => a.info.waiters.cmp(&b.info.waiters),
            LockColumn::Here => a.info.held_here.cmp(&b.info.held_here),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::state::table::TableView;
    use redlock_wire::NodeKey;

    /// A lock held on the masters named in `held` (others: missing).
    pub(crate) fn lock(
        resource: &str,
        owner: Option<&str>,
        ttl_ms: u64,
        held: &[&str],
        masters: &[&str],
    ) -> LockInfo {
        LockInfo {
            resource: resource.to_string(),
            owner: owner.map(str::to_string),
            validity_ms: (held.len() > masters.len() / 2).then_some(ttl_ms.saturating_sub(100)),
            nodes: masters
                .iter()
                .map(|m| NodeKey {
                    node: m.to_string(),
                    state: if held.contains(m) { "held" } else { "missing" }.to_string(),
                    pttl_ms: held.contains(m).then_some(ttl_ms),
                })
                .collect(),
            quorum_agrees: held.len() > masters.len() / 2,
            held_here: false,
            waiters: 0,
            agent: None,
            pid: None,
            uid: None,
            gid: None,
            pod: None,
            container: None,
            trace_id: None,
            held_with: Vec::new(),
            mode: Mode::Exclusive,
            readers: Vec::new(),
        }
    }

    /// A lock held shared on every master by `readers` (agent, owner,
    /// masters recording it), none of them here, as the agent lists it.
    pub(crate) fn shared(
        resource: &str,
        ttl_ms: u64,
        readers: &[(&str, &str, usize)],
        masters: &[&str],
    ) -> LockInfo {
        let mut info = lock(resource, None, ttl_ms, masters, masters);
        info.validity_ms = None;
        info.mode = Mode::Shared;
        info.readers = readers
            .iter()
            .map(|&(agent, owner, on)| Reader {
                agent: Some(agent.to_string()),
                owner: Some(owner.to_string()),
                masters: on,
                held_here: false,
            })
            .collect();
        info
    }

    pub(crate) fn response(locks: Vec<LockInfo>, masters: &[&str]) -> LocksResponse {
        LocksResponse {
            next_cursor: None,
            total: locks.len() as u64,
            scanned: locks.len() as u64,
            unread: Vec::new(),
            partial: false,
            quorum: masters.len() / 2 + 1,
            masters: masters.iter().map(|m| m.to_string()).collect(),
            locks,
            truncated: false,
        }
    }

    const M3: &[&str] = &["r1", "r2", "r3"];

    #[test]
    fn builds_one_copy_per_master_in_master_order() {
        let t0 = Instant::now();
        let mut info = lock("a", Some("me"), 30_000, &["r1", "r3"], M3);
        info.nodes.reverse();
        info.nodes[1].state = "other".into();
        let mut locks = Locks::default();
        locks.apply(&response(vec![info], M3), t0);
        let row = &locks.rows()[0];
        assert_eq!(
            row.keys[0],
            KeyState::Held(Some(Countdown::from_ms(30_000, t0)))
        );
        assert_eq!(row.keys[1], KeyState::Other(None));
        assert_eq!(
            row.keys[2],
            KeyState::Held(Some(Countdown::from_ms(30_000, t0)))
        );
        assert_eq!(row.held_on(), 2);
        assert_eq!(row.full, Duration::from_secs(30));
    }

    #[test]
    fn a_master_left_out_of_the_answer_is_unknown() {
        let mut info = lock("a", None, 1_000, &["r1"], M3);
        info.nodes.truncate(1);
        let mut locks = Locks::default();
        locks.apply(&response(vec![info], M3), Instant::now());
        assert_eq!(locks.rows()[0].keys[1], KeyState::Unknown);
    }

    #[test]
    fn the_full_ttl_is_remembered_across_polls() {
        let t0 = Instant::now();
        let mut locks = Locks::default();
        locks.apply(&response(vec![lock("a", None, 30_000, M3, M3)], M3), t0);
        locks.apply(&response(vec![lock("a", None, 4_000, M3, M3)], M3), t0);
        assert_eq!(locks.rows()[0].full, Duration::from_secs(30));
        // Gone and back: a fresh lock, a fresh scale.
        locks.apply(&response(vec![], M3), t0);
        locks.apply(&response(vec![lock("a", None, 4_000, M3, M3)], M3), t0);
        assert_eq!(locks.rows()[0].full, Duration::from_secs(4));
    }

    #[test]
    fn sorts_by_validity_with_unknown_last_and_filters_on_owner() {
        let mut locks = Locks::default();
        locks.apply(
            &response(
                vec![
                    lock("long", Some("batch"), 60_000, M3, M3),
                    lock("minority", None, 60_000, &["r1"], M3),
                    lock("short", Some("web"), 5_000, M3, M3),
                ],
                M3,
            ),
            Instant::now(),
        );
        let mut view = TableView::new(LockColumn::Validity);
        view.rebuild(&locks);
        let order: Vec<_> = view.order().iter().map(|&i| locks.key(i)).collect();
        assert_eq!(order, ["short", "long", "minority"]);
        view.set_filter(Filter::parse("web").unwrap(), &locks);
        assert_eq!(view.order().len(), 1);
        locks.forget(Known::Unknown);
        view.rebuild(&locks);
        assert!(view.order().is_empty());
    }

    #[test]
    fn a_shared_lock_is_held_by_its_readers_and_found_by_their_owners() {
        let readers = [("a1", "web", 3), ("a2", "batch", 2)];
        let cache = shared("cache", 10_000, &readers, M3);
        assert!(is_shared(&cache));
        assert_eq!(holder_label(&cache).as_deref(), Some("2 readers"));
        let one = shared("one", 10_000, &readers[..1], M3);
        assert_eq!(holder_label(&one).as_deref(), Some("1 reader"));
        let plain = lock("orders", Some("billing"), 10_000, M3, M3);
        assert!(!is_shared(&plain));
        assert_eq!(holder_label(&plain).as_deref(), Some("billing"));
        assert_eq!(holder_label(&lock("stray", None, 10_000, M3, M3)), None);
        // A name that reads like a mode is still what the wire says.
        assert!(!is_shared(&lock("shared", None, 10_000, M3, M3)));

        let mut locks = Locks::default();
        locks.apply(&response(vec![plain, cache], M3), Instant::now());
        let mut view = TableView::new(LockColumn::Resource);
        view.rebuild(&locks);
        view.set_filter(Filter::parse("^batch$").unwrap(), &locks);
        let kept: Vec<_> = view.order().iter().map(|&i| locks.key(i)).collect();
        assert_eq!(kept, ["cache"]);
    }

    #[test]
    fn many_readers_are_cut_to_the_room_with_a_count_of_the_rest() {
        let readers: Vec<Reader> = shared("r", 1, &[("a", "o", 3); 7], M3).readers;
        let (shown, more) = readers_shown(&readers, READERS_SHOWN);
        assert_eq!((shown.len(), more), (4, 3));
        // Exactly the room: all of them, no `and 1 more` in a reader's place.
        let (shown, more) = readers_shown(&readers[..5], READERS_SHOWN);
        assert_eq!((shown.len(), more), (5, 0));
        assert_eq!(readers_shown(&readers[..0], READERS_SHOWN).1, 0);
        let (shown, more) = readers_shown(&readers, 0);
        assert_eq!((shown.len(), more), (0, 7));
    }
}

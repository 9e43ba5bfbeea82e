//! The one key table. Key handling, the header's hint bar, the help screen
//! and the key list in docs/operations.md are all read from [`BINDINGS`],
//! so they cannot disagree.
//!
//! A binding belongs to a [`Scope`]; what is active at a moment is a chain
//! of scopes (a [`Context`]), e.g. the locks table is
//! `Always + Table + Locks`. Dangerous actions are flagged on the
//! [`Action`] itself and are left out entirely in read-only mode.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::state::leaks::LeakColumn;
use crate::state::locks::LockColumn;
use crate::state::nodes::NodeColumn;
use crate::state::primitives::PrimitiveColumn;

/// A key as bindings name it. Shift is not a modifier here: `R` is Shift+r,
/// and terminals disagree on whether they report SHIFT with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub code: KeyCode,
    pub ctrl: bool,
}

impl Key {
    pub const fn char(c: char) -> Key {
        Key {
            code: KeyCode::Char(c),
            ctrl: false,
        }
    }

    pub const fn ctrl(c: char) -> Key {
        Key {
            code: KeyCode::Char(c),
            ctrl: true,
        }
    }

    pub const fn code(code: KeyCode) -> Key {
        Key { code, ctrl: false }
    }

    /// The key of a terminal event; `None` for releases and repeats of
    /// kinds we do not act on, and for Alt combinations (never bound).
    pub fn from_event(event: &KeyEvent) -> Option<Key> {
        if event.kind == KeyEventKind::Release || event.modifiers.contains(KeyModifiers::ALT) {
            return None;
        }
        Some(Key {
            code: event.code,
            ctrl: event.modifiers.contains(KeyModifiers::CONTROL),
        })
    }

    /// How help and hints write the key: `j`, `↓`, `ctrl-d`, `space`.
    pub fn label(&self) -> String {
        let base = match self.code {
            KeyCode::Char(' ') => "space".to_string(),
            KeyCode::Char(c) => c.to_string(),
            KeyCode::Up => "↑".to_string(),
            KeyCode::Down => "↓".to_string(),
            KeyCode::Left => "←".to_string(),
            KeyCode::Right => "→".to_string(),
            KeyCode::PageUp => "pgup".to_string(),
            KeyCode::PageDown => "pgdn".to_string(),
            KeyCode::Home => "home".to_string(),
            KeyCode::End => "end".to_string(),
            KeyCode::Enter => "enter".to_string(),
            KeyCode::Esc => "esc".to_string(),
            KeyCode::Tab => "tab".to_string(),
            KeyCode::BackTab => "shift-tab".to_string(),
            KeyCode::Backspace => "backspace".to_string(),
            other => format!("{other:?}").to_lowercase(),
        };
        if self.ctrl {
            format!("ctrl-{base}")
        } else {
            base
        }
    }
}

/// What a key does. The app's `update` gives each its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// Opens the `:` prompt (`:nodes`, `:locks`, `:leaks`, `:q`).
    CommandPrompt,
    /// Opens the `/` filter prompt.
    FilterPrompt,
    ClearFilter,
    NextView,
    PrevView,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    TogglePause,
    Help,
    CloseHelp,
    OpenDetail,
    CloseDetail,
    /// Asks to force-release the selected lock: opens the confirm dialog.
    ForceRelease,
    /// Answers yes in a confirm dialog: the dangerous action happens here.
    Confirm,
    /// Answers no in a confirm dialog.
    Cancel,
    Submit,
    CancelPrompt,
    DeleteChar,
    SortNodes(NodeColumn),
    SortLocks(LockColumn),
    SortLeaks(LeakColumn),
    SortPrimitives(PrimitiveColumn),
}

impl Action {
    /// Actions that change the agent's masters. They must open a confirm
    /// dialog rather than act, and are unbound with `--readonly`.
    pub fn is_dangerous(self) -> bool {
        matches!(self, Action::ForceRelease)
    }
}

/// Where a binding applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// In every context.
    Always,
    /// In the table views.
    Table,
    Nodes,
    Locks,
    /// The semaphores and elections view.
    Primitives,
    Leaks,
    /// The lock detail pane.
    Detail,
    Help,
    Confirm,
    /// Typing after `:` or `/`; other printable keys are typed text.
    Prompt,
}

impl Scope {
    /// Heading on the help screen.
    pub fn title(self) -> &'static str {
        match self {
            Scope::Always => "Everywhere",
            Scope::Table => "Tables",
            Scope::Nodes => "Nodes view",
            Scope::Locks => "Locks view",
            Scope::Primitives => "Semaphores and elections view",
            Scope::Leaks => "Leaks view",
            Scope::Detail => "Lock detail",
            Scope::Help => "Help",
            Scope::Confirm => "Confirm dialog",
            Scope::Prompt => "Prompt (: and /)",
        }
    }
}

/// The scopes active at one moment, most specific last.
pub type Context = &'static [Scope];

pub const NODES: Context = &[Scope::Always, Scope::Table, Scope::Nodes];
pub const LOCKS: Context = &[Scope::Always, Scope::Table, Scope::Locks];
pub const PRIMITIVES: Context = &[Scope::Always, Scope::Table, Scope::Primitives];
pub const LEAKS: Context = &[Scope::Always, Scope::Table, Scope::Leaks];
pub const DETAIL: Context = &[Scope::Always, Scope::Detail];
pub const HELP: Context = &[Scope::Always, Scope::Help];
pub const CONFIRM: Context = &[Scope::Always, Scope::Confirm];
pub const PROMPT: Context = &[Scope::Always, Scope::Prompt];

/// Every context, for the help screen's order and the table's tests.
pub const CONTEXTS: &[(&str, Context)] = &[
    ("nodes", NODES),
    ("locks", LOCKS),
    ("primitives", PRIMITIVES),
    ("leaks", LEAKS),
    ("detail", DETAIL),
    ("help", HELP),
    ("confirm", CONFIRM),
    ("prompt", PROMPT),
];

/// One line of the key table.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    pub scope: Scope,
    /// The keys, the first being the one hints show.
    pub keys: &'static [Key],
    pub action: Action,
    /// What the help screen says.
    pub help: &'static str,
    /// The hint bar's word for it; bindings of one scope with the same word
    /// share one hint (`<N,S,L,U> sort`). `None`: help screen only.
    pub hint: Option<&'static str>,
}

const fn bind(
    scope: Scope,
    keys: &'static [Key],
    action: Action,
    help: &'static str,
    hint: Option<&'static str>,
) -> Binding {
    Binding {
        scope,
        keys,
        action,
        help,
        hint,
    }
}

use Action as A;
use Scope as S;

const ESC: Key = Key::code(KeyCode::Esc);
const ENTER: Key = Key::code(KeyCode::Enter);

/// The key table. Kept one binding per line, as a table reads.
#[rustfmt::skip]
pub const BINDINGS: &[Binding] = &[
    bind(S::Always, &[Key::ctrl('c')], A::Quit, "quit", None),
    // Tables.
    bind(S::Table, &[Key::char(':')], A::CommandPrompt, "switch view: :nodes, :locks, :primitives, :leaks (:q quits)", Some("view")),
    bind(S::Table, &[Key::char('/')], A::FilterPrompt, "filter rows by regex; /!regex hides matches", Some("filter")),
    bind(S::Table, &[ESC], A::ClearFilter, "clear the filter", None),
    bind(S::Table, &[Key::code(KeyCode::Tab)], A::NextView, "next view", None),
    bind(S::Table, &[Key::code(KeyCode::BackTab)], A::PrevView, "previous view", None),
    bind(S::Table, &[Key::char('j'), Key::code(KeyCode::Down)], A::Down, "move down", None),
    bind(S::Table, &[Key::char('k'), Key::code(KeyCode::Up)], A::Up, "move up", None),
    bind(S::Table, &[Key::char('g'), Key::code(KeyCode::Home)], A::Top, "go to the first row", None),
    bind(S::Table, &[Key::char('G'), Key::code(KeyCode::End)], A::Bottom, "go to the last row", None),
    bind(S::Table, &[Key::code(KeyCode::PageDown), Key::ctrl('f')], A::PageDown, "page down", None),
    bind(S::Table, &[Key::code(KeyCode::PageUp), Key::ctrl('b')], A::PageUp, "page up", None),
    bind(S::Table, &[Key::char(' ')], A::TogglePause, "pause or resume live updates", Some("pause")),
    bind(S::Table, &[Key::char('?')], A::Help, "this help", Some("help")),
    bind(S::Table, &[Key::char('q')], A::Quit, "quit", Some("quit")),
    // Nodes.
    bind(S::Nodes, &[Key::char('N')], A::SortNodes(NodeColumn::Name), "sort by name (again: reverse)", Some("sort")),
    bind(S::Nodes, &[Key::char('S')], A::SortNodes(NodeColumn::State), "sort by state", Some("sort")),
    bind(S::Nodes, &[Key::char('L')], A::SortNodes(NodeColumn::Latency), "sort by latency", Some("sort")),
    bind(S::Nodes, &[Key::char('U')], A::SortNodes(NodeColumn::Uptime), "sort by uptime", Some("sort")),
    // Locks.
    bind(S::Locks, &[ENTER], A::OpenDetail, "open the lock's detail", Some("detail")),
    bind(S::Locks, &[Key::ctrl('d')], A::ForceRelease, "force-release the lock, permit or leadership (asks first)", Some("force release")),
    bind(S::Locks, &[Key::char('R')], A::SortLocks(LockColumn::Resource), "sort by resource (again: reverse)", Some("sort")),
    bind(S::Locks, &[Key::char('O')], A::SortLocks(LockColumn::Owner), "sort by owner", Some("sort")),
    bind(S::Locks, &[Key::char('V')], A::SortLocks(LockColumn::Validity), "sort by validity left", Some("sort")),
    bind(S::Locks, &[Key::char('Q')], A::SortLocks(LockColumn::Quorum), "sort by quorum agreement", Some("sort")),
    bind(S::Locks, &[Key::char('W')], A::SortLocks(LockColumn::Waiters), "sort by local waiters", Some("sort")),
    bind(S::Locks, &[Key::char('H')], A::SortLocks(LockColumn::Here), "sort by held through this agent", Some("sort")),
    // Semaphores and elections.
    bind(S::Primitives, &[Key::char('K')], A::SortPrimitives(PrimitiveColumn::Kind), "sort by kind, then name (again: reverse)", Some("sort")),
    bind(S::Primitives, &[Key::char('N')], A::SortPrimitives(PrimitiveColumn::Name), "sort by name", Some("sort")),
    bind(S::Primitives, &[Key::char('T')], A::SortPrimitives(PrimitiveColumn::Term), "sort by the leader's term", Some("sort")),
    // Leaks.
    bind(S::Leaks, &[Key::char('N')], A::SortLeaks(LeakColumn::Node), "sort by node (again: reverse)", Some("sort")),
    bind(S::Leaks, &[Key::char('K')], A::SortLeaks(LeakColumn::Kind), "sort by kind", Some("sort")),
    bind(S::Leaks, &[Key::char('R')], A::SortLeaks(LeakColumn::Resource), "sort by resource", Some("sort")),
    bind(S::Leaks, &[Key::char('T')], A::SortLeaks(LeakColumn::Ttl), "sort by TTL", Some("sort")),
    // Lock detail.
    bind(S::Detail, &[ESC, ENTER], A::CloseDetail, "back to the locks", Some("back")),
    bind(S::Detail, &[Key::char('j'), Key::code(KeyCode::Down)], A::Down, "next lock", None),
    bind(S::Detail, &[Key::char('k'), Key::code(KeyCode::Up)], A::Up, "previous lock", None),
    bind(S::Detail, &[Key::ctrl('d')], A::ForceRelease, "force-release this lock, permit or leadership (asks first)", Some("force release")),
    bind(S::Detail, &[Key::char(' ')], A::TogglePause, "pause or resume live updates", Some("pause")),
    bind(S::Detail, &[Key::char('?')], A::Help, "help", Some("help")),
    bind(S::Detail, &[Key::char('q')], A::Quit, "quit", Some("quit")),
    // Help.
    bind(S::Help, &[ESC, Key::char('?'), Key::char('q')], A::CloseHelp, "close the help", Some("close")),
    bind(S::Help, &[Key::char('j'), Key::code(KeyCode::Down)], A::Down, "scroll down", None),
    bind(S::Help, &[Key::char('k'), Key::code(KeyCode::Up)], A::Up, "scroll up", None),
    // Confirm.
    bind(S::Confirm, &[Key::char('y')], A::Confirm, "yes, do it", Some("yes")),
    bind(S::Confirm, &[Key::char('n'), ESC], A::Cancel, "no, cancel", Some("cancel")),
    // Prompt.
    bind(S::Prompt, &[ENTER], A::Submit, "apply", Some("apply")),
    bind(S::Prompt, &[ESC], A::CancelPrompt, "cancel (a filter is cleared)", Some("cancel")),
    bind(S::Prompt, &[Key::code(KeyCode::Backspace)], A::DeleteChar, "delete a character", None),
];

/// The bindings active in `context`, dangerous ones left out when `readonly`.
pub fn active(context: Context, readonly: bool) -> impl Iterator<Item = &'static Binding> {
    BINDINGS
        .iter()
        .filter(move |b| context.contains(&b.scope) && !(readonly && b.action.is_dangerous()))
}

/// The action bound to `key` in `context`.
pub fn lookup(context: Context, key: Key, readonly: bool) -> Option<Action> {
    active(context, readonly)
        .find(|b| b.keys.contains(&key))
        .map(|b| b.action)
}

/// The hint bar's entries for `context`: `(keys, word)`, bindings sharing a
/// word merged (`("N,S,L,U", "sort")`), in table order, most specific scope
/// first.
pub fn hints(context: Context, readonly: bool) -> Vec<(String, &'static str)> {
    let mut hints: Vec<(Scope, String, &'static str)> = Vec::new();
    for binding in active(context, readonly) {
        let Some(word) = binding.hint else { continue };
        let key = binding.keys[0].label();
        match hints
            .iter_mut()
            .find(|(scope, _, w)| *scope == binding.scope && *w == word)
        {
            Some((_, keys, _)) => {
                keys.push(',');
                keys.push_str(&key);
            }
            None => hints.push((binding.scope, key, word)),
        }
    }
    let rank = |scope: Scope| context.iter().position(|s| *s == scope).unwrap_or(0);
    hints.sort_by_key(|(scope, _, _)| std::cmp::Reverse(rank(*scope)));
    hints
        .into_iter()
        .map(|(_, keys, word)| (keys, word))
        .collect()
}

/// Every scope in help-screen order.
pub const SCOPES: &[Scope] = &[
    Scope::Always,
    Scope::Table,
    Scope::Nodes,
    Scope::Locks,
    Scope::Primitives,
    Scope::Leaks,
    Scope::Detail,
    Scope::Confirm,
    Scope::Prompt,
    Scope::Help,
];

/// The keys of a binding as help writes them: `j / ↓`.
pub fn keys_label(binding: &Binding) -> String {
    binding
        .keys
        .iter()
        .map(Key::label)
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The key table as Markdown, for docs/operations.md (a test checks the copy there).
pub fn markdown(readonly: bool) -> String {
    let mut out = String::from("| Where | Keys | Does |\n|---|---|---|\n");
    for &scope in SCOPES {
        for binding in BINDINGS
            .iter()
            .filter(|b| b.scope == scope && !(readonly && b.action.is_dangerous()))
        {
            let keys = binding
                .keys
                .iter()
                .map(|k| format!("`{}`", k.label()))
                .collect::<Vec<_>>()
                .join(" ");
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                scope.title(),
                keys,
                binding.help
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn no_key_is_bound_twice_in_any_context() {
        for readonly in [false, true] {
            for (name, context) in CONTEXTS {
                let mut seen: HashMap<Key, &str> = HashMap::new();
                for binding in active(context, readonly) {
                    for key in binding.keys {
                        if let Some(other) = seen.insert(*key, binding.help) {
                            panic!(
                                "{name}: {} is bound to both {other:?} and {:?}",
                                key.label(),
                                binding.help
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_scope_is_reachable_and_every_binding_has_a_key() {
        for binding in BINDINGS {
            assert!(!binding.keys.is_empty(), "{:?} has no key", binding.action);
            assert!(
                CONTEXTS.iter().any(|(_, c)| c.contains(&binding.scope)),
                "{:?} is in no context",
                binding.scope
            );
            assert!(SCOPES.contains(&binding.scope));
        }
    }

    #[test]
    fn dangerous_actions_vanish_in_readonly_mode() {
        let dangerous: Vec<_> = BINDINGS
            .iter()
            .filter(|b| b.action.is_dangerous())
            .collect();
        assert!(!dangerous.is_empty(), "force release is bound");
        for binding in dangerous {
            for (_, context) in CONTEXTS {
                for key in binding.keys {
                    let action = lookup(context, *key, true);
                    assert!(
                        !action.is_some_and(Action::is_dangerous),
                        "{:?} in readonly",
                        key
                    );
                }
            }
        }
        let hints = hints(LOCKS, true);
        assert!(
            hints.iter().all(|(_, word)| *word != "force release"),
            "{hints:?}"
        );
        assert!(!markdown(true).contains("force-release"));
        assert!(markdown(false).contains("| Locks view | `ctrl-d` | force-release"));
    }

    #[test]
    fn confirm_answers_are_only_bound_in_the_confirm_dialog() {
        for binding in BINDINGS.iter().filter(|b| b.action == Action::Confirm) {
            assert_eq!(binding.scope, Scope::Confirm);
        }
    }

    #[test]
    fn shift_letters_are_plain_upper_case_characters() {
        let shifted = KeyEvent::new(KeyCode::Char('R'), KeyModifiers::SHIFT);
        let key = Key::from_event(&shifted).unwrap();
        assert_eq!(
            lookup(LOCKS, key, false),
            Some(Action::SortLocks(LockColumn::Resource))
        );
        let ctrl_d = KeyEvent::new(KeyCode::Char('d'), KeyModifiers::CONTROL);
        assert_eq!(
            lookup(LOCKS, Key::from_event(&ctrl_d).unwrap(), false),
            Some(Action::ForceRelease)
        );
        let alt = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::ALT);
        assert_eq!(Key::from_event(&alt), None);
    }

    #[test]
    fn hints_merge_sort_keys_and_put_the_view_first() {
        let hints = hints(LOCKS, false);
        assert_eq!(hints[0], ("enter".to_string(), "detail"));
        assert!(
            hints.contains(&("R,O,V,Q,W,H".to_string(), "sort")),
            "{hints:?}"
        );
        assert!(hints.contains(&(":".to_string(), "view")));
    }

    #[test]
    fn the_docs_key_table_is_the_one_the_tui_uses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
        let page = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        let (begin, end) = ("<!-- keys:begin -->\n", "\n<!-- keys:end -->");
        let start = page
            .find(begin)
            .unwrap_or_else(|| panic!("{path} has no {begin:?} marker"))
            + begin.len();
        let len = page[start..]
            .find(end)
            .unwrap_or_else(|| panic!("{path} has no {end:?} marker"));
        assert_eq!(
            &page[start..start + len],
            markdown(false),
            "the key table in {path} is not what markdown(false) renders: replace the \
             lines between the keys:begin and keys:end markers with markdown(false)'s \
             text (the right-hand side above)"
        );
    }
}

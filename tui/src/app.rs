//! The model and `update(action)`.
//!
//! [`App`] holds everything on screen; [`App::update`] is the only way it
//! changes, one [`Action`] at a time (a key, a client event, a clock tick, a
//! resize). `update` does no I/O: what it wants from the agent it leaves in
//! an outbox that the event loop (`crate::event_loop`) hands to the client
//! task. Views read the model and draw; they never change it, and the app
//! knows nothing of them: how many rows a page holds on screen is measured
//! by the view and told to the app ([`App::set_page_rows`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent};

use crate::client::{self, Command, Conn, Event, Query, Update};
use crate::keys::{self, Context, Key};
use crate::state::filter::Filter;
use crate::state::leaks::{LeakColumn, LeakReport, Leaks};
use crate::state::locks::{LockColumn, LockDetail, LockRow, LockTable, Locks};
use crate::state::nodes::{NodeColumn, Nodes, Quorum};
use crate::state::primitives::{Kind, PrimitiveColumn, Primitives};
use crate::state::summary::Summary;
use crate::state::table::TableView;
use crate::state::Known;

/// How often the screen is redrawn when nothing else happens, so countdowns
/// tick smoothly.
pub const FRAME: Duration = Duration::from_millis(100);

/// Locks the agent lists more each time the cursor nears the end of the
/// loaded ones, and the most the view asks for.
pub const LOCKS_PAGE: usize = 1000;
pub const MAX_LOCKS: usize = 5000;

/// How long a flash message stays.
pub const FLASH_FOR: Duration = Duration::from_secs(5);

/// What the user asked for on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub socket: PathBuf,
    pub refresh: Duration,
    pub readonly: bool,
}

/// The table views, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Nodes,
    Locks,
    /// Semaphores and elections seen in the locks listing.
    Primitives,
    Leaks,
}

impl View {
    pub const ALL: [View; 4] = [View::Nodes, View::Locks, View::Primitives, View::Leaks];

    fn context(self) -> Context {
        match self {
            View::Nodes => keys::NODES,
            View::Locks => keys::LOCKS,
            View::Primitives => keys::PRIMITIVES,
            View::Leaks => keys::LEAKS,
        }
    }

    fn step(self, by: isize) -> View {
        let i = View::ALL.iter().position(|v| *v == self).unwrap_or(0) as isize;
        View::ALL[(i + by).rem_euclid(View::ALL.len() as isize) as usize]
    }
}

/// What has the keyboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Table,
    /// The selected lock's detail pane.
    Detail,
    /// The help screen over `under` (Table or Detail).
    Help {
        scroll: u16,
        under: Box<Mode>,
    },
    /// A dangerous action waiting for yes or no.
    Confirm(Confirm),
    Prompt(Prompt),
}

/// The force-release dialog: what is about to be deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    pub resource: String,
    /// What the force release asks the agent for: the lock's, a permit's
    /// or a leadership's.
    pub command: Command,
    pub owner: Option<String>,
    pub held_on: usize,
    pub masters: usize,
    /// Where to return: Table or Detail.
    pub under: Box<Mode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// `:` view switching.
    Command,
    /// `/` filtering, applied as typed.
    Filter,
}

/// The `:` or `/` line being typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub kind: PromptKind,
    pub text: String,
    /// Why the text is not a valid filter, while it is not.
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// A message on the bottom line, gone after [`FLASH_FOR`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flash {
    pub text: String,
    pub level: Level,
    pub until: Instant,
}

/// One step of the model.
// An action lives for one update and is moved once or twice: boxing the
// client's events would cost an allocation each for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A key from the terminal, looked up in the key table.
    Key(KeyEvent),
    /// An action from the key table, as if its key was pressed.
    Do(keys::Action),
    Client(Event),
    Tick(Instant),
    Resize(u16, u16),
}

/// The whole model.
#[derive(Debug)]
pub struct App {
    pub settings: Settings,
    pub conn: Conn,
    pub view: View,
    pub mode: Mode,
    /// Set while paused: the instant the screen froze at.
    pub paused: Option<Instant>,
    /// The latest clock tick.
    pub clock: Instant,
    pub size: (u16, u16),
    pub nodes: Nodes,
    pub locks: Locks,
    pub leaks: Leaks,
    pub primitives: Primitives,
    pub summary: Summary,
    pub node_table: TableView<NodeColumn>,
    pub lock_table: TableView<LockColumn>,
    pub primitive_table: TableView<PrimitiveColumn>,
    pub leak_table: TableView<LeakColumn>,
    pub flash: Option<Flash>,
    pub quit: bool,
    /// What the client asks `/v1/locks` for: the locks filter's literal
    /// start as the agent's prefix, how many to list, the open detail.
    pub query: Query,
    /// The agent's answer about the lock in the detail pane.
    pub detail: Known<LockDetail>,
    /// Answers held back while paused, newest per endpoint.
    held: Vec<(Instant, Update)>,
    /// Commands for the client, taken by the event loop.
    outbox: Vec<Command>,
    /// Rows a page holds in the current table on screen, as the view last
    /// measured it (PageUp/PageDown move by it).
    page_rows: usize,
}

impl App {
    pub fn new(settings: Settings, now: Instant) -> App {
        App {
            settings,
            conn: Conn::Connecting { attempt: 0 },
            view: View::Nodes,
            mode: Mode::Table,
            paused: None,
            clock: now,
            size: (80, 24),
            nodes: Nodes::default(),
            locks: Locks::default(),
            leaks: Leaks::default(),
            primitives: Primitives::default(),
            summary: Summary::default(),
            node_table: TableView::new(NodeColumn::Name),
            lock_table: TableView::new(LockColumn::Resource),
            primitive_table: TableView::new(PrimitiveColumn::Kind),
            leak_table: TableView::new(LeakColumn::Node),
            flash: None,
            quit: false,
            query: Query {
                list: false,
                ..Query::default()
            },
            detail: Known::Unknown,
            held: Vec::new(),
            page_rows: 1,
            outbox: Vec::new(),
        }
    }

    /// The instant countdowns are shown at: frozen while paused.
    pub fn now(&self) -> Instant {
        self.paused.unwrap_or(self.clock)
    }

    /// The scopes of the key table that apply right now.
    pub fn context(&self) -> Context {
        match &self.mode {
            Mode::Table => self.view.context(),
            Mode::Detail => keys::DETAIL,
            Mode::Help { .. } => keys::HELP,
            Mode::Confirm(_) => keys::CONFIRM,
            Mode::Prompt(_) => keys::PROMPT,
        }
    }

    /// Commands for the client since the last call.
    pub fn take_commands(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.outbox)
    }

    /// Is the lock detail pane on screen (perhaps under help or a dialog)?
    pub fn detail_open(&self) -> bool {
        match &self.mode {
            Mode::Detail => true,
            Mode::Help { under, .. } => **under == Mode::Detail,
            Mode::Confirm(confirm) => *confirm.under == Mode::Detail,
            _ => false,
        }
    }

    /// The lock under the cursor in the locks view.
    pub fn selected_lock(&self) -> Option<&LockRow> {
        self.lock_table
            .selected_row()
            .and_then(|i| self.locks.rows().get(i))
    }

    /// The lock the detail pane shows: the agent's answer about it by name,
    /// else its row in the table until that answer comes.
    pub fn detail_lock(&self) -> Option<&LockRow> {
        let name = self.query.detail.as_deref()?;
        match &self.detail {
            Known::Known(detail) if detail.row.info.resource == name => Some(&detail.row),
            _ => self.locks.find(name),
        }
    }

    /// Opens the detail pane on `resource`, asked of the agent by name.
    fn open_detail(&mut self, resource: String) {
        if self.query.detail.as_deref() != Some(resource.as_str()) {
            self.detail = Known::Unknown;
        }
        self.query.detail = Some(resource);
        self.mode = Mode::Detail;
    }

    fn close_detail(&mut self) {
        self.query.detail = None;
        self.detail = Known::Unknown;
    }

    /// Applies one action to the model.
    pub fn update(&mut self, action: Action) {
        match action {
            Action::Key(event) => self.key(&event),
            Action::Do(action) => self.act(action),
            Action::Client(event) => self.client(event),
            Action::Tick(now) => {
                self.clock = now;
                if self.flash.as_ref().is_some_and(|f| f.until <= now) {
                    self.flash = None;
                }
            }
            Action::Resize(width, height) => self.size = (width, height),
        }
    }

    fn key(&mut self, event: &KeyEvent) {
        let Some(key) = Key::from_event(event) else {
            return;
        };
        if let Some(action) = keys::lookup(self.context(), key, self.settings.readonly) {
            self.act(action);
            return;
        }
        if let (Mode::Prompt(prompt), KeyCode::Char(c), false) =
            (&mut self.mode, key.code, key.ctrl)
        {
            prompt.text.push(c);
            self.prompt_changed();
        }
    }

    /// Shows a message on the bottom line.
    pub fn notify(&mut self, level: Level, text: impl Into<String>) {
        self.flash(level, text);
    }

    fn flash(&mut self, level: Level, text: impl Into<String>) {
        self.flash = Some(Flash {
            text: text.into(),
            level,
            until: self.clock + FLASH_FOR,
        });
    }

    /// Rows a page holds in the current table.
    fn page(&self) -> usize {
        self.page_rows.max(1)
    }

    /// How many rows a page holds in the current table on screen: the
    /// view measures it (it depends on the layout) after every update.
    pub fn set_page_rows(&mut self, rows: usize) {
        self.page_rows = rows;
    }

    fn act(&mut self, action: keys::Action) {
        use keys::Action as A;
        match action {
            A::Quit => self.quit = true,
            A::CommandPrompt => {
                self.mode = Mode::Prompt(Prompt {
                    kind: PromptKind::Command,
                    text: String::new(),
                    error: None,
                });
            }
            A::FilterPrompt => {
                let text = self
                    .filter()
                    .map(|f| f.text().to_string())
                    .unwrap_or_default();
                self.mode = Mode::Prompt(Prompt {
                    kind: PromptKind::Filter,
                    text,
                    error: None,
                });
            }
            A::ClearFilter => self.set_filter(None),
            A::NextView => self.switch(self.view.step(1)),
            A::PrevView => self.switch(self.view.step(-1)),
            A::Up => self.move_by(-1),
            A::Down => self.move_by(1),
            A::PageUp => self.move_by(-(self.page() as isize)),
            A::PageDown => self.move_by(self.page() as isize),
            A::Top => self.move_by(isize::MIN),
            A::Bottom => self.move_by(isize::MAX),
            A::TogglePause => self.toggle_pause(),
            A::Help => {
                let under = std::mem::replace(&mut self.mode, Mode::Table);
                self.mode = Mode::Help {
                    scroll: 0,
                    under: Box::new(under),
                };
            }
            A::CloseHelp => self.back(),
            A::OpenDetail => {
                if self.view == View::Locks {
                    if let Some(lock) = self.selected_lock() {
                        self.open_detail(lock.info.resource.clone());
                    }
                }
            }
            A::CloseDetail => {
                self.mode = Mode::Table;
                self.close_detail();
            }
            A::ForceRelease => self.ask_force_release(),
            A::Confirm => {
                if let Mode::Confirm(confirm) = &self.mode {
                    let command = confirm.command.clone();
                    self.back();
                    if self.settings.readonly {
                        return;
                    }
                    self.flash(Level::Info, format!("force-releasing {}…", command.what()));
                    self.outbox.push(command);
                }
            }
            A::Cancel => {
                self.back();
                self.flash(Level::Info, "cancelled");
            }
            A::Submit => self.submit(),
            A::CancelPrompt => {
                if let Mode::Prompt(prompt) = &self.mode {
                    if prompt.kind == PromptKind::Filter {
                        self.set_filter(None);
                    }
                }
                self.mode = Mode::Table;
            }
            A::DeleteChar => {
                if let Mode::Prompt(prompt) = &mut self.mode {
                    prompt.text.pop();
                    self.prompt_changed();
                }
            }
            A::SortNodes(column) => self.node_table.sort_by(column, &self.nodes),
            A::SortLocks(column) => self.lock_table.sort_by(column, &self.locks),
            A::SortLeaks(column) => self.leak_table.sort_by(column, &self.leaks),
            A::SortPrimitives(column) => self.primitive_table.sort_by(column, &self.primitives),
        }
    }

    /// Leaves a dialog or help for what was under it.
    fn back(&mut self) {
        self.mode = match std::mem::replace(&mut self.mode, Mode::Table) {
            Mode::Help { under, .. } => *under,
            Mode::Confirm(confirm) => *confirm.under,
            _ => Mode::Table,
        };
        if self.mode != Mode::Detail {
            self.close_detail();
        }
    }

    fn ask_force_release(&mut self) {
        if self.settings.readonly || self.view != View::Locks {
            return;
        }
        let lock = if self.mode == Mode::Detail {
            self.detail_lock()
        } else {
            self.selected_lock()
        };
        let Some(lock) = lock else {
            self.flash(Level::Warn, "no lock selected");
            return;
        };
        let confirm = Confirm {
            resource: lock.info.resource.clone(),
            command: force_release(&lock.info.resource),
            owner: crate::state::locks::holder_label(&lock.info),
            held_on: lock.held_on(),
            masters: lock.keys.len(),
            under: Box::new(std::mem::replace(&mut self.mode, Mode::Table)),
        };
        self.mode = Mode::Confirm(confirm);
    }

    fn switch(&mut self, view: View) {
        self.view = view;
        self.mode = Mode::Table;
        self.close_detail();
        self.query.list = matches!(view, View::Locks | View::Primitives);
        self.query.primitives = view == View::Primitives;
        // The agent's prefix is the locks filter's: the primitives view
        // lists everything, and the locks view gets its own back.
        let prefix = match view {
            View::Locks => self
                .lock_table
                .filter()
                .and_then(Filter::server_prefix)
                .unwrap_or_default(),
            _ => String::new(),
        };
        if prefix != self.query.prefix {
            self.query.prefix = prefix;
            self.query.limit = client::DEFAULT_LIMIT;
        }
    }

    fn move_by(&mut self, delta: isize) {
        let page = self.page();
        match (&mut self.mode, self.view) {
            (Mode::Help { scroll, .. }, _) => {
                *scroll = scroll.saturating_add_signed(delta.clamp(-100, 100) as i16);
            }
            (Mode::Table | Mode::Detail, View::Nodes) => {
                self.node_table.move_by(delta, page, &self.nodes)
            }
            (Mode::Table | Mode::Detail, View::Locks) => {
                self.lock_table.move_by(delta, page, &self.locks);
                self.page_in();
            }
            (Mode::Table | Mode::Detail, View::Leaks) => {
                self.leak_table.move_by(delta, page, &self.leaks)
            }
            (Mode::Table | Mode::Detail, View::Primitives) => {
                self.primitive_table.move_by(delta, page, &self.primitives)
            }
            _ => {}
        }
    }

    /// Near the end of the locks the agent listed, and it has more: ask
    /// for another page's worth from the next poll on.
    fn page_in(&mut self) {
        let truncated = self.locks.table.get().is_some_and(|t| t.truncated);
        let position = self.lock_table.selected_position().unwrap_or(0);
        let loaded = self.locks.rows().len();
        if truncated && position + self.page() >= loaded && self.query.limit < MAX_LOCKS {
            self.query.limit = (self.query.limit + LOCKS_PAGE).min(MAX_LOCKS);
        }
    }

    fn toggle_pause(&mut self) {
        match self.paused {
            None => self.paused = Some(self.clock),
            Some(_) => {
                self.paused = None;
                for (at, update) in std::mem::take(&mut self.held) {
                    self.apply(at, update);
                }
            }
        }
    }

    /// The current view's filter.
    pub fn filter(&self) -> Option<&Filter> {
        match self.view {
            View::Nodes => self.node_table.filter(),
            View::Locks => self.lock_table.filter(),
            View::Primitives => self.primitive_table.filter(),
            View::Leaks => self.leak_table.filter(),
        }
    }

    fn set_filter(&mut self, filter: Option<Filter>) {
        match self.view {
            View::Nodes => self.node_table.set_filter(filter, &self.nodes),
            View::Locks => {
                // The agent filters by the pattern's literal start, so a
                // name among 100,000 comes back in one small page.
                let prefix = filter
                    .as_ref()
                    .and_then(Filter::server_prefix)
                    .unwrap_or_default();
                if prefix != self.query.prefix {
                    self.query.prefix = prefix;
                    self.query.limit = client::DEFAULT_LIMIT;
                }
                self.lock_table.set_filter(filter, &self.locks);
            }
            View::Leaks => self.leak_table.set_filter(filter, &self.leaks),
            View::Primitives => self.primitive_table.set_filter(filter, &self.primitives),
        }
    }

    /// Live filtering: a valid pattern applies as it is typed.
    fn prompt_changed(&mut self) {
        let Mode::Prompt(prompt) = &mut self.mode else {
            return;
        };
        if prompt.kind != PromptKind::Filter {
            return;
        }
        match Filter::parse(&prompt.text) {
            Ok(filter) => {
                prompt.error = None;
                self.set_filter(filter);
            }
            Err(e) => prompt.error = Some(e.to_string()),
        }
    }

    fn submit(&mut self) {
        let Mode::Prompt(prompt) = std::mem::replace(&mut self.mode, Mode::Table) else {
            return;
        };
        match prompt.kind {
            PromptKind::Filter => {
                if let Some(error) = prompt.error {
                    self.flash(Level::Error, error);
                }
            }
            PromptKind::Command => self.command(prompt.text.trim()),
        }
    }

    /// Runs a `:` command; a unique prefix will do (`:lo`, `:node`).
    fn command(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        const COMMANDS: &[&str] = &[
            "nodes",
            "locks",
            "primitives",
            "semaphores",
            "elections",
            "leaks",
            "help",
            "quit",
            "q",
        ];
        let matches: Vec<&str> = COMMANDS
            .iter()
            .copied()
            .filter(|c| *c == text || c.starts_with(text))
            .collect();
        let exact = COMMANDS.iter().find(|c| **c == text).copied();
        let chosen = exact.or(match matches.as_slice() {
            [only] => Some(*only),
            _ => None,
        });
        match (chosen, matches.as_slice()) {
            (Some(command), _) => match command {
                "nodes" => self.switch(View::Nodes),
                "locks" => self.switch(View::Locks),
                "leaks" => self.switch(View::Leaks),
                "primitives" | "semaphores" | "elections" => self.switch(View::Primitives),
                "help" => self.act(keys::Action::Help),
                _ => self.quit = true,
            },
            (None, []) => self.flash(
                Level::Error,
                format!("unknown command :{text} (try :nodes, :locks, :primitives, :leaks, :q)"),
            ),
            (None, many) => self.flash(
                Level::Error,
                format!(":{text} is ambiguous: {}", many.join(", ")),
            ),
        }
    }

    fn client(&mut self, event: Event) {
        match event {
            Event::Conn(conn) => {
                if matches!(conn, Conn::Reconnecting { .. }) {
                    self.forget_all();
                }
                self.conn = conn;
            }
            Event::Polled { at, update } => {
                if self.paused.is_some() {
                    self.held.retain(|(_, u)| {
                        std::mem::discriminant(u) != std::mem::discriminant(&update)
                    });
                    self.held.push((at, update));
                } else {
                    self.apply(at, update);
                }
            }
            Event::Released { resource, result } => match result {
                Ok(released) if released.failed.is_empty() => self.flash(
                    Level::Info,
                    format!(
                        "force-released {resource}: deleted on {} masters",
                        released.deleted
                    ),
                ),
                Ok(released) => self.flash(
                    Level::Warn,
                    format!(
                        "force-released {resource} on {} masters; could not reach {}",
                        released.deleted,
                        released.failed.join(", ")
                    ),
                ),
                Err(e) => self.flash(
                    Level::Error,
                    format!("force release of {resource} failed: {e}"),
                ),
            },
        }
    }

    /// The connection dropped: no value shown may outlive it.
    fn forget_all(&mut self) {
        self.held.clear();
        self.nodes.forget(Known::Unknown);
        self.locks.forget(Known::Unknown);
        self.leaks.forget(Known::Unknown);
        self.primitives.forget(Known::Unknown);
        self.summary.forget(Known::Unknown);
        self.rebuild_tables();
        if self.mode == Mode::Detail {
            self.mode = Mode::Table;
        }
        self.close_detail();
    }

    fn rebuild_tables(&mut self) {
        self.node_table.rebuild(&self.nodes);
        self.lock_table.rebuild(&self.locks);
        self.primitive_table.rebuild(&self.primitives);
        self.leak_table.rebuild(&self.leaks);
    }

    fn apply(&mut self, at: Instant, update: Update) {
        match update {
            Update::Nodes(Ok(response)) => self.nodes.apply(&response, at),
            Update::Nodes(Err(e)) => self.nodes.forget(Known::<Quorum>::Failed(e)),
            Update::Locks(Ok(response)) => {
                self.locks.apply(&response, at);
                self.primitives.follow(&self.locks);
            }
            Update::Locks(Err(e)) => {
                self.locks.forget(Known::<LockTable>::Failed(e));
                self.primitives.follow(&self.locks);
            }
            Update::Primitives(answers, wall_ms) => self.primitives.apply(&answers, at, wall_ms),
            Update::Lock(resource, reply) => {
                // An answer for a pane since closed or moved is dropped.
                if self.query.detail.as_deref() == Some(resource.as_str()) {
                    self.detail = match reply {
                        Ok(response) => Known::Known(LockDetail::from_response(
                            &response,
                            self.detail.get(),
                            at,
                        )),
                        Err(e) => Known::Failed(e),
                    };
                }
            }
            Update::Leaks(Ok(response), wall_ms) => self.leaks.apply(&response, at, wall_ms),
            Update::Leaks(Err(e), _) => self.leaks.forget(Known::<LeakReport>::Failed(e)),
            Update::Summary(Ok(response)) => self.summary.apply(&response, at),
            Update::Summary(Err(e)) => self.summary.forget(Known::Failed(e)),
        }
        self.rebuild_tables();
    }
}

/// The force release of a listed resource, by its kind: a lock's, one
/// permit's of its semaphore, or an election's leadership.
fn force_release(resource: &str) -> Command {
    match Kind::of(resource) {
        Kind::Lock => Command::ForceRelease(resource.to_string()),
        Kind::Permit { semaphore, permit } => Command::ForceReleasePermit {
            semaphore: semaphore.to_string(),
            permit,
        },
        Kind::Leader { election } => Command::ForceReleaseLeadership(election.to_string()),
    }
}

#[cfg(test)]
mod tests;

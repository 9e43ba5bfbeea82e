//! redlock-tui: a terminal console for redlock-agent, k9s-style. It polls
//! an agent's socket and shows its masters, the lock keys on them, the
//! semaphores and elections those keys belong to, the leaked-key scanner's
//! findings and a one-minute summary.
//!
//! # Layout
//! - `main.rs`: command line, terminal setup and restore, the panic hook.
//! - [`app`]: the model and `update(action)`; the only place that turns
//!   keys and client events into changes. It knows no view.
//! - [`event_loop`]: terminal and client events into the app, the view
//!   drawn after each, the app's query and commands out to the client.
//! - [`keys`]: the one key table; key handling, the hint bar, the help
//!   screen and the key list in docs/operations.md are all read from it.
//! - [`client`]: the connection to the agent as a state machine, in its own
//!   task, talking to the app over channels.
//! - [`state`]: pure data: rows, sort, filter, countdowns, summary rates.
//! - [`view`]: render only: header, summary strip, nodes, locks,
//!   primitives (semaphores and elections), leaks,
//!   help, confirm, and the theme every colour comes from.
//!
//! Data flows one way: client → app → state → view; the event loop, above
//! them all, carries it around.

pub mod app;
pub mod client;
pub mod event_loop;
pub mod keys;
pub mod state;
pub mod view;

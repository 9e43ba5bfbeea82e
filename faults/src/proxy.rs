//! The fault-injecting TCP proxy between one agent and one master lives in
//! `redlock-testkit` with the masters it stands in front of; this module
//! names it where the suite has always found it.

pub use redlock_testkit::proxy::{Link, LinkFault};

//! The HTTP/JSON API: routes on the Unix socket (locks, nodes, probes) and
//! on the TCP metrics listener (probes, metrics). Wire types live in the
//! `redlock-wire` crate so clients can use them without the server.

pub mod routes;
pub mod server;

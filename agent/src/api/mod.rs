//! The HTTP/JSON API: routes on the application socket (locks, views,
//! probes), on the admin socket (views, force release) and on the TCP
//! metrics listener (probes, metrics); peer credentials and who may connect
//! ([`peer`]), and a peer's pod, for an agent that keeps tokens to their
//! pods ([`pod`]); one connection's life, hyper only while it has requests
//! ([`connection`]); the handlers of the routes that take locks, on one
//! resource or several, and permits ([`handlers`]), and of those that act
//! on a grant already made ([`grants`]); the API's
//! OpenAPI document, served with this agent's bounds ([`openapi`]). Wire types live in the
//! `redlock-wire` crate so clients can use them without the server.

pub mod connection;
pub mod grants;
pub mod handlers;
pub mod openapi;
pub mod peer;
pub mod pod;
pub mod routes;
pub mod server;

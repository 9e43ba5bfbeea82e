//! A hold: a lock tied to one connection, its NDJSON event stream read
//! line by line. The agent renews the lock every third of its TTL and
//! sends `renewed`; it sends `lost` before the validity ends if it cannot
//! keep it; closing the connection (dropping the [`Hold`]) releases it.
//!
//! ## Behavior
//! - [`Hold`] is returned once the first line, `acquired`, has arrived; its
//!   deadline then moves with every `renewed` line read.
//! - A line that is not a hold event, or longer than [`MAX_LINE`], is
//!   [`Error::Protocol`]: the stream is not trusted past it.
//! - The stream ending without `lost` (the agent stopped or crashed) reads
//!   as `Ok(None)`: the lock must be treated as lost.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use redlock_wire::HoldEvent;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::transport::Conn;
use crate::Error;

/// Longest event line accepted; real ones are under 200 bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// An open hold. Dropping it closes the connection, and the agent then
/// releases the lock on every master.
pub struct Hold {
    pub(crate) resource: String,
    pub(crate) token: String,
    pub(crate) ttl: Duration,
    pub(crate) validity: Duration,
    pub(crate) valid_until: Instant,
    pub(crate) fence: Option<u64>,
    /// A hold that re-entered a lock: the count its releases must undo.
    pub(crate) hold_count: Option<u32>,
    pub(crate) lines: Lines,
    /// Kept open for as long as the hold lives; its drop closes the socket
    /// at once.
    pub(crate) conn: Conn,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token: it is the proof of holding the lock.
        f.debug_struct("Hold")
            .field("resource", &self.resource)
            .field("ttl", &self.ttl)
            .field("validity", &self.validity)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl Hold {
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The token the agent granted: for [`crate::Client::release`], or to
    /// hand to a child process. Keep it secret.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The fencing token of this hold's grant, when asked for
    /// ([`crate::HoldOptions::fence`]); renewals keep it.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// For a hold that re-entered a lock ([`crate::HoldOptions::reenter`]):
    /// the acquires its releases must undo, this hold's included.
    pub fn hold_count(&self) -> Option<u32> {
        self.hold_count
    }

    /// The validity last announced (`acquired` or `renewed`).
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// When the validity last announced ends, counted from when its line
    /// arrived. Past it, another client may hold the lock.
    pub fn valid_until(&self) -> std::time::Instant {
        self.valid_until.into_std()
    }

    /// The next event after `acquired`: `renewed` (the deadline has moved)
    /// or `lost` (stop using the lock; the stream ends after it). `None`
    /// when the stream ended without `lost`, which means lost too.
    ///
    /// Cancel-safe: a partial line stays buffered for the next call.
    ///
    /// # Errors
    /// [`Error::Protocol`] for a line that is not an event,
    /// [`Error::Connection`] when the socket failed.
    pub async fn next_event(&mut self) -> Result<Option<HoldEvent>, Error> {
        let event = self.lines.next().await?;
        if let Some(HoldEvent::Renewed { validity_ms }) = &event {
            self.validity = Duration::from_millis(*validity_ms);
            self.valid_until = Instant::now() + self.validity;
        }
        Ok(event)
    }

    /// Ends the hold: closes the connection, and the agent releases the
    /// lock on every master. The same as dropping it, said out loud.
    pub fn close(self) {}
}

/// Splits a streamed body into NDJSON hold events.
pub(crate) struct Lines {
    body: Incoming,
    buffer: Vec<u8>,
}

impl Lines {
    pub(crate) fn new(body: Incoming) -> Lines {
        Lines {
            body,
            buffer: Vec::new(),
        }
    }

    /// The next event; `Ok(None)` when the stream ended.
    pub(crate) async fn next(&mut self) -> Result<Option<HoldEvent>, Error> {
        self.next_as("hold event").await
    }

    /// The next line as a `T` (`what` names it in errors); `Ok(None)` when
    /// the stream ended. Cancel-safe: a partial line stays buffered.
    pub(crate) async fn next_as<T: DeserializeOwned>(
        &mut self,
        what: &str,
    ) -> Result<Option<T>, Error> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return parse(&line, what).map(Some);
            }
            if self.buffer.len() > MAX_LINE {
                return Err(Error::Protocol(format!(
                    "a {what} line over {MAX_LINE} bytes"
                )));
            }
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame.map_err(|e| Error::Connection(Box::new(e)))?;
            if let Ok(data) = frame.into_data() {
                self.push(&data);
            }
        }
    }

    fn push(&mut self, data: &Bytes) {
        self.buffer.extend_from_slice(data);
    }
}

fn parse<T: DeserializeOwned>(line: &[u8], what: &str) -> Result<T, Error> {
    serde_json::from_slice(line).map_err(|e| {
        Error::Protocol(format!(
            "not a {what} ({e}): {}",
            String::from_utf8_lossy(&line[..line.len().min(200)]).trim_end()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_as_events_or_say_why_not() {
        let parse = |line: &[u8]| parse::<HoldEvent>(line, "hold event");
        let renewed = parse(b"{\"event\":\"renewed\",\"validity_ms\":9898}\n").unwrap();
        assert_eq!(renewed, HoldEvent::Renewed { validity_ms: 9898 });
        let lost = parse(b"{\"event\":\"lost\",\"reason\":\"renew_failed\"}\n").unwrap();
        assert_eq!(
            lost,
            HoldEvent::Lost {
                reason: "renew_failed".into()
            }
        );
        let odd = parse(b"{\"event\":\"party\"}\n").unwrap_err();
        assert!(odd.to_string().contains("not a hold event"), "{odd}");
    }
}

//! The socket API fuzzer's model: a request as bytes plus how it is
//! delivered, what the agent owes it, and the verdict on what came back.
//! The cases themselves come from a proptest strategy
//! (`faults/tests/fuzz.rs`).
//!
//! What the agent owes a request:
//! - **complete** (well-formed HTTP/1.1 per RFC 9112, target per RFC 3986,
//!   delivered in full within `socket.request_timeout`): one answer, JSON,
//!   whose status and body match `agent/openapi.yaml`;
//! - **malformed** (not HTTP/1.1 as the RFC writes it): a 4xx answer or a
//!   closed connection, never a hang, a crash or a 2xx;
//! - **truncated** (cut short or stalled): a `408`/`400` JSON answer or a
//!   closed connection within the request timeout and a margin.
//!
//! And after every case the agent still answers `/healthz`.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::http::{Conn, HttpError, Response};
use crate::openapi::Spec;

/// What the agent owes a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    Complete,
    Malformed,
    Truncated,
}

/// How the bytes go out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// One write.
    AllAtOnce,
    /// In `pieces` writes with `pause_ms` between them (a slow writer).
    Slow { pieces: usize, pause_ms: u64 },
    /// Only the first `keep` bytes; then, if `half_close`, the write side
    /// is shut (else the connection stays open, stalled).
    Cut { keep: usize, half_close: bool },
}

/// One fuzz case.
#[derive(Clone, PartialEq, Eq)]
pub struct Case {
    pub method: String,
    pub target: String,
    pub bytes: Vec<u8>,
    pub delivery: Delivery,
    pub class: Class,
    /// For the report: what the generator meant to make.
    pub label: String,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = if self.bytes.len() > 400 {
            format!(
                "{}… ({} bytes)",
                String::from_utf8_lossy(&self.bytes[..400]),
                self.bytes.len()
            )
        } else {
            String::from_utf8_lossy(&self.bytes).into_owned()
        };
        write!(
            f,
            "Case {{ {:?} {:?} {} {:?}: {shown:?} }}",
            self.class, self.label, self.method, self.delivery
        )
    }
}

/// How a case came out.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// What the agent owed, with the status (0: closed without answer).
    Fine { status: u16, json: bool },
    /// A breach of what the agent owes.
    Breach(String),
}

/// Per-class tallies for the report.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub cases: u64,
    pub by_status: std::collections::BTreeMap<u16, u64>,
    /// Malformed requests answered without a JSON body (hyper's own 4xx).
    pub bare_answers: u64,
}

/// Sends one case on a fresh connection and judges the answer.
pub async fn run_case(
    socket: &Path,
    case: &Case,
    spec: &Spec,
    request_timeout: Duration,
) -> Outcome {
    let mut conn = match Conn::connect(socket).await {
        Ok(c) => c,
        Err(e) => return Outcome::Breach(format!("cannot connect: {e}")),
    };
    // The agent may answer (413) and stop reading before all is written.
    let sent = tokio::time::timeout(
        request_timeout + Duration::from_secs(1),
        deliver(&mut conn, case),
    )
    .await
    .unwrap_or(false);
    // Budget: the request timeout, plus what a valid wait may take.
    let limit = request_timeout + Duration::from_secs(6);
    let answer = tokio::time::timeout(limit, read_answer(conn, &case.method))
        .await
        .unwrap_or(Err(HttpError::Timeout(limit)));
    judge(case, sent, answer, spec)
}

/// Reads an answer; of a hold's endless 200 stream, only the first line
/// (then the connection closes, which ends the hold).
async fn read_answer(mut conn: Conn, method: &str) -> Result<Response, HttpError> {
    let head = conn.read_head().await?;
    let streaming = head.status == 200
        && head
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/x-ndjson"));
    if streaming {
        let mut lines = conn.into_lines();
        let mut body = lines.next_line().await?.unwrap_or_default();
        body.push(b'\n');
        return Ok(Response { head, body });
    }
    let body = conn.read_body(&head, method).await?;
    Ok(Response { head, body })
}

/// Writes the case; `false` when the agent closed before all was written.
async fn deliver(conn: &mut Conn, case: &Case) -> bool {
    match &case.delivery {
        Delivery::AllAtOnce => conn.write(&case.bytes).await.is_ok(),
        Delivery::Slow { pieces, pause_ms } => {
            let size = case.bytes.len().div_ceil((*pieces).max(1)).max(1);
            for (i, chunk) in case.bytes.chunks(size).enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(*pause_ms)).await;
                }
                if conn.write(chunk).await.is_err() {
                    return false;
                }
            }
            true
        }
        Delivery::Cut { keep, half_close } => {
            let keep = (*keep).min(case.bytes.len());
            let ok = conn.write(&case.bytes[..keep]).await.is_ok();
            if *half_close {
                conn.shutdown_write().await;
            }
            ok
        }
    }
}

fn judge(case: &Case, written: bool, answer: Result<Response, HttpError>, spec: &Spec) -> Outcome {
    match (case.class, answer) {
        (Class::Complete, Ok(r)) => {
            let json = r.header("content-type").is_some_and(|c| {
                c.starts_with("application/json") || c.starts_with("application/x-ndjson")
            });
            match spec.check(&case.method, &case.target, &r) {
                Ok(()) => Outcome::Fine {
                    status: r.status(),
                    json,
                },
                Err(e) => Outcome::Breach(e),
            }
        }
        (Class::Complete, Err(e)) => {
            // A body over the limit may be refused before it is all sent:
            // the agent answers 413 and closes; the rest of our write fails.
            if !written {
                return Outcome::Breach(format!("closed while the request was sent, then {e}"));
            }
            Outcome::Breach(format!("no answer to a complete request: {e}"))
        }
        // Malformed: any answer that is HTTP and not a server error, or a
        // close; JSON error bodies must still be well-formed errors.
        (Class::Malformed, Ok(r)) => {
            let json = r
                .header("content-type")
                .is_some_and(|c| c.starts_with("application/json"));
            if r.status() >= 500 && r.status() != 503 {
                return Outcome::Breach(format!(
                    "malformed request answered {}: {}",
                    r.status(),
                    r.body_text()
                ));
            }
            // An answer to HEAD has the headers of the error and no body
            // (RFC 9110, 9.3.2): nothing to validate.
            if json && r.status() >= 400 && case.method != "HEAD" {
                let body = r.json().unwrap_or(serde_json::Value::Null);
                if let Err(e) = spec.validate_component("ErrorResponse", &body) {
                    return Outcome::Breach(format!("malformed request: {e}"));
                }
            }
            Outcome::Fine {
                status: r.status(),
                json,
            }
        }
        (Class::Malformed | Class::Truncated, Err(HttpError::Timeout(d))) => {
            Outcome::Breach(format!("neither answered nor closed in {d:?}"))
        }
        (Class::Malformed | Class::Truncated, Err(HttpError::Malformed(m))) => {
            Outcome::Breach(format!("answered with something that is not HTTP: {m}"))
        }
        (Class::Malformed | Class::Truncated, Err(_)) => Outcome::Fine {
            status: 0,
            json: false,
        },
        // A route may answer from the head alone (a GET, a bad resource,
        // a declared length over the limit); else 408 once the body stalls.
        (Class::Truncated, Ok(r)) => match spec.check(&case.method, &case.target, &r) {
            Ok(()) => Outcome::Fine {
                status: r.status(),
                json: true,
            },
            Err(e) => Outcome::Breach(format!("truncated request: {e}")),
        },
    }
}

/// Whether `target` is an RFC 3986 origin-form target (path and query of
/// pchars and valid percent-encodings), as a client library would send.
pub fn valid_target(target: &str) -> bool {
    let bytes = target.as_bytes();
    if bytes.first() != Some(&b'/') {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let ok = b.is_ascii_alphanumeric()
            || b"-._~!$&'()*+,;=:@/?".contains(&b)
            || (b == b'%'
                && bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit));
        if !ok {
            return false;
        }
        i += if b == b'%' { 3 } else { 1 };
    }
    true
}

/// Whether `method` is an RFC 9110 token.
pub fn valid_method(method: &str) -> bool {
    !method.is_empty()
        && method
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_methods_follow_the_rfcs() {
        assert!(valid_target("/v1/locks/a%2Fb/acquire?x=1"));
        assert!(valid_target("/"));
        assert!(!valid_target("/a%zz"));
        assert!(!valid_target("/a b"));
        assert!(!valid_target("v1"));
        assert!(!valid_target("/é"));
        assert!(valid_method("GET") && valid_method("get") && valid_method("M-SEARCH"));
        assert!(!valid_method("GE T") && !valid_method("") && !valid_method("G\u{0}"));
    }
}

//! A small HTTP/1.1 client over the agent's Unix socket that writes raw
//! bytes, so the fuzzer can send what no well-behaved client library would,
//! and reads answers strictly, so a malformed answer is a finding rather
//! than something a lenient parser papers over.
//!
//! ## Behavior
//! - One [`Conn`] is one socket connection; nothing is pooled or retried.
//! - Bodies are read by `content-length`, by chunked transfer coding, or to
//!   the end of the connection, as RFC 9112 section 6.3 orders it.
//! - `1xx` interim answers are skipped; answers to `HEAD` have no body.
//! - Every read is bounded by the caller's deadline ([`Conn::read_response`]).

use std::io;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// Largest answer head or body read, far above anything the agent sends.
const MAX_ANSWER: usize = 8 * 1024 * 1024;

/// How talking to the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("connect: {0}")]
    Connect(io::Error),
    #[error("io: {0}")]
    Io(#[from] io::Error),
    /// The connection ended before a whole answer head arrived.
    #[error("closed before an answer")]
    Closed,
    #[error("malformed answer: {0}")]
    Malformed(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Status line and headers of an answer.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn framing(&self, method: &str) -> Result<Framing, HttpError> {
        if method.eq_ignore_ascii_case("HEAD") || self.status == 204 || self.status == 304 {
            return Ok(Framing::Length(0));
        }
        if let Some(te) = self.header("transfer-encoding") {
            if te.to_ascii_lowercase().trim().ends_with("chunked") {
                return Ok(Framing::Chunked);
            }
            return Ok(Framing::Eof);
        }
        match self.header("content-length") {
            Some(v) => v
                .trim()
                .parse()
                .map(Framing::Length)
                .map_err(|_| HttpError::Malformed(format!("content-length {v:?}"))),
            None => Ok(Framing::Eof),
        }
    }
}

/// A whole answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub head: Head,
    pub body: Vec<u8>,
}

impl Response {
    pub fn status(&self) -> u16 {
        self.head.status
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    /// The body as JSON.
    ///
    /// # Errors
    /// When it is not JSON.
    pub fn json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

#[derive(Debug, Clone, Copy)]
enum Framing {
    Length(usize),
    Chunked,
    Eof,
}

/// One connection to a Unix socket.
#[derive(Debug)]
pub struct Conn {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

/// Bytes of a request with a JSON body (empty body: no content type).
pub fn request(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\n");
    if !body.is_empty() {
        out.push_str("content-type: application/json\r\n");
    }
    out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

impl Conn {
    /// # Errors
    /// [`HttpError::Connect`] when nothing listens on `socket`.
    pub async fn connect(socket: &Path) -> Result<Conn, HttpError> {
        let stream = UnixStream::connect(socket)
            .await
            .map_err(HttpError::Connect)?;
        let (read, write) = stream.into_split();
        Ok(Conn {
            reader: BufReader::new(read),
            writer: write,
        })
    }

    /// # Errors
    /// When the agent closed the connection.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes).await?;
        self.writer.flush().await
    }

    /// Half-closes: the agent sees the end of the request stream.
    pub async fn shutdown_write(&mut self) {
        let _ = self.writer.shutdown().await;
    }

    async fn line(&mut self, limit: &mut usize) -> Result<Option<String>, HttpError> {
        let mut line = Vec::new();
        let n = (&mut self.reader)
            .take(u64::try_from(*limit).unwrap_or(u64::MAX))
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(None);
        }
        *limit = limit.saturating_sub(n);
        if !line.ends_with(b"\r\n") {
            return Err(HttpError::Malformed(format!(
                "line not ended by CRLF: {:?}",
                String::from_utf8_lossy(&line)
            )));
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line)
            .map(Some)
            .map_err(|e| HttpError::Malformed(format!("non-UTF-8 head: {e}")))
    }

    /// Reads one answer head, skipping `1xx` interim answers.
    ///
    /// # Errors
    /// [`HttpError::Closed`] when the connection ends first; `Malformed`
    /// for anything that is not a well-formed HTTP/1.1 head.
    pub async fn read_head(&mut self) -> Result<Head, HttpError> {
        loop {
            let mut limit = MAX_ANSWER;
            let Some(status_line) = self.line(&mut limit).await? else {
                return Err(HttpError::Closed);
            };
            let mut parts = status_line.splitn(3, ' ');
            let version = parts.next().unwrap_or_default();
            if version != "HTTP/1.1" && version != "HTTP/1.0" {
                return Err(HttpError::Malformed(format!("status line {status_line:?}")));
            }
            let status: u16 = parts
                .next()
                .and_then(|s| s.parse().ok())
                .filter(|s| (100..600).contains(s))
                .ok_or_else(|| HttpError::Malformed(format!("status line {status_line:?}")))?;
            let mut headers = Vec::new();
            loop {
                let Some(line) = self.line(&mut limit).await? else {
                    return Err(HttpError::Malformed("head cut short".into()));
                };
                if line.is_empty() {
                    break;
                }
                let (name, value) = line
                    .split_once(':')
                    .ok_or_else(|| HttpError::Malformed(format!("header line {line:?}")))?;
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
            if (100..200).contains(&status) {
                continue;
            }
            return Ok(Head { status, headers });
        }
    }

    /// Reads a whole body framed as `head` says.
    ///
    /// # Errors
    /// When the connection fails or the framing is broken.
    pub async fn read_body(&mut self, head: &Head, method: &str) -> Result<Vec<u8>, HttpError> {
        match head.framing(method)? {
            Framing::Length(n) => {
                if n > MAX_ANSWER {
                    return Err(HttpError::Malformed(format!("content-length {n}")));
                }
                let mut body = vec![0; n];
                self.reader.read_exact(&mut body).await.map_err(|e| {
                    if e.kind() == io::ErrorKind::UnexpectedEof {
                        HttpError::Malformed(format!("body shorter than content-length {n}"))
                    } else {
                        HttpError::Io(e)
                    }
                })?;
                Ok(body)
            }
            Framing::Eof => {
                let mut body = Vec::new();
                (&mut self.reader)
                    .take(MAX_ANSWER as u64)
                    .read_to_end(&mut body)
                    .await?;
                Ok(body)
            }
            Framing::Chunked => {
                let mut body = Vec::new();
                while let Some(chunk) = self.read_chunk().await? {
                    body.extend_from_slice(&chunk);
                    if body.len() > MAX_ANSWER {
                        return Err(HttpError::Malformed("chunked body too large".into()));
                    }
                }
                Ok(body)
            }
        }
    }

    /// One chunk of a chunked body; `None` after the last one (and its
    /// trailers).
    async fn read_chunk(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        let mut limit = 1024;
        let Some(size_line) = self.line(&mut limit).await? else {
            return Err(HttpError::Malformed("chunked body cut short".into()));
        };
        let size_text = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| HttpError::Malformed(format!("chunk size {size_line:?}")))?;
        if size == 0 {
            // Trailers, then the empty line.
            let mut limit = MAX_ANSWER;
            loop {
                match self.line(&mut limit).await? {
                    Some(line) if line.is_empty() => return Ok(None),
                    Some(_) => {}
                    None => return Err(HttpError::Malformed("trailers cut short".into())),
                }
            }
        }
        if size > MAX_ANSWER {
            return Err(HttpError::Malformed(format!("chunk of {size} bytes")));
        }
        let mut chunk = vec![0; size + 2];
        self.reader.read_exact(&mut chunk).await.map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                HttpError::Malformed("chunk cut short".into())
            } else {
                HttpError::Io(e)
            }
        })?;
        if !chunk.ends_with(b"\r\n") {
            return Err(HttpError::Malformed("chunk not ended by CRLF".into()));
        }
        chunk.truncate(size);
        Ok(Some(chunk))
    }

    /// Reads one whole answer to a request made with `method`, within `limit`.
    ///
    /// # Errors
    /// As [`Conn::read_head`] and [`Conn::read_body`], or `Timeout`.
    pub async fn read_response(
        &mut self,
        method: &str,
        limit: Duration,
    ) -> Result<Response, HttpError> {
        let read = async {
            let head = self.read_head().await?;
            let body = self.read_body(&head, method).await?;
            Ok(Response { head, body })
        };
        tokio::time::timeout(limit, read)
            .await
            .unwrap_or(Err(HttpError::Timeout(limit)))
    }

    /// After a `200` head with a chunked body: the body as a stream of lines.
    pub fn into_lines(self) -> Lines {
        Lines {
            conn: self,
            buffer: Vec::new(),
            done: false,
        }
    }
}

/// The lines of a chunked body (a hold's NDJSON events) as they arrive.
#[derive(Debug)]
pub struct Lines {
    conn: Conn,
    buffer: Vec<u8>,
    done: bool,
}

impl Lines {
    /// The next line without its newline; `Ok(None)` when the body ended
    /// cleanly.
    ///
    /// # Errors
    /// When the connection fails or the chunked framing is broken: for a
    /// hold, the agent went away without a last event.
    pub async fn next_line(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                line.pop();
                return Ok(Some(line));
            }
            if self.done {
                return Ok(None);
            }
            match self.conn.read_chunk().await? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => self.done = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer_of(raw: &'static [u8], method: &str) -> Result<Response, HttpError> {
        let (a, mut b) = UnixStream::pair().unwrap();
        tokio::spawn(async move {
            b.write_all(raw).await.unwrap();
            b.shutdown().await.unwrap();
        });
        let (read, write) = a.into_split();
        let mut conn = Conn {
            reader: BufReader::new(read),
            writer: write,
        };
        conn.read_response(method, Duration::from_secs(5)).await
    }

    #[tokio::test]
    async fn reads_length_chunked_and_interim_answers() {
        let r = answer_of(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
            "POST",
        )
        .await
        .unwrap();
        assert_eq!((r.status(), r.body.as_slice()), (200, &b"{}"[..]));
        let r = answer_of(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nab\n\r\n2\r\nc\n\r\n0\r\n\r\n",
            "POST",
        )
        .await
        .unwrap();
        assert_eq!(r.body, b"ab\nc\n");
        let r = answer_of(b"HTTP/1.1 405 x\r\ncontent-length: 9\r\n\r\n", "HEAD")
            .await
            .unwrap();
        assert!(r.body.is_empty(), "HEAD answers have no body");
    }

    #[tokio::test]
    async fn broken_answers_are_errors_not_guesses() {
        assert!(matches!(
            answer_of(b"", "GET").await,
            Err(HttpError::Closed)
        ));
        assert!(matches!(
            answer_of(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab", "GET").await,
            Err(HttpError::Malformed(_))
        ));
        assert!(matches!(
            answer_of(b"SSH-2.0 hello\r\n\r\n", "GET").await,
            Err(HttpError::Malformed(_))
        ));
    }
}

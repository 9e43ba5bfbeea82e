//! RESP framing for a connection-keeping link: where each request and
//! each reply ends, so that the link forwards only whole ones and can
//! answer, one error each, the requests a lost upstream never answered.
//! A client that pipelines (one multiplexed connection, as redis-rs's)
//! matches replies to requests by their order: a reply lost without an
//! error in its place would hand every later request the answer of the
//! one before it.

/// The bytes were not RESP: the link closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not RESP at byte {at}")]
pub struct NotResp {
    pub at: usize,
}

/// Which way a [`Framer`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Client to master: arrays of bulk strings, or inline commands.
    Requests,
    /// Master to client: any RESP2 or RESP3 value.
    Replies,
}

/// The whole frames a read completed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Frames {
    /// The frames, back to back, as read.
    pub bytes: Vec<u8>,
    /// How many of them count: requests, or replies that answer one (a
    /// RESP3 push answers nothing).
    pub count: u64,
}

/// Buffers one direction's bytes and hands them on frame by frame.
#[derive(Debug)]
pub struct Framer {
    side: Side,
    buf: Vec<u8>,
    /// A `SUBSCRIBE`, `PSUBSCRIBE` or `SSUBSCRIBE` went through: the
    /// connection gets messages no request asked for, and a subscription
    /// cannot be carried over to another upstream connection.
    subscribed: bool,
}

impl Framer {
    pub fn requests() -> Framer {
        Framer {
            side: Side::Requests,
            buf: Vec::new(),
            subscribed: false,
        }
    }

    pub fn replies() -> Framer {
        Framer {
            side: Side::Replies,
            buf: Vec::new(),
            subscribed: false,
        }
    }

    /// Whether a subscribe command went through (requests only).
    pub fn subscribed(&self) -> bool {
        self.subscribed
    }

    /// Forgets a partial frame (the reply the lost upstream was sending).
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// Takes `bytes` in; returns the frames they completed, the rest kept.
    ///
    /// # Errors
    /// When the bytes are not RESP (nothing is taken then).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Frames, NotResp> {
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        let mut count = 0;
        while at < self.buf.len() {
            let Some(end) = frame_end(&self.buf, at, self.side)? else {
                break;
            };
            let frame = &self.buf[at..end];
            match self.side {
                Side::Requests => {
                    count += 1;
                    if is_subscribe(frame) {
                        self.subscribed = true;
                    }
                }
                Side::Replies if frame.first() != Some(&b'>') => count += 1,
                Side::Replies => {}
            }
            at = end;
        }
        let rest = self.buf.split_off(at);
        let bytes = std::mem::replace(&mut self.buf, rest);
        Ok(Frames { bytes, count })
    }
}

/// Nesting deeper than this is not RESP any master sends.
const MAX_DEPTH: usize = 64;

/// Where the frame at `at` ends, `None` while incomplete.
fn frame_end(buf: &[u8], at: usize, side: Side) -> Result<Option<usize>, NotResp> {
    match buf[at] {
        b'*' | b'$' => value_end(buf, at, 0),
        // An inline command: one line.
        _ if side == Side::Requests => Ok(line_end(buf, at, b"\n")),
        _ => value_end(buf, at, 0),
    }
}

/// The index after the `\r\n` (or `sep`) ending the line at `at`.
fn line_end(buf: &[u8], at: usize, sep: &[u8]) -> Option<usize> {
    buf[at..]
        .windows(sep.len())
        .position(|w| w == sep)
        .map(|i| at + i + sep.len())
}

/// The signed number on the header line at `at` (after its type byte),
/// and the index after the line.
fn header(buf: &[u8], at: usize) -> Result<Option<(i64, usize)>, NotResp> {
    let Some(end) = line_end(buf, at, b"\r\n") else {
        return Ok(None);
    };
    std::str::from_utf8(&buf[at + 1..end - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .map(|n| Some((n, end)))
        .ok_or(NotResp { at })
}

fn value_end(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, NotResp> {
    if at >= buf.len() {
        return Ok(None);
    }
    if depth > MAX_DEPTH {
        return Err(NotResp { at });
    }
    match buf[at] {
        // Simple string, error, integer, null, double, boolean, big number.
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(line_end(buf, at, b"\r\n")),
        // Bulk string, blob error, verbatim string.
        b'$' | b'!' | b'=' => {
            let Some((len, body)) = header(buf, at)? else {
                return Ok(None);
            };
            if len < 0 {
                return Ok(Some(body));
            }
            let end = body + usize::try_from(len).map_err(|_| NotResp { at })? + 2;
            Ok((end <= buf.len()).then_some(end))
        }
        // Array, set, push; map and attribute (two values an entry).
        kind @ (b'*' | b'~' | b'>' | b'%' | b'|') => {
            let Some((n, mut next)) = header(buf, at)? else {
                return Ok(None);
            };
            let per = if matches!(kind, b'%' | b'|') { 2 } else { 1 };
            for _ in 0..n.max(0) * per {
                match value_end(buf, next, depth + 1)? {
                    Some(end) => next = end,
                    None => return Ok(None),
                }
            }
            // An attribute comes before the value it describes.
            if kind == b'|' {
                return value_end(buf, next, depth + 1);
            }
            Ok(Some(next))
        }
        _ => Err(NotResp { at }),
    }
}

/// Whether a request frame is a subscribe command.
fn is_subscribe(frame: &[u8]) -> bool {
    let name: Vec<u8> = if frame.first() == Some(&b'*') {
        // `*<n>\r\n$<len>\r\n<name>\r\n...`
        let Ok(Some((_, first))) = header(frame, 0) else {
            return false;
        };
        match header(frame, first) {
            Ok(Some((len, body))) if len > 0 => {
                let end = (body + len as usize).min(frame.len());
                frame[body..end].to_vec()
            }
            _ => return false,
        }
    } else {
        frame
            .split(|b| b.is_ascii_whitespace())
            .next()
            .unwrap_or_default()
            .to_vec()
    };
    let name = name.to_ascii_uppercase();
    matches!(
        name.as_slice(),
        b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_handed_on_whole_and_counted() {
        let mut f = Framer::requests();
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        let first = f.push(&set[..10]).unwrap();
        assert_eq!(first, Frames::default(), "half a request waits");
        let rest = [&set[10..], b"PING\r\n*1\r\n$4\r\nPI".as_slice()].concat();
        let done = f.push(&rest).unwrap();
        assert_eq!(done.count, 2);
        assert_eq!(done.bytes, [set.as_slice(), b"PING\r\n"].concat());
        let last = f.push(b"NG\r\n").unwrap();
        assert_eq!(
            (last.count, last.bytes.as_slice()),
            (1, b"*1\r\n$4\r\nPING\r\n".as_slice())
        );
        assert!(!f.subscribed());
        f.push(b"*2\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n").unwrap();
        assert!(f.subscribed(), "a subscriber is known by its command");
    }

    #[test]
    fn replies_of_every_type_are_counted_and_pushes_are_not() {
        let mut f = Framer::replies();
        let replies: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":42\r\n",
            b"$-1\r\n",
            b"$5\r\nhe\r\nl\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"*-1\r\n",
            b"%1\r\n+k\r\n+v\r\n",
            b"_\r\n",
            b"|1\r\n+ttl\r\n:3\r\n+OK\r\n",
        ];
        let all = replies.concat();
        // Byte by byte: every split point is a partial frame once.
        let mut out = Frames::default();
        for b in &all {
            let got = f.push(std::slice::from_ref(b)).unwrap();
            out.bytes.extend(got.bytes);
            out.count += got.count;
        }
        assert_eq!(out.bytes, all);
        assert_eq!(out.count, replies.len() as u64);
        let push = f.push(b">2\r\n+message\r\n+x\r\n").unwrap();
        assert_eq!(push.count, 0, "a push answers no request");
        assert!(Framer::replies().push(b"?\r\n").is_err());
        let mut partial = Framer::replies();
        partial.push(b"$10\r\nabc").unwrap();
        partial.clear();
        assert_eq!(partial.push(b"+OK\r\n").unwrap().count, 1);
    }
}

//! Resource names and the keys they map to.

use std::fmt;

/// Characters refused in resource names: glob patterns would corrupt the
/// `SCAN MATCH prefix*` scans over lock keys.
const GLOB: &[u8] = b"*?[]\\";

/// Longest resource name, in bytes.
pub const MAX_RESOURCE_LEN: usize = 256;

/// A validated resource name: 1 to 256 bytes of visible ASCII without glob
/// characters, and the kind of lock its key holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    /// The whole name: the key's, after the prefix.
    name: String,
    kind: Kind,
    /// The length of the name the client gave: a permit's semaphore's or
    /// an election's (the whole name for a lock).
    named: usize,
}

/// What a resource's lock is: a lock, a semaphore's permit or an
/// election's leadership. Known from how the resource was made
/// ([`Resource::new`], [`Resource::permit`], [`Resource::election`]),
/// never read back from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Lock,
    /// A lock held by a reader (`"mode": "shared"`): the lock's key, shared
    /// with any number of readers and no writer.
    Shared,
    Permit,
    Leadership,
}

impl Kind {
    /// Every kind, as the metrics' `kind` label takes them.
    pub const ALL: [Kind; 4] = [Kind::Lock, Kind::Shared, Kind::Permit, Kind::Leadership];

    /// Its name in traces (`redlock.kind`), metrics and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Shared => "shared",
            Kind::Permit => "permit",
            Kind::Leadership => "leadership",
        }
    }
}

/// Why a resource name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("resource name is empty")]
    Empty,
    #[error("resource name is {0} bytes; at most {MAX_RESOURCE_LEN} are allowed")]
    TooLong(usize),
    #[error("resource name is not valid percent-encoded UTF-8")]
    BadEncoding,
    #[error(
        "resource name has a '%' at offset {0} not followed by two hex digits; encode '%' as %25"
    )]
    BadEscape(usize),
    #[error("resource name has byte {0:#04x} at offset {1}; use visible ASCII without *?[]\\")]
    BadByte(u8, usize),
}

impl Resource {
    /// Validates a resource name that is already decoded.
    ///
    /// # Errors
    /// When the name is empty, too long, or has a byte outside the allowed set.
    pub fn new(name: &str) -> Result<Resource, ResourceError> {
        if name.is_empty() {
            return Err(ResourceError::Empty);
        }
        if name.len() > MAX_RESOURCE_LEN {
            return Err(ResourceError::TooLong(name.len()));
        }
        if let Some((i, b)) = name
            .bytes()
            .enumerate()
            .find(|&(_, b)| !b.is_ascii_graphic() || GLOB.contains(&b))
        {
            return Err(ResourceError::BadByte(b, i));
        }
        Ok(Resource::lock(name.to_string()))
    }

    fn lock(name: String) -> Resource {
        Resource {
            named: name.len(),
            name,
            kind: Kind::Lock,
        }
    }

    /// Decodes and validates one percent-encoded path segment. A `%` not
    /// followed by two hex digits is refused, never kept as it is: else
    /// `a%ZZ` and `a%25ZZ` would name one resource.
    ///
    /// # Errors
    /// As [`Resource::new`], plus bad percent-encoding.
    pub fn from_path_segment(segment: &str) -> Result<Resource, ResourceError> {
        let decoded = percent_decode(segment).map_err(|e| match e {
            Undecodable::Escape(at) => ResourceError::BadEscape(at),
            Undecodable::Utf8 => ResourceError::BadEncoding,
        })?;
        Resource::new(&decoded)
    }

    /// The fleet's leak-scan lock ([`redlock_wire::keys::LEAK_SCAN_SUFFIX`],
    /// see `crate::scanner`): a name with spaces, which [`Resource::new`]
    /// refuses, so no client can take, look up or force release it; its key
    /// `<prefix> leak scan` is one of the agents' bookkeeping keys, which
    /// listings and the scan itself skip.
    pub fn leak_scan() -> Resource {
        Resource::lock(redlock_wire::keys::LEAK_SCAN_SUFFIX.to_string())
    }

    /// Permit `index` of the semaphore `name`: `<name> permit <index>`, a
    /// lock of its own that no client can name (it has spaces, which
    /// [`Resource::new`] refuses), listed and scanned as any lock.
    pub fn permit(name: &Resource, index: u32) -> Resource {
        Resource {
            name: format!("{} permit {index}", name.name),
            kind: Kind::Permit,
            named: name.name.len(),
        }
    }

    /// The lock of the election `name`: `<name> election`, held by its
    /// leader; no client can name it either.
    pub fn election(name: &Resource) -> Resource {
        Resource {
            name: format!("{} election", name.name),
            kind: Kind::Leadership,
            named: name.name.len(),
        }
    }

    /// The same lock taken by a reader: its key, queue and release channel
    /// are the lock's ([`Kind::Shared`]).
    pub fn shared(&self) -> Resource {
        Resource {
            kind: Kind::Shared,
            ..self.clone()
        }
    }

    /// What its lock is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The name the client gave: the lock's, the semaphore's or the
    /// election's.
    pub fn named(&self) -> &str {
        &self.name[..self.named]
    }

    /// What this resource is, for messages: `the lock on x`, `permit 2 of
    /// semaphore x` or `the leadership of election x`.
    pub fn what(&self) -> String {
        match self.kind {
            Kind::Lock => format!("the lock on {}", self.name),
            Kind::Shared => format!("the shared lock on {}", self.name),
            Kind::Permit => format!(
                "permit {} of semaphore {}",
                &self.name[self.queue().len() + 1..],
                self.named()
            ),
            Kind::Leadership => format!("the leadership of election {}", self.named()),
        }
    }

    /// The name of this resource's waiters and release channel: its own,
    /// or for a permit its semaphore's (`<name> permit`), so a release of
    /// any permit wakes the semaphore's one queue.
    pub fn queue(&self) -> &str {
        match self.kind {
            Kind::Permit => &self.name[..self.named + " permit".len()],
            Kind::Lock | Kind::Shared | Kind::Leadership => &self.name,
        }
    }

    /// The semaphore whose permit this is, or `None` for any other lock.
    pub fn semaphore(&self) -> Option<&str> {
        (self.kind == Kind::Permit).then(|| self.named())
    }

    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The lock key on every master.
    pub fn key(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.name)
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Why [`percent_decode`] refused a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecodable {
    /// A `%` at this byte offset without two hex digits after it.
    Escape(usize),
    /// The decoded bytes are not UTF-8.
    Utf8,
}

/// Decodes percent-encoded `text` (RFC 3986), refusing a `%` that does not
/// start an escape, where a lenient decoder keeps it as it is and so gives
/// two encodings one meaning.
///
/// # Errors
/// [`Undecodable`]: where the stray `%` is, or that the bytes are not UTF-8.
pub fn percent_decode(text: &str) -> Result<String, Undecodable> {
    let bytes = text.as_bytes();
    if let Some(at) = (0..bytes.len()).find(|&i| {
        bytes[i] == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    }) {
        return Err(Undecodable::Escape(at));
    }
    percent_encoding::percent_decode(bytes)
        .decode_utf8()
        .map(|d| d.into_owned())
        .map_err(|_| Undecodable::Utf8)
}

/// [`Resource::queue`] of a resource's name as another agent announced it
/// (a force release's message): a name heard on a channel carries no
/// kind, and a permit's is the one with a space and a number after
/// ` permit`, which no client can name.
pub fn queue_of(resource: &str) -> &str {
    match resource.rsplit_once(' ') {
        Some((head, index))
            if head.ends_with(" permit") && index.bytes().all(|b| b.is_ascii_digit()) =>
        {
            head
        }
        _ => resource,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_share_their_semaphores_queue_and_no_client_can_name_them() {
        let pay = Resource::new("pay").unwrap();
        let permit = Resource::permit(&pay, 3);
        assert_eq!(permit.as_str(), "pay permit 3");
        assert_eq!(permit.queue(), "pay permit");
        assert_eq!(permit.semaphore(), Some("pay"));
        assert_eq!(pay.semaphore(), None);
        assert_eq!(Resource::election(&pay).semaphore(), None);
        assert_eq!(Resource::permit(&pay, 0).queue(), "pay permit");
        assert_eq!(pay.queue(), "pay");
        let election = Resource::election(&pay);
        assert_eq!(election.queue(), "pay election");
        assert!(Resource::new(permit.as_str()).is_err());
        assert!(Resource::new(election.as_str()).is_err());
        assert_eq!(queue_of(permit.as_str()), "pay permit");
        assert_eq!(queue_of(election.as_str()), "pay election");
        assert_eq!(permit.kind(), Kind::Permit);
        assert_eq!(election.kind(), Kind::Leadership);
        assert_eq!(pay.kind(), Kind::Lock);
        assert_eq!(election.named(), "pay");
    }

    #[test]
    fn messages_name_a_permit_or_a_leadership_as_what_it_is() {
        let big = Resource::new("big").unwrap();
        assert_eq!(
            Resource::permit(&big, 2).what(),
            "permit 2 of semaphore big"
        );
        assert_eq!(
            Resource::election(&big).what(),
            "the leadership of election big"
        );
        assert_eq!(big.what(), "the lock on big");
    }

    #[test]
    fn accepts_visible_ascii() {
        assert_eq!(
            Resource::new("orders:42/eu").unwrap().as_str(),
            "orders:42/eu"
        );
        assert_eq!(
            Resource::from_path_segment("a%2Fb%3Ac")
                .unwrap()
                .key("redlock:"),
            "redlock:a/b:c"
        );
        assert!(Resource::new(&"x".repeat(MAX_RESOURCE_LEN)).is_ok());
    }

    #[test]
    fn refuses_what_would_break_keys_or_scans() {
        assert_eq!(Resource::new(""), Err(ResourceError::Empty));
        assert_eq!(
            Resource::new(&"x".repeat(MAX_RESOURCE_LEN + 1)),
            Err(ResourceError::TooLong(257))
        );
        for bad in ["a*", "a?", "[a]", "a\\b", "a b", "tab\t", "é"] {
            assert!(Resource::new(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(
            Resource::from_path_segment("a%20b"),
            Err(ResourceError::BadByte(b' ', 1))
        );
        assert_eq!(
            Resource::from_path_segment("%ff"),
            Err(ResourceError::BadEncoding)
        );
    }

    /// A stray `%` is refused, so each resource has one encoding per
    /// spelling of its bytes: `a%ZZ` is not `a%25ZZ`'s resource.
    #[test]
    fn refuses_a_percent_that_starts_no_escape() {
        for (segment, at) in [
            ("a%ZZ", 1),
            ("%", 0),
            ("ab%4", 2),
            ("%2", 0),
            ("a%2Fb%g1", 5),
        ] {
            assert_eq!(
                Resource::from_path_segment(segment),
                Err(ResourceError::BadEscape(at)),
                "{segment}"
            );
        }
        assert_eq!(
            Resource::from_path_segment("a%25ZZ").unwrap().as_str(),
            "a%ZZ"
        );
        assert_eq!(percent_decode("%e2%82%ac"), Ok("€".to_string()));
        assert_eq!(percent_decode("%ff"), Err(Undecodable::Utf8));
    }

    #[test]
    fn no_client_can_name_the_leak_scan_lock() {
        let reserved = Resource::leak_scan();
        assert!(Resource::new(reserved.as_str()).is_err());
        assert!(Resource::from_path_segment("%20leak%20scan").is_err());
        let key = reserved.key("redlock:");
        assert_eq!(key, "redlock: leak scan");
        assert!(redlock_wire::keys::is_bookkeeping("redlock:", &key));
    }
}

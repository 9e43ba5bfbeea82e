//! Tokens kept to the pod (or uid) that acquired them, for an agent that
//! serves many applications: one per node, reached by every pod on it
//! (`socket.isolate`).
//!
//! With an agent per application a token is a bearer secret, and that is
//! enough: only that application reaches the socket. An agent shared by
//! the pods of a node keeps, with each grant, who asked for it (the peer's
//! uid and, isolating by pod, its pod) and serves a call that carries a
//! token (extend, release, a re-entry) only when it comes from the same
//! pod (or uid) as the grant, through this agent, while the agent still
//! knows the grant.
//!
//! ## What a refusal tells
//! Nothing about other pods' locks: a token that is not a grant held here
//! for the caller's pod is refused with one answer (403 `forbidden`,
//! [`LockError::Isolated`]), whether it is another pod's, was never
//! granted, was released, or ran out and was forgotten, and before any
//! master is asked, so that the answer and its timing are the same. The
//! cost: a pod's own token that the agent no longer knows (released
//! already, or granted before the agent restarted) gets that 403 too,
//! where an agent without isolation would ask the masters; such a lock
//! runs out by its TTL.
//!
//! Listings never show a token; they show each holder's pod.

use std::fmt;

use super::{Grants, Holder, LockError, Locks};
use crate::config::Isolate;
use crate::redlock::{Resource, Store, Token};

/// A pod's UID as the kubelet names the pod's cgroup: a UUID
/// (`8-4-4-4-12` hex digits; the systemd cgroup driver writes `_` for `-`),
/// or 32 hex digits for a static pod. Shown as the kubelet wrote it, with
/// dashes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PodUid {
    value: u128,
    dashed: bool,
}

impl PodUid {
    /// The UID in `text`: a UUID with `-` or `_` between its groups, or 32
    /// hex digits; `None` for anything else.
    pub fn parse(text: &str) -> Option<PodUid> {
        let bytes = text.as_bytes();
        let dashed = match bytes.len() {
            36 => {
                let separators = [8, 13, 18, 23];
                if !separators.iter().all(|&i| matches!(bytes[i], b'-' | b'_')) {
                    return None;
                }
                true
            }
            32 => false,
            _ => return None,
        };
        let digits: String = text.chars().filter(|c| !matches!(c, '-' | '_')).collect();
        if digits.len() != 32 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let value = u128::from_str_radix(&digits, 16).ok()?;
        Some(PodUid { value, dashed })
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = format!("{:032x}", self.value);
        if !self.dashed {
            return f.write_str(&hex);
        }
        write!(
            f,
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    }
}

impl fmt::Debug for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PodUid({self})")
    }
}

/// A container's ID in its runtime: 64 hex digits in every runtime the
/// kubelet drives (containerd, CRI-O, Docker).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContainerId([u8; 32]);

impl ContainerId {
    /// The ID in `text`, exactly 64 hex digits; `None` for anything else.
    pub fn parse(text: &str) -> Option<ContainerId> {
        let mut id = [0u8; 32];
        hex::decode_to_slice(text, &mut id).ok()?;
        Some(ContainerId(id))
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContainerId({self})")
    }
}

/// The pod a process runs in, and its container when the cgroup names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pod {
    pub uid: PodUid,
    pub container: Option<ContainerId>,
}

/// Whether `caller` counts as the holder of a grant asked for by `holder`
/// under `isolate`: always without isolation; else the same uid, or the
/// same pod (any of its containers). Unknown on either side never matches.
pub fn same_holder(isolate: Isolate, holder: Option<&Holder>, caller: Option<&Holder>) -> bool {
    match isolate {
        Isolate::None => true,
        Isolate::Uid => matches!((holder, caller), (Some(h), Some(c)) if h.uid == c.uid),
        Isolate::Pod => matches!(
            (holder.and_then(|h| h.pod), caller.and_then(|c| c.pod)),
            (Some(h), Some(c)) if h.uid == c.uid
        ),
    }
}

impl<M: Store> Locks<M> {
    /// Refuses `caller` a call with `token` on `resource` unless, under
    /// `socket.isolate`, the token is a grant held here for the caller's
    /// pod (or uid). See the module docs for why unknown tokens get the
    /// same answer.
    ///
    /// # Errors
    /// [`LockError::Isolated`].
    pub(super) fn check_isolation(
        &self,
        resource: &Resource,
        token: &Token,
        caller: Option<&Holder>,
    ) -> Result<(), LockError> {
        let isolate = self.rules.isolate;
        if isolate == Isolate::None
            || self
                .grants
                .held_for(resource.as_str(), token.as_str(), isolate, caller)
        {
            return Ok(());
        }
        Err(LockError::Isolated {
            resource: resource.clone(),
            isolate,
        })
    }
}

impl Grants {
    /// Whether the grant of `resource` held here with `token` was asked for
    /// by `caller`'s pod (or uid), as `isolate` tells them apart.
    pub fn held_for(
        &self,
        resource: &str,
        token: &str,
        isolate: Isolate,
        caller: Option<&Holder>,
    ) -> bool {
        self.lock()
            .get(resource)
            .and_then(|entries| entries.iter().find(|e| e.token == token))
            .is_some_and(|e| same_holder(isolate, e.holder.as_ref(), caller))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_uids_parse_with_dashes_underscores_or_none_and_show_with_dashes() {
        let dashed = PodUid::parse("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").unwrap();
        let underscored = PodUid::parse("0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0").unwrap();
        assert_eq!(dashed, underscored);
        assert_eq!(
            underscored.to_string(),
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
        );
        let upper = PodUid::parse("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0").unwrap();
        assert_eq!(upper, dashed);
        let static_pod = PodUid::parse("e3b0c44298fc1c149afbf4c8996fb924").unwrap();
        assert_eq!(static_pod.to_string(), "e3b0c44298fc1c149afbf4c8996fb924");
        for bad in [
            "",
            "1234",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg",
            "0f1e2d3c4-b5a-6978-8796-a5b4c3d2e1f0",
            "+f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
            "e3b0c44298fc1c149afbf4c8996fb92",
        ] {
            assert_eq!(PodUid::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn container_ids_are_64_hex_digits() {
        let text = "4a3b2c1d".repeat(8);
        assert_eq!(ContainerId::parse(&text).unwrap().to_string(), text);
        assert_eq!(ContainerId::parse(&text[..63]), None);
        assert_eq!(ContainerId::parse(&format!("{}z", &text[..63])), None);
    }

    fn holder(uid: u32, pod: Option<&str>) -> Holder {
        Holder {
            pid: Some(1),
            uid,
            gid: uid,
            pod: pod.map(|p| Pod {
                uid: PodUid::parse(p).unwrap(),
                container: None,
            }),
        }
    }

    #[test]
    fn holders_are_told_apart_by_uid_or_pod_and_unknown_never_matches() {
        let a = "00000000-0000-0000-0000-00000000000a";
        let b = "00000000-0000-0000-0000-00000000000b";
        let (a1, a2, b1) = (holder(1, Some(a)), holder(2, Some(a)), holder(1, Some(b)));
        let nowhere = holder(1, None);
        assert!(same_holder(Isolate::None, Some(&a1), Some(&b1)));
        assert!(same_holder(Isolate::None, Some(&a1), None));
        assert!(same_holder(Isolate::Uid, Some(&a1), Some(&b1)));
        assert!(!same_holder(Isolate::Uid, Some(&a1), Some(&a2)));
        assert!(!same_holder(Isolate::Uid, Some(&a1), None));
        assert!(
            same_holder(Isolate::Pod, Some(&a1), Some(&a2)),
            "one pod, two uids"
        );
        assert!(!same_holder(Isolate::Pod, Some(&a1), Some(&b1)));
        assert!(!same_holder(Isolate::Pod, Some(&nowhere), Some(&nowhere)));
        assert!(!same_holder(Isolate::Pod, None, Some(&a1)));
    }
}

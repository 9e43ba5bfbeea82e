//! What a request asks for: [`Options<R>`], one builder for every kind of
//! request, over the wire body `R` it sends. Each option is declared once,
//! here, and offered on the kinds whose body carries its field: `ttl` and
//! `owner` on all of them, `wait` and `fence` on the bodies that take a
//! lock or a permit in line, `max_hold` on the streams, and so on. A
//! setter a kind has no field for does not compile:
//!
//! ```compile_fail,E0599
//! use std::time::Duration;
//! use redlock_client::CampaignOptions;
//!
//! // A campaign waits in line for as long as its stream is open.
//! let options = CampaignOptions::new().wait(Duration::from_secs(5));
//! ```
//!
//! Each kind has its alias: [`AcquireOptions`], [`HoldOptions`],
//! [`PermitOptions`], [`PermitHoldOptions`] and [`CampaignOptions`].
//! Which fields a body carries is said by the sealed traits below,
//! implemented for the wire's request bodies only; a new kind of request
//! is its wire body, a line in each list of bodies that carry a field,
//! and an alias.

use std::time::Duration;

use redlock_wire::{
    AcquireRequest, CampaignRequest, HoldRequest, Mode, OnDisconnect, PermitHoldRequest,
    PermitRequest,
};

use crate::millis;

/// What a request asks for, as the wire body `R` it sends, built with
/// durations. Unset fields take the agent's defaults (`lock.default_ttl`,
/// one attempt, no owner, `lock.max_hold`).
///
/// Used through its aliases, one per kind of request: [`AcquireOptions`]
/// for [`crate::Client::acquire`], [`HoldOptions`] for
/// [`crate::Client::hold`] and [`crate::Client::lock`], [`PermitOptions`],
/// [`PermitHoldOptions`] and [`CampaignOptions`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options<R> {
    request: R,
}

/// What [`crate::Client::acquire`] asks for: the wire's `acquire` body.
pub type AcquireOptions = Options<AcquireRequest>;

/// What [`crate::Client::hold`] and [`crate::Client::lock`] ask for: an
/// acquire's options, plus a bound on how long the hold may last and what
/// happens to the lock if the connection closes.
pub type HoldOptions = Options<HoldRequest>;

/// What [`crate::Client::acquire_permit`] asks for: the wire's semaphore
/// `acquire` body. The limit is required: `PermitOptions::new(limit)`.
pub type PermitOptions = Options<PermitRequest>;

/// What [`crate::Client::hold_permit`] asks for: a permit's options, plus
/// a hold's bound and what happens to the permit if the connection closes.
pub type PermitHoldOptions = Options<PermitHoldRequest>;

/// What [`crate::Client::campaign`] asks for. Unset fields take the
/// agent's defaults (`lock.default_ttl`, `lock.max_hold`, no owner, no
/// value).
pub type CampaignOptions = Options<CampaignRequest>;

mod sealed {
    /// Only the wire's request bodies carry the fields [`super::Options`]
    /// sets.
    pub trait Sealed {}
}

/// A body that asks for a grant (a lock, a permit or a leadership): a TTL
/// and an owner label. Every kind.
pub trait GrantRequest: sealed::Sealed {
    #[doc(hidden)]
    fn ttl_ms(&mut self) -> &mut Option<u64>;
    #[doc(hidden)]
    fn owner(&mut self) -> &mut Option<String>;
}

/// A body that takes a lock or a permit in line (the wire's
/// `lock_request!` bodies): a bound on the wait, and a fence on request.
/// Not a campaign: it waits for as long as its stream is open, and its
/// term is always its fence.
pub trait LockRequest: GrantRequest {
    #[doc(hidden)]
    fn wait_ms(&mut self) -> &mut Option<u64>;
    #[doc(hidden)]
    fn fence(&mut self) -> &mut bool;
}

/// A body that keeps its grant on a stream the agent renews: holds and
/// campaigns, bounded in time.
pub trait StreamRequest: sealed::Sealed {
    #[doc(hidden)]
    fn max_hold_ms(&mut self) -> &mut Option<u64>;
}

/// A lock or a permit held on a stream: what happens to it when the
/// stream's connection closes.
pub trait LockHoldRequest: LockRequest + StreamRequest {
    #[doc(hidden)]
    fn on_disconnect(&mut self) -> &mut OnDisconnect;
}

/// A body that can re-enter a lock this process holds, by its token.
pub trait ReenterRequest: sealed::Sealed {
    #[doc(hidden)]
    fn token(&mut self) -> &mut Option<String>;
}

/// A body that takes a lock in a mode: exclusive, or shared by readers.
pub trait ModeRequest: sealed::Sealed {
    #[doc(hidden)]
    fn mode(&mut self) -> &mut Mode;
}

/// A body for a permit of a semaphore: the semaphore's limit.
pub trait SemaphoreRequest: sealed::Sealed + Default {
    #[doc(hidden)]
    fn limit(&mut self) -> &mut u32;
}

/// Implements a field trait for every body that carries its fields: one
/// list of bodies per trait.
macro_rules! carried_by {
    (@impl $trait:ident for $body:ty { $($field:ident: $ty:ty),+ }) => {
        impl $trait for $body {
            $(
                fn $field(&mut self) -> &mut $ty {
                    &mut self.$field
                }
            )+
        }
    };
    ($trait:ident: $($body:ty),+ => $fields:tt) => {
        $(carried_by!(@impl $trait for $body $fields);)+
    };
}

impl sealed::Sealed for AcquireRequest {}
impl sealed::Sealed for HoldRequest {}
impl sealed::Sealed for PermitRequest {}
impl sealed::Sealed for PermitHoldRequest {}
impl sealed::Sealed for CampaignRequest {}

carried_by!(GrantRequest:
    AcquireRequest, HoldRequest, PermitRequest, PermitHoldRequest, CampaignRequest
    => { ttl_ms: Option<u64>, owner: Option<String> });
carried_by!(LockRequest:
    AcquireRequest, HoldRequest, PermitRequest, PermitHoldRequest
    => { wait_ms: Option<u64>, fence: bool });
carried_by!(StreamRequest:
    HoldRequest, PermitHoldRequest, CampaignRequest
    => { max_hold_ms: Option<u64> });
carried_by!(LockHoldRequest:
    HoldRequest, PermitHoldRequest
    => { on_disconnect: OnDisconnect });
carried_by!(ReenterRequest:
    AcquireRequest, HoldRequest
    => { token: Option<String> });
carried_by!(ModeRequest:
    AcquireRequest, HoldRequest
    => { mode: Mode });
carried_by!(SemaphoreRequest:
    PermitRequest, PermitHoldRequest
    => { limit: u32 });

impl<R> Options<R> {
    /// The body these options send.
    pub fn request(&self) -> &R {
        &self.request
    }
}

impl<R: GrantRequest> Options<R> {
    /// The grant's TTL. The agent accepts twice `lock.node_timeout` (100
    /// ms by default) to `lock.max_ttl`; otherwise `ttl_out_of_range`. A
    /// hold or a leadership is renewed every third of it, so a holder that
    /// vanishes is replaced after at most this long.
    pub fn ttl(mut self, ttl: Duration) -> Options<R> {
        *self.request.ttl_ms() = Some(millis(ttl));
        self
    }

    /// A label operators see beside the lock, permit or leadership (1 to
    /// 128 printable ASCII).
    pub fn owner(mut self, owner: impl Into<String>) -> Options<R> {
        *self.request.owner() = Some(owner.into());
        self
    }
}

impl<R: LockRequest> Options<R> {
    /// How long the agent may keep trying while the lock (or every
    /// permit) is taken.
    pub fn wait(mut self, wait: Duration) -> Options<R> {
        *self.request.wait_ms() = Some(millis(wait));
        self
    }

    /// Ask for a fencing token ([`crate::Grant::fence`],
    /// [`crate::Hold::fence`], [`crate::Permit::fence`]).
    pub fn fence(mut self) -> Options<R> {
        *self.request.fence() = true;
        self
    }
}

impl<R: StreamRequest> Options<R> {
    /// End the hold or the leadership (`lost`, reason `max_hold`) after
    /// this long; at most `lock.max_hold`, which is also the default.
    pub fn max_hold(mut self, max_hold: Duration) -> Options<R> {
        *self.request.max_hold_ms() = Some(millis(max_hold));
        self
    }
}

impl<R: LockHoldRequest> Options<R> {
    /// What the agent does with the lock or permit when this hold's
    /// connection closes without a release (see [`OnDisconnect`]).
    pub fn on_disconnect(mut self, on_disconnect: OnDisconnect) -> Options<R> {
        *self.request.on_disconnect() = on_disconnect;
        self
    }
}

impl<R: ReenterRequest> Options<R> {
    /// Re-enter a lock this process already holds through the same agent,
    /// with the token of that grant: the answer has the same token, the
    /// TTL set again on the masters, and [`crate::Grant::hold_count`].
    /// Each release lowers the count ([`crate::Client::release_counted`]);
    /// the lock is released on the masters only when it reaches zero. A
    /// hold re-enters for as long as it lasts: closing it lowers the count
    /// as a release does ([`crate::Hold::hold_count`]). A hold's own grant
    /// cannot be re-entered (its hold renews and releases it).
    pub fn reenter(mut self, token: impl Into<String>) -> Options<R> {
        *self.request.token() = Some(token.into());
        self
    }
}

impl<R: ModeRequest> Options<R> {
    /// Take the lock shared, as a reader: any number of readers hold it at
    /// once, while no one holds it exclusively (the default); a writer
    /// waiting for it stops new readers until it has had its turn.
    pub fn shared(mut self) -> Options<R> {
        *self.request.mode() = Mode::Shared;
        self
    }
}

impl<R: SemaphoreRequest> Options<R> {
    /// One permit of a semaphore of `limit` permits (the agent takes 1 to
    /// [`redlock_wire::semaphore::MAX_PERMITS`]). The limit is part of the
    /// semaphore: while permits are held with another, the agent refuses
    /// with `409 limit_mismatch`.
    pub fn new(limit: u32) -> Options<R> {
        let mut request = R::default();
        *request.limit() = limit;
        Options { request }
    }
}

impl Options<AcquireRequest> {
    pub fn new() -> AcquireOptions {
        AcquireOptions::default()
    }
}

impl Options<HoldRequest> {
    pub fn new() -> HoldOptions {
        HoldOptions::default()
    }

    /// A hold asking what `options` ask for an acquire, with the defaults
    /// for the rest.
    pub fn from_acquire(options: &AcquireOptions) -> HoldOptions {
        HoldOptions {
            request: HoldRequest {
                mode: options.request.mode,
                ..HoldRequest::with_lock(options.request.clone())
            },
        }
    }
}

impl Options<CampaignRequest> {
    pub fn new() -> CampaignOptions {
        CampaignOptions::default()
    }

    /// What this campaigner publishes while it leads (an address, say),
    /// up to [`redlock_wire::election::MAX_VALUE_LEN`] characters.
    pub fn value(mut self, value: impl Into<String>) -> CampaignOptions {
        self.request.value = Some(value.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json;

    fn body<R: serde::Serialize>(options: &Options<R>) -> String {
        String::from_utf8(json(options.request())).unwrap()
    }

    #[test]
    fn every_kind_sends_what_is_set_and_nothing_else() {
        let acquire = AcquireOptions::new()
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_millis(500))
            .owner("w1")
            .fence()
            .reenter("t");
        assert_eq!(
            body(&acquire),
            r#"{"ttl_ms":10000,"wait_ms":500,"owner":"w1","fence":true,"token":"t"}"#
        );
        let hold = HoldOptions::new()
            .ttl(Duration::from_secs(3))
            .max_hold(Duration::from_secs(60))
            .on_disconnect(OnDisconnect::Expire);
        assert_eq!(
            body(&hold),
            r#"{"ttl_ms":3000,"max_hold_ms":60000,"on_disconnect":"expire"}"#
        );
        let campaign = CampaignOptions::new()
            .ttl(Duration::from_secs(5))
            .owner("s1")
            .value("10.0.0.7:8080")
            .max_hold(Duration::from_secs(3600));
        assert_eq!(
            body(&campaign),
            r#"{"ttl_ms":5000,"owner":"s1","value":"10.0.0.7:8080","max_hold_ms":3600000}"#
        );
        assert_eq!(body(&AcquireOptions::new()), "{}");
    }

    #[test]
    fn permit_options_carry_the_limit_and_what_is_set() {
        let options = PermitOptions::new(3)
            .ttl(Duration::from_millis(1500))
            .wait(Duration::from_secs(2))
            .owner("w1")
            .fence();
        assert_eq!(
            body(&options),
            r#"{"ttl_ms":1500,"wait_ms":2000,"owner":"w1","fence":true,"limit":3}"#
        );
        let hold = PermitHoldOptions::new(2)
            .max_hold(Duration::from_secs(60))
            .on_disconnect(OnDisconnect::Expire);
        assert_eq!(
            body(&hold),
            r#"{"limit":2,"max_hold_ms":60000,"on_disconnect":"expire"}"#
        );
    }

    #[test]
    fn a_hold_from_an_acquire_keeps_the_shared_fields() {
        let acquire = AcquireOptions::new()
            .ttl(Duration::from_secs(2))
            .owner("w1")
            .fence();
        let hold = HoldOptions::from_acquire(&acquire);
        assert_eq!(
            hold,
            HoldOptions::new()
                .ttl(Duration::from_secs(2))
                .owner("w1")
                .fence()
        );
    }
}

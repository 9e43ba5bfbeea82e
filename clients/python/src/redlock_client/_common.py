"""What the blocking and the asyncio clients share: errors, paths, request
bodies and the answers as typed objects. No I/O here."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Type, Union

DEFAULT_TIMEOUT = 5.0
"""Seconds a request may take beyond the wait it asks the agent for."""

MAX_LINE = 64 * 1024
"""Longest stream event line accepted; real ones are under 2 KiB."""

Mode = Literal["shared", "exclusive"]
"""How a lock is taken: `exclusive` (one holder, the default) or `shared`
(a reader: any number of readers at once, while no exclusive holder is)."""


class RedlockError(Exception):
    """Every error of this package."""


class ApiError(RedlockError):
    """The agent answered an error: `status`, `code` (`ttl_out_of_range`,
    `invalid_resource`, `limit_mismatch`, ...) and `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__("%d %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message


class Taken(ApiError):
    """409 `taken`: another holder kept the lock (or every permit) for all
    of `wait_ms`."""


class Lost(ApiError):
    """409 `lost`: not extended on a quorum in time; stop using the lock."""


class NoQuorum(ApiError):
    """503 `no_quorum`: fewer than N/2+1 masters usable, or (release) too
    many failed to tell whether they held the lock; retry later."""


class LimitMismatch(ApiError):
    """409 `limit_mismatch`: the semaphore's permits are held with another
    `limit`; every user of a semaphore must ask with the same one."""


class NoLeader(ApiError):
    """404 `no_leader`: no campaigner leads the election now."""


class Unreachable(RedlockError):
    """The socket could not be reached, the connection failed, or no answer
    came in time. For an acquire, the lock may or may not have been granted;
    it then expires with its TTL."""


class LockLost(RedlockError):
    """A held lock, permit or leadership was lost: `resource` names it,
    `reason` is the agent's (`renew_failed`, `no_quorum`, `max_hold`,
    `shutdown`, `force_released`, `node_lost`), `disconnected` (the
    connection ended without a notice) or `expired` (no renewal arrived
    before the validity ran out, on this process's clock)."""

    def __init__(self, resource: str, reason: str) -> None:
        super().__init__("the lock on %s was lost: %s" % (resource, reason))
        self.resource = resource
        self.reason = reason


_CODES: Dict[str, Type[ApiError]] = {
    "taken": Taken,
    "lost": Lost,
    "no_quorum": NoQuorum,
    "limit_mismatch": LimitMismatch,
    "no_leader": NoLeader,
}


def api_error(status: int, body: bytes) -> RedlockError:
    """The exception for an error answer: an ApiError subclass by its code."""
    try:
        error = json.loads(body)["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        return Unreachable("unexpected answer: %d %r" % (status, body[:200]))
    return _CODES.get(code, ApiError)(status, code, message)


def _segment(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def lock_path(resource: str, action: Optional[str] = None) -> str:
    """`/v1/locks/{resource}[/{action}]` with the resource percent-encoded
    as one path segment (`/` included). Names are encoded here and only
    here."""
    base = "/v1/locks/%s" % _segment(resource)
    return base if action is None else "%s/%s" % (base, action)


def multi_path(action: str) -> str:
    """`/v1/locks/{action}`: a lock on several resources, named in the body."""
    return "/v1/locks/%s" % action


def semaphore_path(name: str, action: Optional[str] = None) -> str:
    """`/v1/semaphores/{name}[/{action}]`, encoded as `lock_path`."""
    base = "/v1/semaphores/%s" % _segment(name)
    return base if action is None else "%s/%s" % (base, action)


def election_path(name: str, action: Optional[str] = None) -> str:
    """`/v1/elections/{name}[/{action}]`, encoded as `lock_path`."""
    base = "/v1/elections/%s" % _segment(name)
    return base if action is None else "%s/%s" % (base, action)


def body(**fields: Any) -> Dict[str, Any]:
    """A request body without the fields left as None."""
    return {k: v for k, v in fields.items() if v is not None}


def wire_mode(mode: str) -> Optional[str]:
    """A lock's `mode` as its acquire or hold sends it: `shared`, or None
    for `exclusive` (left out, as the wire leaves out the default, so an
    agent without modes still takes the request). Checked here, before any
    request, so a misspelt mode never becomes an exclusive lock by default.

    Raises ValueError for any other value."""
    if mode == "exclusive":
        return None
    if mode == "shared":
        return mode
    raise ValueError("mode must be 'shared' or 'exclusive', not %r" % (mode,))


def resource_list(resources: Optional[Sequence[str]]) -> Optional[List[str]]:
    """The resources of a lock on several as a JSON list; a lone string is
    refused rather than read as its characters."""
    if resources is None:
        return None
    if isinstance(resources, str):
        raise TypeError("resources must be a list of names, not one string")
    return list(resources)


def permit_token(permit: Union[int, str, None], token: Optional[str]) -> Dict[str, Any]:
    """The body naming a permit to extend or release: its token, which alone
    names it, and its number when given. Takes `(token)` as well as the
    older `(permit, token)`."""
    if isinstance(permit, str):
        if token is not None:
            raise TypeError("a permit's token given twice")
        permit, token = None, permit
    if not isinstance(token, str):
        raise TypeError("a permit is extended and released by its token")
    return body(permit=permit, token=token)


def parse_event(line: bytes) -> Optional[Dict[str, Any]]:
    """One NDJSON line as a dict; None at the end of the stream."""
    if not line:
        return None
    if len(line) > MAX_LINE:
        raise ValueError("a stream line over %d bytes" % MAX_LINE)
    event = json.loads(line)
    if not isinstance(event, dict):
        raise ValueError("not a stream event: %r" % line[:200])
    return event


class Grant:
    """A granted lock. `valid_until` is on `time.monotonic()`'s clock: use
    the lock only before it. `fence` is the fencing token when one was asked
    for (or the agent mints them always), else None; `hold_count` is set
    after a re-entry (`token=` in the acquire). `mode` is `shared` for a
    reader's grant, else `exclusive`."""

    def __init__(self, answer: Mapping[str, Any], arrived: float) -> None:
        self.resource: str = answer["resource"]
        self.token: str = answer["token"]
        self.ttl_ms: int = answer["ttl_ms"]
        self.validity_ms: int = answer["validity_ms"]
        self.valid_until: float = arrived + self.validity_ms / 1000.0
        self.fence: Optional[int] = answer.get("fence")
        self.hold_count: Optional[int] = answer.get("hold_count")
        self.mode: Mode = answer.get("mode", "exclusive")

    def __repr__(self) -> str:
        # Never the token: it is the proof of holding the lock.
        return "Grant(resource=%r, mode=%r, ttl_ms=%d, validity_ms=%d, fence=%r)" % (
            self.resource,
            self.mode,
            self.ttl_ms,
            self.validity_ms,
            self.fence,
        )


class MultiGrant:
    """A granted lock on several resources, all of them or none: `resources`
    (sorted), one `token` that extends and releases them all, and one
    `fence` for all (when asked for). Times as in `Grant`."""

    def __init__(self, answer: Mapping[str, Any], arrived: float) -> None:
        self.resources: List[str] = list(answer["resources"])
        self.token: str = answer["token"]
        self.ttl_ms: int = answer["ttl_ms"]
        self.validity_ms: int = answer["validity_ms"]
        self.valid_until: float = arrived + self.validity_ms / 1000.0
        self.fence: Optional[int] = answer.get("fence")

    def __repr__(self) -> str:
        return "MultiGrant(resources=%r, ttl_ms=%d, validity_ms=%d, fence=%r)" % (
            self.resources,
            self.ttl_ms,
            self.validity_ms,
            self.fence,
        )


class Permit:
    """A granted permit of a semaphore: `permit` (0 to limit-1) says which;
    `token` alone extends and releases it. Times as in `Grant`."""

    def __init__(self, answer: Mapping[str, Any], arrived: float) -> None:
        self.semaphore: str = answer["semaphore"]
        self.permit: int = answer["permit"]
        self.token: str = answer["token"]
        self.ttl_ms: int = answer["ttl_ms"]
        self.validity_ms: int = answer["validity_ms"]
        self.valid_until: float = arrived + self.validity_ms / 1000.0
        self.fence: Optional[int] = answer.get("fence")

    def __repr__(self) -> str:
        return "Permit(semaphore=%r, permit=%d, ttl_ms=%d, validity_ms=%d)" % (
            self.semaphore,
            self.permit,
            self.ttl_ms,
            self.validity_ms,
        )


class Extended:
    """An extended lock or permit: a new TTL from now."""

    def __init__(self, answer: Mapping[str, Any], arrived: float) -> None:
        self.ttl_ms: int = answer["ttl_ms"]
        self.validity_ms: int = answer["validity_ms"]
        self.valid_until: float = arrived + self.validity_ms / 1000.0

    def __repr__(self) -> str:
        return "Extended(ttl_ms=%d, validity_ms=%d)" % (self.ttl_ms, self.validity_ms)


class Leader:
    """An election's leader as the agent tells it: `election`, `term` (its
    fence: larger than every earlier term), `value` (what it published),
    `owner`, `agent`, `pid`, `uid`, `since_ms` (Unix epoch ms) and
    `validity_ms`. Fields the agent left out are None."""

    def __init__(self, answer: Mapping[str, Any]) -> None:
        self.election: str = answer["election"]
        self.term: Optional[int] = answer.get("term")
        self.value: Optional[str] = answer.get("value")
        self.owner: Optional[str] = answer.get("owner")
        self.agent: Optional[str] = answer.get("agent")
        self.pid: Optional[int] = answer.get("pid")
        self.uid: Optional[int] = answer.get("uid")
        self.since_ms: Optional[int] = answer.get("since_ms")
        self.validity_ms: int = answer.get("validity_ms", 0)

    def __repr__(self) -> str:
        return "Leader(election=%r, term=%r, value=%r, owner=%r)" % (
            self.election,
            self.term,
            self.value,
            self.owner,
        )


def observed(event: Mapping[str, Any]) -> Optional[Leader]:
    """An observe stream's event as the leader it names; None for
    `no_leader`."""
    if event.get("event") == "leader":
        return Leader(event)
    return None

# Generated from _streams_async.py by `python scripts/generate_sync.py` (unasync), run in
# clients/python. Do not edit: edit _streams_async.py (or _backend_sync.py, for what
# blocking I/O does differently) and run the command again.
"""The open event streams: a hold (of a lock, a permit or a lock on
several resources), a campaign and an election's observer, each read by a
reader of its own (a task in asyncio, a thread when blocking). This is the
asyncio form, written by hand; the blocking one, `_streams_sync.py`, is
generated from it as `_sync.py` is from `aio.py` (`python
scripts/generate_sync.py`): edit this file, never that one, and write its
docstrings for both."""

from __future__ import annotations

import time
from typing import (
    TYPE_CHECKING,
    Any,
    Iterator,
    Callable,
    Dict,
    List,
    Literal,
    Optional,
    TypeVar,
)

from ._backend_sync import NO_VALIDITY, CampaignWaits, Event, StreamWaits, spawn, stop
from ._common import Leader, LockLost, Mode, RedlockError, observed, parse_event

if TYPE_CHECKING:
    from ._sync import Client, _Response

__all__ = ["Hold", "Campaign", "Observer", "OnLost"]

S = TypeVar("S", bound="_Stream")
OnLost = Callable[[LockLost], None]


class _Stream(StreamWaits):
    """An open event stream, read by a reader of its own (a thread, or a
    task) with a deadline once a validity is known, and one loss notice."""

    def __init__(self, name: str, response: _Response, on_lost: Optional[OnLost]) -> None:
        self._name = name
        self._response = response
        self._on_lost = on_lost
        self.lost = Event()
        self.lost_reason: Optional[str] = None
        self.validity_ms = 0
        self.valid_until: Optional[float] = NO_VALIDITY
        self._armed = False
        self._closed = False
        self._reader: Any = None

    def _start(self, kind: str) -> None:
        self._reader = spawn(self._read, "redlock-%s-%s" % (kind, self._name))

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        counts = self._counts_loss()
        self.close()
        if exc_type is None and counts and self.lost.is_set():
            raise LockLost(self._name, self.lost_reason or "lost")
        return False

    def _counts_loss(self) -> bool:
        """Whether a loss inside the block raises when it ends."""
        return True

    def check(self) -> None:
        """Raises LockLost if it is lost; call it between steps."""
        if self.lost.is_set():
            raise LockLost(self._name, self.lost_reason or "lost")

    def close(self) -> None:
        """Ends the stream: the connection closes, and the agent releases
        (or resigns) on every master."""
        if self._closed:
            return
        self._closed = True
        self._response.close()
        stop(self._reader)

    def _renewed(self, validity_ms: int) -> None:
        self.validity_ms = validity_ms
        self.valid_until = time.monotonic() + validity_ms / 1000.0
        self._armed = True

    def _lose(self, reason: str) -> None:
        if self._closed or self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        self._lost_set()
        self._closed = True
        self._response.close()
        if self._on_lost is not None:
            self._on_lost(LockLost(self._name, reason))

    def _lost_set(self) -> None:
        """Hook: runs once, just after `lost` is set."""

    def _deadline(self) -> Optional[float]:
        # Lost when no renewal arrived by a twentieth of the last validity
        # before its end (the agent or its host is frozen).
        if not self._armed or self.valid_until is None:
            return None
        return self.valid_until - self.validity_ms / 20000.0

    def _read(self) -> None:
        while not self._closed:
            self._response.socket.deadline = self._deadline()
            try:
                event = parse_event(self._response.readline())
            except TimeoutError:
                self._lose("expired")
                return
            except Exception as e:  # noqa: BLE001 - any failure ends the stream
                # After close() this is the end we caused: not a loss.
                self._lose("disconnected (%s: %s)" % (type(e).__name__, e))
                return
            if event is None:
                self._lose("disconnected")
                return
            if event.get("event") == "lost":
                self._lose(event.get("reason", "lost"))
                return
            self._event(event)

    def _event(self, event: Dict[str, Any]) -> None:
        if event.get("event") == "renewed":
            self._renewed(event["validity_ms"])


class Hold(_Stream):
    """A held lock, permit or lock on several resources, renewed by the
    agent while open. Attributes: `resource` (the lock, the semaphore, or
    the resources joined by commas), `resources` (the sorted list for a
    lock on several, else None), `permit` (None but for a permit),
    `token`, `fence`, `hold_count` (after a re-entry), `mode` (`shared`
    for a reader's lock, else `exclusive`), `ttl_ms`,
    `validity_ms` and `valid_until` (on `time.monotonic()`, moved by every
    renewal), `lost` (a `threading.Event`, or an `asyncio.Event`) and
    `lost_reason`.

    Python cannot stop code from another thread, so a loss shows where the
    code looks: `check()` raises LockLost, `lost` is set, `on_lost` is
    called, and leaving the `with` block raises LockLost; in asyncio
    `guard()` also cancels the work it runs."""

    def __init__(
        self,
        client: Client,
        resource: str,
        response: _Response,
        acquired: Dict[str, Any],
        arrived: float,
        on_lost: Optional[OnLost],
        resources: Optional[List[str]] = None,
        mode: Mode = "exclusive",
    ) -> None:
        super().__init__(resource, response, on_lost)
        self.client = client
        self.resource = resource
        self.resources = resources
        self.permit: Optional[int] = acquired.get("permit")
        self.token: str = acquired["token"]
        self.ttl_ms: int = acquired["ttl_ms"]
        self.fence: Optional[int] = acquired.get("fence")
        self.hold_count: Optional[int] = acquired.get("hold_count")
        # The hold's events do not say it: the mode asked for, which the
        # agent grants or refuses.
        self.mode: Mode = mode
        self.validity_ms = acquired["validity_ms"]
        self.valid_until = arrived + self.validity_ms / 1000.0
        self._armed = True
        self._start("hold")

    def __repr__(self) -> str:
        return "%s(resource=%r, permit=%r, mode=%r, ttl_ms=%d, lost=%r)" % (
            type(self).__name__,
            self.resource,
            self.permit,
            self.mode,
            self.ttl_ms,
            self.lost_reason,
        )

    def release(self) -> bool:
        """Releases through the API, then closes the hold. True when a
        quorum still held it (see `release`).

        A hold that re-entered a lock (`hold_count` set) is only closed:
        its close is its release, which lowers the count once (a release
        through the API as well would lower it twice, and release the lock
        its first acquire still holds). True unless it was lost."""
        if self.hold_count is not None:
            held = not self.lost.is_set()
            self.close()
            return held
        try:
            if self.resources is not None:
                return self.client.release_many(self.token)
            if self.permit is None:
                return self.client.release(self.resource, self.token)
            return self.client.release_permit(self.resource, self.token)
        finally:
            self.close()


class Campaign(_Stream, CampaignWaits):
    """A campaign for an election's leadership, open until closed.
    `leader` is the leader the agent last named while this one waited;
    once elected, `term` (the leadership's fence: pass it with every write
    the leader makes), `validity_ms` and `valid_until`. `elected` is set
    then (an Event, as `lost`). A lost leadership shows as a lost hold does
    (`lost`, `check()`, `on_lost`, LockLost)."""

    def __init__(
        self, client: Client, election: str, response: _Response, on_lost: Optional[OnLost]
    ) -> None:
        super().__init__(election, response, on_lost)
        self.client = client
        self.election = election
        self.term: Optional[int] = None
        self.ttl_ms: Optional[int] = None
        self.leader: Optional[Leader] = None
        self.elected = Event()
        self._settled = Event()  # elected, or lost
        self._start("campaign")

    def __repr__(self) -> str:
        return "%s(election=%r, term=%r, lost=%r)" % (
            type(self).__name__,
            self.election,
            self.term,
            self.lost_reason,
        )

    def _counts_loss(self) -> bool:
        return self.elected.is_set()

    @property
    def is_leader(self) -> bool:
        """Elected and not lost (by the last event and this process's clock)."""
        return self.elected.is_set() and not self.lost.is_set() and not self._closed

    def resign(self) -> None:
        """Gives up the leadership (or stops waiting): `close()`."""
        self.close()

    def _event(self, event: Dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "waiting":
            leader = event.get("leader")
            self.leader = None if leader is None else Leader(leader)
        elif kind == "elected":
            self.term = event["term"]
            self.ttl_ms = event["ttl_ms"]
            self._renewed(event["validity_ms"])
            self.elected.set()
            self._settled.set()
        elif kind == "renewed":
            self._renewed(event["validity_ms"])

    def _lost_set(self) -> None:
        self._settled.set()


class Observer:
    """The leader of an election and every change, read as an iterator
    (`async for` in asyncio): each item a `Leader`, or None when no one
    leads. The iteration ends when the stream does; `close()` ends it (from
    another thread, when blocking)."""

    def __init__(self, response: _Response) -> None:
        self._response = response

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Optional[Leader]]:
        return self._events()

    def _events(self) -> Iterator[Optional[Leader]]:
        try:
            while True:
                try:
                    event = parse_event(self._response.readline())
                except (OSError, ValueError, RedlockError):
                    return
                if event is None:
                    return
                yield observed(event)
        finally:
            self._response.close()

    def close(self) -> None:
        self._response.close()

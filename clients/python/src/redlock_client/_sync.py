"""The blocking client: `http.client` over a Unix socket, a thread per open
stream (hold, campaign) reading its events."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, Literal, Optional

from ._common import (
    DEFAULT_TIMEOUT,
    Extended,
    Grant,
    Leader,
    LockLost,
    Permit,
    Unreachable,
    api_error,
    body,
    election_path,
    lock_path,
    observed,
    parse_event,
    semaphore_path,
)
from ._trace import trace_headers

OnLost = Callable[[LockLost], None]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Client:
    """A client of the agent listening on `socket_path`. Each call opens its
    own connection, so one client may be shared by threads.

    ## Behavior
    - Every call is one request on a fresh connection, bounded by `timeout`
      seconds plus the `wait_ms` it asks the agent for.
    - An agent that cannot be reached raises `Unreachable`; an error answer
      raises the `ApiError` subclass of its code.
    - Streams (holds, campaigns) read their events on a daemon thread and
      report a loss through `lost`, `check()`, `on_lost` and `LockLost`.
    """

    def __init__(self, socket_path: Any, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.socket_path = str(socket_path)
        self.timeout = timeout

    def _connect(self, wait_ms: Optional[int]) -> _UnixConnection:
        return _UnixConnection(self.socket_path, self.timeout + (wait_ms or 0) / 1000.0)

    def _call(
        self,
        method: str,
        path: str,
        payload: Optional[Dict[str, Any]] = None,
        wait_ms: Optional[int] = None,
    ) -> Any:
        conn = self._connect(wait_ms)
        try:
            data = None if payload is None else json.dumps(payload).encode()
            headers = trace_headers()
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            answer = response.read()
        except OSError as e:
            # socket.timeout is an OSError too.
            raise Unreachable("%s %s on %s: %s" % (method, path, self.socket_path, e)) from e
        except http.client.HTTPException as e:
            raise Unreachable("%s %s: %s" % (method, path, e)) from e
        finally:
            conn.close()
        if not 200 <= response.status < 300:
            raise api_error(response.status, answer)
        try:
            return json.loads(answer)
        except ValueError as e:
            raise Unreachable("unexpected answer: %d %r" % (response.status, answer[:200])) from e

    def _stream(
        self, path: str, payload: Dict[str, Any], wait_ms: Optional[int], method: str = "POST"
    ) -> "tuple[_UnixConnection, http.client.HTTPResponse]":
        """Opens a stream: the connection and its response, status 200."""
        conn = self._connect(wait_ms)
        try:
            data = None if method == "GET" else json.dumps(payload).encode()
            headers = trace_headers()
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            if response.status != 200:
                raise api_error(response.status, response.read())
        except OSError as e:
            conn.close()
            raise Unreachable("%s %s on %s: %s" % (method, path, self.socket_path, e)) from e
        except http.client.HTTPException as e:
            conn.close()
            raise Unreachable("%s %s: %s" % (method, path, e)) from e
        except BaseException:
            conn.close()
            raise
        return conn, response

    def _first(self, conn: _UnixConnection, response: Any, path: str, kind: str) -> Dict[str, Any]:
        try:
            first = parse_event(response.readline())
        except (OSError, http.client.HTTPException, ValueError) as e:
            conn.close()
            raise Unreachable("POST %s: %s" % (path, e)) from e
        if first is None or first.get("event") != kind:
            conn.close()
            raise Unreachable("a stream must start with `%s`, got %r" % (kind, first))
        return first

    # Locks.

    def acquire(
        self,
        resource: str,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        owner: Optional[str] = None,
        fence: Optional[bool] = None,
        token: Optional[str] = None,
    ) -> Grant:
        """The lock, if a quorum granted it within `wait_ms` (default: one
        attempt). `ttl_ms` defaults to the agent's `lock.default_ttl`.
        `token=` re-enters a lock this process holds: same token, and
        `hold_count` releases before it is released on the masters.

        Raises Taken, NoQuorum, ApiError (refused request) or Unreachable."""
        payload = body(ttl_ms=ttl_ms, wait_ms=wait_ms, owner=owner, fence=fence, token=token)
        answer = self._call("POST", lock_path(resource, "acquire"), payload, wait_ms)
        return Grant(answer, time.monotonic())

    def extend(self, resource: str, token: str, ttl_ms: Optional[int] = None) -> Extended:
        """A new TTL from now. Raises Lost when it was not extended on a
        quorum in time: stop using the lock."""
        answer = self._call("POST", lock_path(resource, "extend"), body(token=token, ttl_ms=ttl_ms))
        return Extended(answer, time.monotonic())

    def release(self, resource: str, token: str) -> bool:
        """Releases on every master. False means no quorum still held it: it
        had expired, and the work may have overlapped another holder's (or,
        for a re-entered lock, that a release is still owed). Raises
        NoQuorum when too many masters failed to tell (a retry with the same
        token is safe)."""
        answer = self._call("POST", lock_path(resource, "release"), {"token": token})
        return bool(answer["released"])

    def force_release(self, resource: str) -> Dict[str, Any]:
        """For operators, on the admin socket: deletes the lock on every
        master, whoever holds it. Its holder hears of it at once."""
        answer: Dict[str, Any] = self._call("POST", lock_path(resource, "force-release"))
        return answer

    def nodes(self) -> Dict[str, Any]:
        answer: Dict[str, Any] = self._call("GET", "/v1/nodes")
        return answer

    def locks(self) -> Dict[str, Any]:
        answer: Dict[str, Any] = self._call("GET", "/v1/locks")
        return answer

    def hold(
        self,
        resource: str,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        owner: Optional[str] = None,
        max_hold_ms: Optional[int] = None,
        fence: Optional[bool] = None,
        on_lost: Optional[OnLost] = None,
        on_disconnect: Optional[str] = None,
        token: Optional[str] = None,
    ) -> "Hold":
        """A lock held while the returned `Hold` is open (use it in a `with`
        block): the agent renews it every third of the TTL and releases it
        when the connection closes (`on_disconnect="expire"` lets it expire
        instead). `token=` re-enters a lock this process holds for as long
        as the hold lasts (closing it then lowers the count as a release
        does). `on_lost(LockLost)` is called from the reader thread when the
        lock is lost.

        Raises as `acquire` when the lock is not granted."""
        path = lock_path(resource, "hold")
        payload = body(
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            max_hold_ms=max_hold_ms,
            fence=fence,
            on_disconnect=on_disconnect,
            token=token,
        )
        conn, response = self._stream(path, payload, wait_ms)
        first = self._first(conn, response, path, "acquired")
        return Hold(self, resource, None, conn, response, first, time.monotonic(), on_lost)

    # Semaphores.

    def acquire_permit(
        self,
        name: str,
        limit: int,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        owner: Optional[str] = None,
        fence: Optional[bool] = None,
    ) -> Permit:
        """One of `limit` permits of semaphore `name`, waiting up to
        `wait_ms` for one. Every user of a semaphore passes the same
        `limit`. Raises Taken (all held for all of `wait_ms`),
        LimitMismatch, NoQuorum, ApiError or Unreachable."""
        payload = body(limit=limit, ttl_ms=ttl_ms, wait_ms=wait_ms, owner=owner, fence=fence)
        answer = self._call("POST", semaphore_path(name, "acquire"), payload, wait_ms)
        return Permit(answer, time.monotonic())

    def extend_permit(
        self, name: str, permit: int, token: str, ttl_ms: Optional[int] = None
    ) -> Extended:
        """A new TTL from now for a permit. Raises Lost: stop using it."""
        payload = body(permit=permit, token=token, ttl_ms=ttl_ms)
        answer = self._call("POST", semaphore_path(name, "extend"), payload)
        return Extended(answer, time.monotonic())

    def release_permit(self, name: str, permit: int, token: str) -> bool:
        """Releases a permit on every master; False as `release`."""
        payload = {"permit": permit, "token": token}
        return bool(self._call("POST", semaphore_path(name, "release"), payload)["released"])

    def hold_permit(
        self,
        name: str,
        limit: int,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        owner: Optional[str] = None,
        max_hold_ms: Optional[int] = None,
        fence: Optional[bool] = None,
        on_lost: Optional[OnLost] = None,
        on_disconnect: Optional[str] = None,
    ) -> "Hold":
        """A permit held while the returned `Hold` is open, exactly as
        `hold` holds a lock; its `permit` says which one."""
        path = semaphore_path(name, "hold")
        payload = body(
            limit=limit,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            max_hold_ms=max_hold_ms,
            fence=fence,
            on_disconnect=on_disconnect,
        )
        conn, response = self._stream(path, payload, wait_ms)
        first = self._first(conn, response, path, "acquired")
        return Hold(self, name, first.get("permit"), conn, response, first, time.monotonic(), on_lost)

    def semaphore(self, name: str) -> Dict[str, Any]:
        """The semaphore's held permits (never tokens), `limit` while any is
        held, and this agent's `waiters`."""
        answer: Dict[str, Any] = self._call("GET", semaphore_path(name))
        return answer

    # Elections.

    def campaign(
        self,
        name: str,
        ttl_ms: Optional[int] = None,
        owner: Optional[str] = None,
        value: Optional[str] = None,
        max_hold_ms: Optional[int] = None,
        on_lost: Optional[OnLost] = None,
    ) -> "Campaign":
        """Campaigns to lead election `name`: returns at once with the
        campaign; `wait_elected()` blocks until it leads. `value` (up to
        1024 bytes) is published to everyone who asks who leads. Closing the
        campaign resigns (or stops waiting)."""
        path = election_path(name, "campaign")
        payload = body(ttl_ms=ttl_ms, owner=owner, value=value, max_hold_ms=max_hold_ms)
        conn, response = self._stream(path, payload, None)
        return Campaign(self, name, conn, response, on_lost)

    def leader(self, name: str) -> Leader:
        """Who leads election `name` now. Raises NoLeader when no one does."""
        return Leader(self._call("GET", election_path(name)))

    def observe(self, name: str) -> "Observer":
        """The leader of election `name` now, then every change, as an
        iterator of `Leader` (or None: no leader). Close it when done."""
        path = election_path(name, "observe")
        conn, response = self._stream(path, {}, None, method="GET")
        return Observer(conn, response)


class _Stream:
    """An open event stream: a reader thread, a deadline watchdog once a
    validity is known, and one loss notice."""

    def __init__(self, name: str, conn: _UnixConnection, response: Any, on_lost: Optional[OnLost]):
        self._name = name
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self.validity_ms = 0
        self.valid_until = 0.0
        self._on_lost = on_lost
        self._conn = conn
        self._response = response
        self._closed = threading.Event()
        self._armed = threading.Event()
        self._conn_closed = False
        self._lock = threading.Lock()

    def _start(self, kind: str) -> None:
        self._reader = threading.Thread(
            target=self._read, name="redlock-%s-%s" % (kind, self._name), daemon=True
        )
        self._reader.start()
        self._watchdog = threading.Thread(
            target=self._watch, name="redlock-deadline-%s" % self._name, daemon=True
        )
        self._watchdog.start()

    def check(self) -> None:
        """Raises LockLost if it is lost; call it between steps."""
        if self.lost.is_set():
            raise LockLost(self._name, self.lost_reason or "lost")

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Blocks until it is lost (True) or `timeout` seconds pass (False)."""
        return self.lost.wait(timeout)

    def close(self) -> None:
        """Ends the stream: the connection closes, and the agent releases
        (or resigns) on every master."""
        if self._closed.is_set():
            return
        self._closed.set()
        sock = self._conn.sock
        try:
            # Wakes the reader thread blocked in recv at once; it closes the
            # connection itself (closing it under its feet breaks
            # http.client), unless it has already ended.
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if not self._reader.is_alive():
            self._close_conn()

    def _close_conn(self) -> None:
        with self._lock:
            if self._conn_closed:
                return
            self._conn_closed = True
        self._conn.close()

    def _renewed(self, validity_ms: int) -> None:
        arrived = time.monotonic()
        with self._lock:
            self.validity_ms = validity_ms
            self.valid_until = arrived + validity_ms / 1000.0
        self._armed.set()

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            if self.lost.is_set() or self._closed.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
        self._lost_set()
        self.close()
        if self._on_lost is not None:
            self._on_lost(LockLost(self._name, reason))

    def _lost_set(self) -> None:
        """Hook: runs once, just after `lost` is set."""

    def _read(self) -> None:
        try:
            sock = self._conn.sock
            if sock is not None:
                # Renewals come every third of the TTL; the watchdog, not a
                # socket timeout, decides when silence means lost.
                sock.settimeout(None)
            while not self._closed.is_set():
                try:
                    event = parse_event(self._response.readline())
                except Exception as e:  # noqa: BLE001 - any failure ends the stream
                    # After close() this is the shutdown we caused: not a loss.
                    self._mark_lost("disconnected (%s: %s)" % (type(e).__name__, e))
                    return
                if event is None:
                    self._mark_lost("disconnected")
                    return
                if event.get("event") == "lost":
                    self._mark_lost(event.get("reason", "lost"))
                    return
                self._event(event)
        finally:
            self._close_conn()

    def _event(self, event: Dict[str, Any]) -> None:
        if event.get("event") == "renewed":
            self._renewed(event["validity_ms"])

    def _watch(self) -> None:
        # Lost when no renewal arrived by a twentieth of the last validity
        # before its end (the agent or its host is frozen).
        while not self._armed.is_set():
            if self._closed.wait(0.05) or self.lost.is_set():
                return
        while not self._closed.is_set() and not self.lost.is_set():
            with self._lock:
                deadline = self.valid_until - self.validity_ms / 20000.0
            left = deadline - time.monotonic()
            if left <= 0:
                self._mark_lost("expired")
                return
            self._closed.wait(min(left, 1.0))


class Hold(_Stream):
    """A held lock or permit, renewed by the agent while open. Attributes:
    `resource` (the lock, or the semaphore), `permit` (None for a lock),
    `token`, `fence`, `hold_count` (after a re-entry), `ttl_ms`,
    `validity_ms` and `valid_until` (on
    `time.monotonic()`, moved by every renewal), `lost` (a
    `threading.Event`) and `lost_reason`.

    Python cannot stop code from another thread, so a loss shows where the
    code looks: `check()` raises LockLost, `lost` is set, `on_lost` is
    called, and leaving the `with` block raises LockLost."""

    def __init__(
        self,
        client: Client,
        resource: str,
        permit: Optional[int],
        conn: _UnixConnection,
        response: Any,
        acquired: Dict[str, Any],
        arrived: float,
        on_lost: Optional[OnLost],
    ) -> None:
        super().__init__(resource, conn, response, on_lost)
        self.client = client
        self.resource = resource
        self.permit = permit
        self.token: str = acquired["token"]
        self.ttl_ms: int = acquired["ttl_ms"]
        self.fence: Optional[int] = acquired.get("fence")
        self.hold_count: Optional[int] = acquired.get("hold_count")
        self.validity_ms = acquired["validity_ms"]
        self.valid_until = arrived + self.validity_ms / 1000.0
        self._armed.set()
        self._start("hold")

    def __repr__(self) -> str:
        return "Hold(resource=%r, permit=%r, ttl_ms=%d, lost=%r)" % (
            self.resource,
            self.permit,
            self.ttl_ms,
            self.lost_reason,
        )

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> "Literal[False]":
        self.close()
        if exc_type is None and self.lost.is_set():
            raise LockLost(self.resource, self.lost_reason or "lost")
        return False

    def release(self) -> bool:
        """Releases through the API, then closes the hold. True when a
        quorum still held it (see `Client.release`)."""
        try:
            if self.permit is None:
                return self.client.release(self.resource, self.token)
            return self.client.release_permit(self.resource, self.permit, self.token)
        finally:
            self.close()


class Campaign(_Stream):
    """A campaign for an election's leadership, open until closed.
    `leader` is the leader the agent last named while this one waited;
    once elected, `term` (the leadership's fence: pass it with every write
    the leader makes), `validity_ms` and `valid_until`. A lost leadership
    shows as a lost hold does (`lost`, `check()`, `on_lost`, LockLost)."""

    def __init__(
        self,
        client: Client,
        election: str,
        conn: _UnixConnection,
        response: Any,
        on_lost: Optional[OnLost],
    ) -> None:
        super().__init__(election, conn, response, on_lost)
        self.client = client
        self.election = election
        self.term: Optional[int] = None
        self.ttl_ms: Optional[int] = None
        self.leader: Optional[Leader] = None
        self.elected = threading.Event()
        self._changed = threading.Condition(self._lock)
        self._start("campaign")

    def __repr__(self) -> str:
        return "Campaign(election=%r, term=%r, lost=%r)" % (
            self.election,
            self.term,
            self.lost_reason,
        )

    def __enter__(self) -> "Campaign":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> "Literal[False]":
        was_elected = self.elected.is_set()
        self.close()
        if exc_type is None and was_elected and self.lost.is_set():
            raise LockLost(self.election, self.lost_reason or "lost")
        return False

    @property
    def is_leader(self) -> bool:
        """Elected and not lost (by the last event and this process's clock)."""
        return self.elected.is_set() and not self.lost.is_set() and not self._closed.is_set()

    def wait_elected(self, timeout: Optional[float] = None) -> Optional[int]:
        """Blocks until this campaigner leads: its term. None when `timeout`
        seconds passed first. Raises LockLost if the campaign ended first
        (or the leadership was already lost)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not self.elected.is_set() and not self.lost.is_set():
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(left if left is None else min(left, 1.0))
        self.check()
        return self.term

    def resign(self) -> None:
        """Gives up the leadership (or stops waiting): `close()`."""
        self.close()

    def _event(self, event: Dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "waiting":
            leader = event.get("leader")
            with self._changed:
                self.leader = None if leader is None else Leader(leader)
                self._changed.notify_all()
        elif kind == "elected":
            arrived = time.monotonic()
            with self._changed:
                self.term = event["term"]
                self.ttl_ms = event["ttl_ms"]
                self.validity_ms = event["validity_ms"]
                self.valid_until = arrived + self.validity_ms / 1000.0
                self.elected.set()
                self._changed.notify_all()
            self._armed.set()
        elif kind == "renewed":
            self._renewed(event["validity_ms"])

    def _lost_set(self) -> None:
        with self._changed:
            self._changed.notify_all()


class Observer:
    """The leader of an election and every change, read as an iterator:
    each item a `Leader`, or None when no one leads. The iteration ends
    when the stream does; `close()` ends it from another thread."""

    def __init__(self, conn: _UnixConnection, response: Any) -> None:
        self._conn = conn
        self._response = response
        if conn.sock is not None:
            conn.sock.settimeout(None)

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Optional[Leader]]:
        try:
            while True:
                try:
                    event = parse_event(self._response.readline())
                except (OSError, ValueError, http.client.HTTPException):
                    return
                if event is None:
                    return
                yield observed(event)
        finally:
            self._conn.close()

    def close(self) -> None:
        sock = self._conn.sock
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

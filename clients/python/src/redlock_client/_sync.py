# Generated from aio.py by `python scripts/generate_sync.py` (unasync), run in
# clients/python. Do not edit: edit aio.py (or _backend_sync.py, for what
# blocking I/O does differently) and run the command again.
"""The blocking client: the calls of `redlock_client.aio.AsyncClient`, on a
blocking Unix socket, with a daemon thread per open stream (hold, campaign)
reading its events."""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Sequence, Union

from ._backend_sync import Opening, Socket, opening
from ._common import (
    DEFAULT_TIMEOUT,
    MAX_LINE,
    Extended,
    Grant,
    Leader,
    Mode,
    MultiGrant,
    Permit,
    Unreachable,
    api_error,
    body,
    election_path,
    lock_path,
    multi_path,
    parse_event,
    permit_token,
    resource_list,
    semaphore_path,
    wire_mode,
)
from ._listing import LockInfo, lock_listing
from ._streams_sync import Campaign, Hold, Observer, OnLost
from ._trace import trace_headers

__all__ = ["Client", "Hold", "Campaign", "Observer"]


class _Response:
    """One HTTP/1.1 response read from its connection: status, headers and
    a body read whole or line by line (chunked or sized)."""

    def __init__(self, socket: Socket) -> None:
        self.socket = socket
        self.status = 0
        self.headers: Dict[str, str] = {}
        self._chunked = False
        self._left: Optional[int] = None
        self._buffer = b""
        self._done = False

    def read_head(self) -> None:
        status = self.socket.readline()
        parts = status.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ValueError("not an HTTP answer: %r" % status[:100])
        self.status = int(parts[1])
        while True:
            line = self.socket.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if not self._chunked and "content-length" in self.headers:
            self._left = int(self.headers["content-length"])

    def _piece(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        if self._done:
            return b""
        if self._chunked:
            size_line = self.socket.readline()
            if not size_line:
                raise ConnectionError("the stream ended inside a chunk")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                self.socket.readline()
                self._done = True
                return b""
            data = self.socket.readexactly(size)
            self.socket.readexactly(2)
            return data
        if self._left is not None:
            if self._left == 0:
                self._done = True
                return b""
            data = self.socket.read(min(self._left, 65536))
            if not data:
                raise ConnectionError("the answer ended early")
            self._left -= len(data)
            return data
        data = self.socket.read(65536)
        if not data:
            self._done = True
        return data

    def read_all(self) -> bytes:
        out = [self._buffer]
        self._buffer = b""
        while True:
            piece = self._piece()
            if not piece:
                return b"".join(out)
            out.append(piece)

    def readline(self) -> bytes:
        """One line of the body with its newline; b"" at the end."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE:
                raise ValueError("a stream line over %d bytes" % MAX_LINE)
            piece = self._piece()
            if not piece:
                line, self._buffer = self._buffer, b""
                return line
            self._buffer += piece
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def close(self) -> None:
        self.socket.close()


def _failure(e: BaseException) -> str:
    return str(e) or type(e).__name__


class Client:
    """A client of the agent listening on `socket_path`. Each call opens its
    own connection, so one client may be shared by threads (blocking) or
    tasks (asyncio).

    ## Behavior
    - Every call is one request on a fresh connection, bounded by `timeout`
      seconds plus the `wait_ms` it asks the agent for.
    - An agent that cannot be reached raises `Unreachable`; an error answer
      raises the `ApiError` subclass of its code.
    - Streams (holds, campaigns) read their events on a daemon thread
      (blocking) or in a task (asyncio) and report a loss through `lost`,
      `check()`, `on_lost` and `LockLost` (and `guard()` in asyncio).
    """

    def __init__(self, socket_path: Any, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.socket_path = str(socket_path)
        self.timeout = timeout

    def _open(
        self, method: str, path: str, payload: Optional[Dict[str, Any]], limit: float
    ) -> _Response:
        """Sends one request; the response with its head read."""
        socket = None
        try:
            socket = Socket.connect(self.socket_path, time.monotonic() + limit)
            socket.deadline = time.monotonic() + limit
            data = b"" if payload is None else json.dumps(payload).encode()
            head = "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" % (method, path)
            for name, value in trace_headers().items():
                head += "%s: %s\r\n" % (name, value)
            if payload is not None:
                head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
            socket.write(head.encode("ascii") + b"\r\n" + data)
            response = _Response(socket)
            response.read_head()
            return response
        except (OSError, ValueError) as e:
            # A timeout is an OSError too (TimeoutError).
            if socket is not None:
                socket.close()
            where = "%s %s on %s" % (method, path, self.socket_path)
            raise Unreachable("%s: %s" % (where, _failure(e))) from e

    def _read_all(self, response: _Response, method: str, path: str, limit: float) -> bytes:
        """The whole body; the connection closed."""
        response.socket.deadline = time.monotonic() + limit
        try:
            return response.read_all()
        except (OSError, ValueError) as e:
            raise Unreachable("%s %s: %s" % (method, path, _failure(e))) from e
        finally:
            response.close()

    def _call(
        self,
        method: str,
        path: str,
        payload: Optional[Dict[str, Any]] = None,
        wait_ms: Optional[int] = None,
    ) -> Any:
        limit = self.timeout + (wait_ms or 0) / 1000.0
        response = self._open(method, path, payload, limit)
        data = self._read_all(response, method, path, limit)
        if not 200 <= response.status < 300:
            raise api_error(response.status, data)
        try:
            return json.loads(data)
        except ValueError as e:
            raise Unreachable("unexpected answer: %d %r" % (response.status, data[:200])) from e

    def _stream(
        self, method: str, path: str, payload: Optional[Dict[str, Any]], wait_ms: Optional[int]
    ) -> _Response:
        """Opens a stream: its response, status 200, with no deadline."""
        limit = self.timeout + (wait_ms or 0) / 1000.0
        response = self._open(method, path, payload, limit)
        if response.status != 200:
            raise api_error(response.status, self._read_all(response, method, path, limit))
        response.socket.deadline = None
        return response

    def _first(self, response: _Response, path: str, kind: str) -> Dict[str, Any]:
        response.socket.deadline = time.monotonic() + self.timeout
        try:
            first = parse_event(response.readline())
        except (OSError, ValueError) as e:
            response.close()
            raise Unreachable("POST %s: %s" % (path, _failure(e))) from e
        if first is None or first.get("event") != kind:
            response.close()
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
        mode: Mode = "exclusive",
    ) -> Grant:
        """The lock, if a quorum granted it within `wait_ms` (default: one
        attempt). `ttl_ms` defaults to the agent's `lock.default_ttl`.
        `token=` re-enters a lock this process holds: same token, and
        `hold_count` releases before it is released on the masters.
        `mode="shared"` takes it as a reader: any number of readers at once,
        none while an exclusive holder (the default) has it.

        Raises Taken, NoQuorum, ApiError (refused request; `not_reentrant`
        for a re-entry in another mode than the grant's) or Unreachable,
        and ValueError for a mode other than `shared` or `exclusive`."""
        payload = body(
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            fence=fence,
            token=token,
            mode=wire_mode(mode),
        )
        answer = self._call("POST", lock_path(resource, "acquire"), payload, wait_ms)
        return Grant(answer, time.monotonic())

    def extend(self, resource: str, token: str, ttl_ms: Optional[int] = None) -> Extended:
        """A new TTL from now. Raises Lost when it was not extended on a
        quorum in time: stop using the lock."""
        payload = body(token=token, ttl_ms=ttl_ms)
        answer = self._call("POST", lock_path(resource, "extend"), payload)
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
        """The lock keys on the masters (never tokens), as the agent lists
        them: `quorum`, `masters`, and `locks`, each a LockInfo (`mode`,
        `readers`, `owner`, ...)."""
        return lock_listing(self._call("GET", "/v1/locks"))

    def lock_info(self, resource: str) -> LockInfo:
        """One lock as every master has it now (never its token): for a
        lock held shared, `mode` and its `readers`. Raises ApiError (404
        `not_found`) when no master has a key for it."""
        answer = self._call("GET", lock_path(resource))
        return LockInfo(answer["lock"])

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
        mode: Mode = "exclusive",
    ) -> Opening[Hold]:
        """A lock held while the returned hold is open (`with client.hold(...)
        as lock:`; in asyncio `async with`, or `lock = await
        client.hold(...)`): the agent renews it every third of the TTL and
        releases it when the connection closes (`on_disconnect="expire"` lets
        it expire instead). `token=` re-enters a lock this process holds for
        as long as the hold lasts (closing it then lowers the count as a
        release does). `on_lost(LockLost)` is called from the reader (thread
        or task) when the lock is lost. `mode="shared"` holds it as a
        reader, as in `acquire`.

        Raises as `acquire` when the lock is not granted."""
        payload = body(
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            max_hold_ms=max_hold_ms,
            fence=fence,
            on_disconnect=on_disconnect,
            token=token,
            mode=wire_mode(mode),
        )
        path = lock_path(resource, "hold")
        return opening(self._hold(path, resource, payload, wait_ms, on_lost, mode=mode))

    def _hold(
        self,
        path: str,
        name: str,
        payload: Dict[str, Any],
        wait_ms: Optional[int],
        on_lost: Optional[OnLost],
        resources: Optional[List[str]] = None,
        mode: Mode = "exclusive",
    ) -> Hold:
        response = self._stream("POST", path, payload, wait_ms)
        first = self._first(response, path, "acquired")
        return Hold(self, name, response, first, time.monotonic(), on_lost, resources, mode)

    # Locks on several resources at once.

    def acquire_many(
        self,
        resources: Sequence[str],
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        owner: Optional[str] = None,
        fence: Optional[bool] = None,
    ) -> MultiGrant:
        """A lock on every one of `resources` (2 to 32 distinct names), all
        granted or none, under one token; options as in `acquire`.

        Raises Taken (one of them stayed held for all of `wait_ms`),
        NoQuorum, ApiError or Unreachable."""
        payload = body(
            resources=resource_list(resources),
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            fence=fence,
        )
        answer = self._call("POST", multi_path("acquire"), payload, wait_ms)
        return MultiGrant(answer, time.monotonic())

    def extend_many(
        self,
        token: str,
        ttl_ms: Optional[int] = None,
        resources: Optional[Sequence[str]] = None,
    ) -> Extended:
        """A new TTL from now for every resource of the token's grant.
        `resources` is needed only through an agent that did not grant it.
        Raises Lost: stop using all of them."""
        payload = body(token=token, ttl_ms=ttl_ms, resources=resource_list(resources))
        answer = self._call("POST", multi_path("extend"), payload)
        return Extended(answer, time.monotonic())

    def release_many(self, token: str, resources: Optional[Sequence[str]] = None) -> bool:
        """Releases every resource of the token's grant on every master;
        False as `release`, `resources` as in `extend_many`."""
        payload = body(token=token, resources=resource_list(resources))
        answer = self._call("POST", multi_path("release"), payload)
        return bool(answer["released"])

    def hold_many(
        self,
        resources: Sequence[str],
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        owner: Optional[str] = None,
        max_hold_ms: Optional[int] = None,
        fence: Optional[bool] = None,
        on_lost: Optional[OnLost] = None,
        on_disconnect: Optional[str] = None,
    ) -> Opening[Hold]:
        """Every one of `resources` held while the returned hold is open,
        exactly as `hold` holds one lock: renewed together, lost together,
        released together when it closes. Its `resources` are sorted."""
        names = sorted(resource_list(resources) or [])
        payload = body(
            resources=names,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            max_hold_ms=max_hold_ms,
            fence=fence,
            on_disconnect=on_disconnect,
        )
        path = multi_path("hold")
        return opening(self._hold(path, ",".join(names), payload, wait_ms, on_lost, names))

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
        self,
        name: str,
        permit: Union[int, str, None] = None,
        token: Optional[str] = None,
        ttl_ms: Optional[int] = None,
    ) -> Extended:
        """A new TTL from now for a permit, named by its token alone
        (`extend_permit(name, token)`; the older `(name, permit, token)`
        works too). Raises Lost: stop using it."""
        payload = dict(permit_token(permit, token), **body(ttl_ms=ttl_ms))
        answer = self._call("POST", semaphore_path(name, "extend"), payload)
        return Extended(answer, time.monotonic())

    def release_permit(
        self, name: str, permit: Union[int, str, None] = None, token: Optional[str] = None
    ) -> bool:
        """Releases a permit on every master, named as in `extend_permit`;
        False as `release`."""
        payload = permit_token(permit, token)
        answer = self._call("POST", semaphore_path(name, "release"), payload)
        return bool(answer["released"])

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
    ) -> Opening[Hold]:
        """A permit held while the returned hold is open, exactly as `hold`
        holds a lock; its `permit` says which one."""
        payload = body(
            limit=limit,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            max_hold_ms=max_hold_ms,
            fence=fence,
            on_disconnect=on_disconnect,
        )
        return opening(self._hold(semaphore_path(name, "hold"), name, payload, wait_ms, on_lost))

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
    ) -> Opening[Campaign]:
        """Campaigns to lead election `name`: the campaign, at once;
        `wait_elected()` waits until it leads. `value` (up to 1024 bytes) is
        published to everyone who asks who leads. Closing the campaign
        resigns (or stops waiting)."""
        payload = body(ttl_ms=ttl_ms, owner=owner, value=value, max_hold_ms=max_hold_ms)
        return opening(self._campaign(name, payload, on_lost))

    def _campaign(
        self, name: str, payload: Dict[str, Any], on_lost: Optional[OnLost]
    ) -> Campaign:
        response = self._stream("POST", election_path(name, "campaign"), payload, None)
        return Campaign(self, name, response, on_lost)

    def leader(self, name: str) -> Leader:
        """Who leads election `name` now. Raises NoLeader when no one does."""
        return Leader(self._call("GET", election_path(name)))

    def observe(self, name: str) -> Opening[Observer]:
        """The leader of election `name` now, then every change, as an
        iterator of `Leader` (or None: no leader); in asyncio `async for`.
        Close it when done."""
        return opening(self._observe(name))

    def _observe(self, name: str) -> Observer:
        return Observer(self._stream("GET", election_path(name, "observe"), None, None))

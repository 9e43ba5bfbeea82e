"""The asyncio client: the same calls as `redlock_client.Client`, as
coroutines over asyncio's Unix-socket streams (standard library only), so
waiting for a lock never blocks the event loop.

    from redlock_client.aio import AsyncClient

    client = AsyncClient("/run/redlock/agent.sock")
    async with client.hold("orders-42", ttl_ms=10_000, wait_ms=5_000) as lock:
        await lock.guard(do_the_work())   # cancelled the moment the lock is lost
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Generic,
    Literal,
    Optional,
    cast,
    TypeVar,
)

from ._common import (
    DEFAULT_TIMEOUT,
    MAX_LINE,
    Extended,
    Grant,
    Leader,
    LockLost,
    Permit,
    RedlockError,
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

__all__ = ["AsyncClient", "AsyncHold", "AsyncCampaign", "AsyncObserver"]

T = TypeVar("T")
S = TypeVar("S", bound="_AsyncStream")
OnLost = Callable[[LockLost], None]


class _Response:
    """One HTTP/1.1 response read from its connection: status, headers and
    a body read whole or line by line (chunked or sized)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.status = 0
        self.headers: Dict[str, str] = {}
        self._chunked = False
        self._left: Optional[int] = None
        self._buffer = b""
        self._done = False

    async def read_head(self) -> None:
        status = await self.reader.readline()
        parts = status.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ValueError("not an HTTP answer: %r" % status[:100])
        self.status = int(parts[1])
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if not self._chunked and "content-length" in self.headers:
            self._left = int(self.headers["content-length"])

    async def _piece(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        if self._done:
            return b""
        if self._chunked:
            size_line = await self.reader.readline()
            if not size_line:
                raise ConnectionError("the stream ended inside a chunk")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                await self.reader.readline()
                self._done = True
                return b""
            data = await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            return data
        if self._left is not None:
            if self._left == 0:
                self._done = True
                return b""
            data = await self.reader.read(min(self._left, 65536))
            if not data:
                raise ConnectionError("the answer ended early")
            self._left -= len(data)
            return data
        data = await self.reader.read(65536)
        if not data:
            self._done = True
        return data

    async def read_all(self) -> bytes:
        out = [self._buffer]
        self._buffer = b""
        while True:
            piece = await self._piece()
            if not piece:
                return b"".join(out)
            out.append(piece)

    async def readline(self) -> bytes:
        """One line of the body with its newline; b"" at the end."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE:
                raise ValueError("a stream line over %d bytes" % MAX_LINE)
            piece = await self._piece()
            if not piece:
                line, self._buffer = self._buffer, b""
                return line
            self._buffer += piece
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def close(self) -> None:
        self.writer.close()


class _Opening(Generic[T]):
    """A stream being opened: `await` it, or use it in `async with`, which
    closes the stream at the end of the block."""

    def __init__(self, opening: Awaitable[T]) -> None:
        self._opening = opening
        self._stream: Optional[T] = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._opening.__await__()

    async def __aenter__(self) -> T:
        self._stream = await self._opening
        return cast(T, await self._stream.__aenter__())  # type: ignore[attr-defined]

    async def __aexit__(self, *exc: Any) -> Any:
        assert self._stream is not None  # set by __aenter__, which ran
        return await self._stream.__aexit__(*exc)  # type: ignore[attr-defined]


class AsyncClient:
    """A client of the agent listening on `socket_path`, for asyncio. Each
    call opens its own connection; one client may serve many tasks.

    ## Behavior
    - Every call is one request on a fresh connection, bounded by `timeout`
      seconds plus the `wait_ms` it asks the agent for.
    - An agent that cannot be reached raises `Unreachable`; an error answer
      raises the `ApiError` subclass of its code.
    - Streams (holds, campaigns) read their events in a task of their own
      and report a loss through `lost`, `check()`, `guard()`, `on_lost` and
      `LockLost`.
    """

    def __init__(self, socket_path: Any, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.socket_path = str(socket_path)
        self.timeout = timeout

    async def _open(
        self, method: str, path: str, payload: Optional[Dict[str, Any]], limit: float
    ) -> _Response:
        """Sends one request; the response with its head read."""
        writer = None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.socket_path, limit=MAX_LINE * 2), limit
            )
            data = b"" if payload is None else json.dumps(payload).encode()
            head = "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" % (method, path)
            for name, value in trace_headers().items():
                head += "%s: %s\r\n" % (name, value)
            if payload is not None:
                head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
            writer.write(head.encode("ascii") + b"\r\n" + data)
            response = _Response(reader, writer)
            await asyncio.wait_for(response.read_head(), limit)
            return response
        except (OSError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
            if writer is not None:
                writer.close()
            raise Unreachable("%s %s on %s: %s" % (method, path, self.socket_path, str(e) or type(e).__name__)) from e

    async def _call(
        self,
        method: str,
        path: str,
        payload: Optional[Dict[str, Any]] = None,
        wait_ms: Optional[int] = None,
    ) -> Any:
        limit = self.timeout + (wait_ms or 0) / 1000.0
        response = await self._open(method, path, payload, limit)
        try:
            data = await asyncio.wait_for(response.read_all(), limit)
        except (OSError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
            raise Unreachable("%s %s: %s" % (method, path, str(e) or type(e).__name__)) from e
        finally:
            response.close()
        if not 200 <= response.status < 300:
            raise api_error(response.status, data)
        try:
            return json.loads(data)
        except ValueError as e:
            raise Unreachable("unexpected answer: %d %r" % (response.status, data[:200])) from e

    async def _stream(
        self, method: str, path: str, payload: Optional[Dict[str, Any]], wait_ms: Optional[int]
    ) -> _Response:
        limit = self.timeout + (wait_ms or 0) / 1000.0
        response = await self._open(method, path, payload, limit)
        if response.status != 200:
            try:
                data = await asyncio.wait_for(response.read_all(), limit)
            except (OSError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
                raise Unreachable("%s %s: %s" % (method, path, str(e) or type(e).__name__)) from e
            finally:
                response.close()
            raise api_error(response.status, data)
        return response

    async def _first(self, response: _Response, path: str, kind: str) -> Dict[str, Any]:
        try:
            first = parse_event(await asyncio.wait_for(response.readline(), self.timeout))
        except (OSError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
            response.close()
            raise Unreachable("POST %s: %s" % (path, str(e) or type(e).__name__)) from e
        if first is None or first.get("event") != kind:
            response.close()
            raise Unreachable("a stream must start with `%s`, got %r" % (kind, first))
        return first

    # Locks.

    async def acquire(
        self,
        resource: str,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        owner: Optional[str] = None,
        fence: Optional[bool] = None,
        token: Optional[str] = None,
    ) -> Grant:
        """As `Client.acquire`."""
        payload = body(ttl_ms=ttl_ms, wait_ms=wait_ms, owner=owner, fence=fence, token=token)
        answer = await self._call("POST", lock_path(resource, "acquire"), payload, wait_ms)
        return Grant(answer, time.monotonic())

    async def extend(self, resource: str, token: str, ttl_ms: Optional[int] = None) -> Extended:
        """As `Client.extend`."""
        payload = body(token=token, ttl_ms=ttl_ms)
        answer = await self._call("POST", lock_path(resource, "extend"), payload)
        return Extended(answer, time.monotonic())

    async def release(self, resource: str, token: str) -> bool:
        """As `Client.release`."""
        answer = await self._call("POST", lock_path(resource, "release"), {"token": token})
        return bool(answer["released"])

    async def force_release(self, resource: str) -> Dict[str, Any]:
        """As `Client.force_release` (admin socket)."""
        answer: Dict[str, Any] = await self._call("POST", lock_path(resource, "force-release"))
        return answer

    async def nodes(self) -> Dict[str, Any]:
        answer: Dict[str, Any] = await self._call("GET", "/v1/nodes")
        return answer

    async def locks(self) -> Dict[str, Any]:
        answer: Dict[str, Any] = await self._call("GET", "/v1/locks")
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
    ) -> "_Opening[AsyncHold]":
        """A lock held while the returned `AsyncHold` is open, as
        `Client.hold`: `async with client.hold(...) as lock:` or
        `lock = await client.hold(...)`."""
        payload = body(
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            max_hold_ms=max_hold_ms,
            fence=fence,
            on_disconnect=on_disconnect,
            token=token,
        )
        return _Opening(self._hold(lock_path(resource, "hold"), resource, payload, wait_ms, on_lost))

    async def _hold(
        self,
        path: str,
        name: str,
        payload: Dict[str, Any],
        wait_ms: Optional[int],
        on_lost: Optional[OnLost],
    ) -> "AsyncHold":
        response = await self._stream("POST", path, payload, wait_ms)
        first = await self._first(response, path, "acquired")
        return AsyncHold(self, name, response, first, time.monotonic(), on_lost)

    # Semaphores.

    async def acquire_permit(
        self,
        name: str,
        limit: int,
        ttl_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        owner: Optional[str] = None,
        fence: Optional[bool] = None,
    ) -> Permit:
        """As `Client.acquire_permit`."""
        payload = body(limit=limit, ttl_ms=ttl_ms, wait_ms=wait_ms, owner=owner, fence=fence)
        answer = await self._call("POST", semaphore_path(name, "acquire"), payload, wait_ms)
        return Permit(answer, time.monotonic())

    async def extend_permit(
        self, name: str, permit: int, token: str, ttl_ms: Optional[int] = None
    ) -> Extended:
        """As `Client.extend_permit`."""
        payload = body(permit=permit, token=token, ttl_ms=ttl_ms)
        answer = await self._call("POST", semaphore_path(name, "extend"), payload)
        return Extended(answer, time.monotonic())

    async def release_permit(self, name: str, permit: int, token: str) -> bool:
        """As `Client.release_permit`."""
        payload = {"permit": permit, "token": token}
        answer = await self._call("POST", semaphore_path(name, "release"), payload)
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
    ) -> "_Opening[AsyncHold]":
        """A permit held while the returned `AsyncHold` is open."""
        payload = body(
            limit=limit,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            owner=owner,
            max_hold_ms=max_hold_ms,
            fence=fence,
            on_disconnect=on_disconnect,
        )
        return _Opening(self._hold(semaphore_path(name, "hold"), name, payload, wait_ms, on_lost))

    async def semaphore(self, name: str) -> Dict[str, Any]:
        """As `Client.semaphore`."""
        answer: Dict[str, Any] = await self._call("GET", semaphore_path(name))
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
    ) -> "_Opening[AsyncCampaign]":
        """Campaigns to lead election `name`, as `Client.campaign`; `await
        campaign.wait_elected()` for the term."""
        payload = body(ttl_ms=ttl_ms, owner=owner, value=value, max_hold_ms=max_hold_ms)
        return _Opening(self._campaign(name, payload, on_lost))

    async def _campaign(
        self, name: str, payload: Dict[str, Any], on_lost: Optional[OnLost]
    ) -> "AsyncCampaign":
        response = await self._stream("POST", election_path(name, "campaign"), payload, None)
        return AsyncCampaign(self, name, response, on_lost)

    async def leader(self, name: str) -> Leader:
        """As `Client.leader`: raises NoLeader when no one leads."""
        return Leader(await self._call("GET", election_path(name)))

    def observe(self, name: str) -> "_Opening[AsyncObserver]":
        """The leader now and every change: `async for leader in
        observer` (a `Leader`, or None when no one leads)."""
        return _Opening(self._observe(name))

    async def _observe(self, name: str) -> "AsyncObserver":
        return AsyncObserver(await self._stream("GET", election_path(name, "observe"), None, None))


class _AsyncStream:
    """An open event stream read by a task of its own, with a deadline once
    a validity is known, and one loss notice."""

    def __init__(self, name: str, response: _Response, on_lost: Optional[OnLost]) -> None:
        self._name = name
        self._response = response
        self._on_lost = on_lost
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self.validity_ms = 0
        self.valid_until: Optional[float] = None
        self._closed = False
        self._task: Optional["asyncio.Task[None]"] = None

    def _start(self) -> None:
        self._task = asyncio.ensure_future(self._read())

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> "Literal[False]":
        counts = self._counts_loss()
        await self.close()
        if exc_type is None and counts and self.lost.is_set():
            raise LockLost(self._name, self.lost_reason or "lost")
        return False

    def _counts_loss(self) -> bool:
        return True

    def check(self) -> None:
        """Raises LockLost if it is lost."""
        if self.lost.is_set():
            raise LockLost(self._name, self.lost_reason or "lost")

    async def wait_lost(self) -> LockLost:
        """Returns (not raises) the LockLost once it is lost."""
        await self.lost.wait()
        return LockLost(self._name, self.lost_reason or "lost")

    async def guard(self, work: Awaitable[T]) -> T:
        """Runs `work` and cancels it the moment this is lost, raising
        LockLost then: the asyncio form of stopping work on loss."""
        task = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            raise LockLost(self._name, self.lost_reason or "lost")
        return task.result()

    async def close(self) -> None:
        """Ends the stream: the connection closes, and the agent releases
        (or resigns) on every master."""
        if self._closed:
            return
        self._closed = True
        self._response.close()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def _renewed(self, validity_ms: int) -> None:
        self.validity_ms = validity_ms
        self.valid_until = time.monotonic() + validity_ms / 1000.0

    def _lose(self, reason: str) -> None:
        if self._closed or self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        self._closed = True
        self._response.close()
        if self._on_lost is not None:
            self._on_lost(LockLost(self._name, reason))

    def _deadline(self) -> Optional[float]:
        # Lost when no renewal arrived by a twentieth of the last validity
        # before its end (the agent or its host is frozen).
        if self.valid_until is None:
            return None
        return self.valid_until - self.validity_ms / 20000.0 - time.monotonic()

    async def _read(self) -> None:
        while not self._closed:
            left = self._deadline()
            try:
                if left is None:
                    line = await self._response.readline()
                else:
                    line = await asyncio.wait_for(self._response.readline(), max(left, 0.0))
                event = parse_event(line)
            except asyncio.TimeoutError:
                self._lose("expired")
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure ends the stream
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


class AsyncHold(_AsyncStream):
    """A held lock or permit, renewed by the agent while open; attributes
    as `redlock_client.Hold`, with `lost` an `asyncio.Event`."""

    def __init__(
        self,
        client: AsyncClient,
        resource: str,
        response: _Response,
        acquired: Dict[str, Any],
        arrived: float,
        on_lost: Optional[OnLost],
    ) -> None:
        super().__init__(resource, response, on_lost)
        self.client = client
        self.resource = resource
        self.permit: Optional[int] = acquired.get("permit")
        self.token: str = acquired["token"]
        self.ttl_ms: int = acquired["ttl_ms"]
        self.fence: Optional[int] = acquired.get("fence")
        self.hold_count: Optional[int] = acquired.get("hold_count")
        self.validity_ms = acquired["validity_ms"]
        self.valid_until = arrived + self.validity_ms / 1000.0
        self._start()

    def __repr__(self) -> str:
        return "AsyncHold(resource=%r, permit=%r, ttl_ms=%d, lost=%r)" % (
            self.resource,
            self.permit,
            self.ttl_ms,
            self.lost_reason,
        )

    async def release(self) -> bool:
        """Releases through the API, then closes the hold."""
        try:
            if self.permit is None:
                return await self.client.release(self.resource, self.token)
            return await self.client.release_permit(self.resource, self.permit, self.token)
        finally:
            await self.close()


class AsyncCampaign(_AsyncStream):
    """A campaign for an election's leadership; attributes as
    `redlock_client.Campaign`, with `elected` and `lost` asyncio Events."""

    def __init__(
        self, client: AsyncClient, election: str, response: _Response, on_lost: Optional[OnLost]
    ) -> None:
        super().__init__(election, response, on_lost)
        self.client = client
        self.election = election
        self.term: Optional[int] = None
        self.ttl_ms: Optional[int] = None
        self.leader: Optional[Leader] = None
        self.elected = asyncio.Event()
        self._start()

    def __repr__(self) -> str:
        return "AsyncCampaign(election=%r, term=%r, lost=%r)" % (
            self.election,
            self.term,
            self.lost_reason,
        )

    def _counts_loss(self) -> bool:
        return self.elected.is_set()

    @property
    def is_leader(self) -> bool:
        return self.elected.is_set() and not self.lost.is_set() and not self._closed

    async def wait_elected(self) -> int:
        """Waits until this campaigner leads: its term. Raises LockLost if
        the campaign ended first (or the leadership was already lost). Bound
        it with `asyncio.wait_for`."""
        elected = asyncio.ensure_future(self.elected.wait())
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait({elected, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            elected.cancel()
            lost.cancel()
        self.check()
        assert self.term is not None  # set with `elected`, which is set
        return self.term

    async def resign(self) -> None:
        """Gives up the leadership (or stops waiting): `close()`."""
        await self.close()

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
        elif kind == "renewed":
            self._renewed(event["validity_ms"])


class AsyncObserver:
    """The leader of an election and every change: `async for leader in
    observer`, each a `Leader` or None (no leader)."""

    def __init__(self, response: _Response) -> None:
        self._response = response

    async def __aenter__(self) -> "AsyncObserver":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Optional[Leader]]:
        return self._events()

    async def _events(self) -> AsyncIterator[Optional[Leader]]:
        while True:
            try:
                event = parse_event(await self._response.readline())
            except (OSError, ValueError, asyncio.IncompleteReadError, RedlockError):
                return
            if event is None:
                return
            yield observed(event)

    async def close(self) -> None:
        self._response.close()

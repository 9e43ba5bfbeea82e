"""What only asyncio does differently, for `aio.py`: the Unix socket over
asyncio's streams, a stream's reader as a task, events, and the waits whose
signatures differ from the blocking ones (`wait_lost`, `guard`,
`wait_elected`). `_backend_sync.py` has the same names for blocking I/O;
everything else is written once, in `aio.py`."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Coroutine, Generator, Generic, Optional, TypeVar, cast

from ._common import MAX_LINE, LockLost

T = TypeVar("T")

Event = asyncio.Event

NO_VALIDITY: Optional[float] = None
"""`valid_until` of a campaign not elected yet."""


async def _within(deadline: Optional[float], work: Awaitable[T]) -> T:
    """`work`, or TimeoutError once `deadline` (`time.monotonic()`) has
    passed."""
    if deadline is None:
        return await work
    left = deadline - time.monotonic()
    try:
        return await asyncio.wait_for(work, max(left, 0.0))
    except asyncio.TimeoutError:
        raise TimeoutError("timed out") from None


class Socket:
    """A connection to a Unix socket. Every read and write raises
    TimeoutError once `deadline` (`time.monotonic()`, None: none) has
    passed, and ConnectionError when the connection ends inside a read of
    known size."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.deadline: Optional[float] = None

    @classmethod
    async def connect(cls, path: str, deadline: float) -> "Socket":
        reader, writer = await _within(
            deadline, asyncio.open_unix_connection(path, limit=MAX_LINE * 2)
        )
        return cls(reader, writer)

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await _within(self.deadline, self._writer.drain())

    async def readline(self) -> bytes:
        """Up to and including the next newline; what is left at the end."""
        return await _within(self.deadline, self._reader.readline())

    async def readexactly(self, size: int) -> bytes:
        try:
            return await _within(self.deadline, self._reader.readexactly(size))
        except asyncio.IncompleteReadError as e:
            raise ConnectionError("the connection ended early") from e

    async def read(self, size: int) -> bytes:
        """Up to `size` bytes, as soon as any arrived; b"" at the end."""
        return await _within(self.deadline, self._reader.read(size))

    def close(self) -> None:
        self._writer.close()


def spawn(read: Callable[[], Coroutine[Any, Any, None]], name: str) -> "asyncio.Task[None]":
    """Runs a stream's reader: a task of its own, named as the blocking
    client names its thread."""
    return asyncio.get_running_loop().create_task(read(), name=name)


async def stop(task: "Optional[asyncio.Task[None]]") -> None:
    """Cancels a stream's reader and waits for it, unless it is the caller."""
    if task is not None and task is not asyncio.current_task():
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass


class Opening(Generic[T]):
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


def opening(stream: Awaitable[T]) -> Opening[T]:
    return Opening(stream)


class StreamWaits:
    """The waits of a hold or a campaign, in asyncio."""

    _name: str
    lost: asyncio.Event
    lost_reason: Optional[str]

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


class CampaignWaits(StreamWaits):
    """The wait for an election, in asyncio."""

    term: Optional[int]
    _settled: asyncio.Event

    async def wait_elected(self) -> int:
        """Waits until this campaigner leads: its term. Raises LockLost if
        the campaign ended first (or the leadership was already lost). Bound
        it with `asyncio.wait_for`."""
        await self._settled.wait()
        if self.lost.is_set():
            raise LockLost(self._name, self.lost_reason or "lost")
        assert self.term is not None  # set before `_settled`, which is set
        return self.term

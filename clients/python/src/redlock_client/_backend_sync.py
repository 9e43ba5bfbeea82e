"""What only blocking I/O does differently, for the generated `_sync.py`:
the Unix socket over `socket`, a stream's reader as a daemon thread, events,
and the waits whose signatures differ from the asyncio ones (`wait_lost`,
`wait_elected`, with a timeout). `_backend_async.py` has the same names for
asyncio; everything else is written once, in `aio.py`."""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

from ._common import MAX_LINE, LockLost

T = TypeVar("T")

Event = threading.Event

NO_VALIDITY: Optional[float] = 0.0
"""`valid_until` of a campaign not elected yet."""


class Socket:
    """A connection to a Unix socket. Every read and write raises
    TimeoutError once `deadline` (`time.monotonic()`, None: none) has
    passed, and ConnectionError when the connection ends inside a read of
    known size. `close()` may be called from another thread: it wakes a
    read blocked there, which then ends as at the end of the stream."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""
        self.deadline: Optional[float] = None

    @classmethod
    def connect(cls, path: str, deadline: float) -> "Socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.0))
            sock.connect(path)
        except socket.timeout:
            sock.close()
            raise TimeoutError("timed out") from None
        except OSError:
            sock.close()
            raise
        return cls(sock)

    def _limit(self) -> None:
        left = None if self.deadline is None else self.deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("timed out")
        self._sock.settimeout(left)

    def write(self, data: bytes) -> None:
        self._limit()
        try:
            self._sock.sendall(data)
        except socket.timeout:
            raise TimeoutError("timed out") from None

    def _fill(self) -> bool:
        """Receives more into the buffer; False at the end of the stream."""
        self._limit()
        try:
            data = self._sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("timed out") from None
        self._buffer += data
        return bool(data)

    def readline(self) -> bytes:
        """Up to and including the next newline; what is left at the end."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE * 2:
                raise ValueError("a line over %d bytes" % (MAX_LINE * 2))
            if not self._fill():
                line, self._buffer = self._buffer, b""
                return line
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def readexactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not self._fill():
                raise ConnectionError("the connection ended early")
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def read(self, size: int) -> bytes:
        """Up to `size` bytes, as soon as any arrived; b"" at the end."""
        if not self._buffer:
            self._fill()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected, or already shut down
        self._sock.close()


def spawn(read: Callable[[], None], name: str) -> threading.Thread:
    """Runs a stream's reader: a daemon thread of its own."""
    thread = threading.Thread(target=read, name=name, daemon=True)
    thread.start()
    return thread


def stop(thread: Optional[threading.Thread]) -> None:
    """Nothing to do: the reader ends by itself once its socket is closed."""


if TYPE_CHECKING:
    Opening = Union[T, T]
else:

    class Opening:
        """`Opening[Hold]` is `Hold`: a blocking call returns the stream
        already open (and `typing.get_type_hints` sees just that)."""

        def __class_getitem__(cls, stream: Any) -> Any:
            return stream


def opening(stream: T) -> T:
    return stream


class StreamWaits:
    """The wait for a loss of a hold or a campaign, blocking."""

    lost: threading.Event

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Blocks until it is lost (True) or `timeout` seconds pass (False)."""
        return self.lost.wait(timeout)


class CampaignWaits(StreamWaits):
    """The wait for an election, blocking."""

    _name: str
    lost_reason: Optional[str]
    term: Optional[int]
    _settled: threading.Event

    def wait_elected(self, timeout: Optional[float] = None) -> Optional[int]:
        """Blocks until this campaigner leads: its term. None when `timeout`
        seconds passed first. Raises LockLost if the campaign ended first
        (or the leadership was already lost)."""
        if not self._settled.wait(timeout):
            return None
        if self.lost.is_set():
            raise LockLost(self._name, self.lost_reason or "lost")
        return self.term

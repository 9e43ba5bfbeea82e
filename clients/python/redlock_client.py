"""A client of the redlock-agent socket API, standard library only.

The agent runs beside the application and serves distributed locks (Redlock
over N Redis masters) as HTTP/1.1 + JSON on a Unix socket. This module is
that API for Python 3.8+: copy the file next to your code, nothing to
install.

    from redlock_client import Client, LockLost

    client = Client("/run/redlock/agent.sock")
    with client.hold("orders-42", ttl_ms=10_000, wait_ms=5_000, owner="billing") as lock:
        for step in work():
            lock.check()          # raises LockLost once the lock is lost
            step()
    # left the block: released on every master

`acquire` / `extend` / `release` map one-to-one to the API. `hold` keeps the
lock for as long as the `with` block runs: the agent renews it and a thread
reads its event stream. Python cannot stop arbitrary code from another
thread, so a loss is reported where the code looks: `lock.check()` raises
`LockLost`, `lock.lost` is a `threading.Event`, `on_lost` is called from the
reader thread, and leaving the block raises `LockLost` if the lock was lost
inside it (the work may have overlapped another holder's).

Resources are given as they are; they are percent-encoded here, once.
`fence=True` asks the agent for a fencing token: the answer's `fence`, a
number larger than every earlier grant's, to pass to storage with each write.
"""

import http.client
import json
import socket
import threading
import time
import urllib.parse

__all__ = [
    "Client",
    "Grant",
    "Extended",
    "Hold",
    "RedlockError",
    "ApiError",
    "Taken",
    "Lost",
    "NoQuorum",
    "Unreachable",
    "LockLost",
]

DEFAULT_TIMEOUT = 5.0
"""Seconds a request may take beyond the wait it asks the agent for."""


class RedlockError(Exception):
    """Every error of this module."""


class ApiError(RedlockError):
    """The agent answered an error: `status`, `code` (`ttl_out_of_range`,
    `invalid_resource`, ...) and `message`."""

    def __init__(self, status, code, message):
        super().__init__("%d %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message


class Taken(ApiError):
    """409 `taken`: another holder kept the lock for all of `wait_ms`."""


class Lost(ApiError):
    """409 `lost`: not extended on a quorum in time; stop using the lock."""


class NoQuorum(ApiError):
    """503 `no_quorum`: fewer than N/2+1 masters usable, or (release) too
    many failed to tell whether they held the lock; retry later."""


class Unreachable(RedlockError):
    """The socket could not be reached, the connection failed, or no answer
    came in time. For an acquire, the lock may or may not have been granted;
    it then expires with its TTL."""


class LockLost(RedlockError):
    """A held lock was lost: `reason` is the agent's (`renew_failed`,
    `no_quorum`, `max_hold`, `shutdown`, `force_released`, `node_lost`),
    `disconnected` (the hold's connection ended without a notice) or
    `expired` (no renewal arrived before the validity ran out, on this
    process's clock)."""

    def __init__(self, resource, reason):
        super().__init__("the lock on %s was lost: %s" % (resource, reason))
        self.resource = resource
        self.reason = reason


_CODES = {"taken": Taken, "lost": Lost, "no_quorum": NoQuorum}


def _api_error(status, body):
    try:
        error = json.loads(body)["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        return Unreachable("unexpected answer: %d %r" % (status, body[:200]))
    return _CODES.get(code, ApiError)(status, code, message)


def lock_path(resource, action):
    """`/v1/locks/{resource}/{action}` with the resource percent-encoded as
    one path segment (`/` included). The only place resources are encoded."""
    return "/v1/locks/%s/%s" % (urllib.parse.quote(resource, safe=""), action)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Grant:
    """A granted lock. `valid_until` is on `time.monotonic()`'s clock: use
    the lock only before it."""

    def __init__(self, answer, arrived):
        self.resource = answer["resource"]
        self.token = answer["token"]
        self.ttl_ms = answer["ttl_ms"]
        self.validity_ms = answer["validity_ms"]
        self.valid_until = arrived + self.validity_ms / 1000.0
        # A fencing token, once the agent issues them; None until then.
        self.fence = answer.get("fence")

    def __repr__(self):
        # Never the token: it is the proof of holding the lock.
        return "Grant(resource=%r, ttl_ms=%d, validity_ms=%d)" % (
            self.resource,
            self.ttl_ms,
            self.validity_ms,
        )


class Extended:
    """An extended lock: a new TTL from now."""

    def __init__(self, answer, arrived):
        self.ttl_ms = answer["ttl_ms"]
        self.validity_ms = answer["validity_ms"]
        self.valid_until = arrived + self.validity_ms / 1000.0

    def __repr__(self):
        return "Extended(ttl_ms=%d, validity_ms=%d)" % (self.ttl_ms, self.validity_ms)


def _body(**fields):
    return {k: v for k, v in fields.items() if v is not None}


class Client:
    """A client of the agent listening on `socket_path`. Each call opens its
    own connection, so one client may be shared by threads."""

    def __init__(self, socket_path, timeout=DEFAULT_TIMEOUT):
        self.socket_path = str(socket_path)
        self.timeout = timeout

    def _connect(self, wait_ms):
        return _UnixConnection(self.socket_path, self.timeout + (wait_ms or 0) / 1000.0)

    def _call(self, method, path, body=None, wait_ms=None):
        conn = self._connect(wait_ms)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except OSError as e:
            # socket.timeout is an OSError too.
            raise Unreachable("%s %s on %s: %s" % (method, path, self.socket_path, e)) from e
        except http.client.HTTPException as e:
            raise Unreachable("%s %s: %s" % (method, path, e)) from e
        finally:
            conn.close()
        if not 200 <= response.status < 300:
            raise _api_error(response.status, data)
        try:
            return json.loads(data)
        except ValueError as e:
            raise Unreachable("unexpected answer: %d %r" % (response.status, data[:200])) from e

    def acquire(self, resource, ttl_ms=None, wait_ms=None, owner=None, fence=None):
        """The lock, if a quorum granted it within `wait_ms` (default: one
        attempt). `ttl_ms` defaults to the agent's `lock.default_ttl`; the
        agent accepts twice `lock.node_timeout` to `lock.max_ttl`.

        Raises Taken, NoQuorum, ApiError (refused request) or Unreachable."""
        body = _body(ttl_ms=ttl_ms, wait_ms=wait_ms, owner=owner, fence=fence)
        answer = self._call("POST", lock_path(resource, "acquire"), body, wait_ms)
        return Grant(answer, time.monotonic())

    def extend(self, resource, token, ttl_ms=None):
        """A new TTL from now. Raises Lost when it was not extended on a
        quorum in time: stop using the lock."""
        body = _body(token=token, ttl_ms=ttl_ms)
        answer = self._call("POST", lock_path(resource, "extend"), body)
        return Extended(answer, time.monotonic())

    def release(self, resource, token):
        """Releases on every master. False means no quorum still held it: it
        had expired, and the work may have overlapped another holder's.
        Raises NoQuorum when too many masters failed to tell (a retry with
        the same token is safe)."""
        answer = self._call("POST", lock_path(resource, "release"), {"token": token})
        return answer["released"]

    def force_release(self, resource):
        """For operators: deletes the lock on every master, whoever holds it.
        Its holder hears of it at its next renewal."""
        return self._call("POST", lock_path(resource, "force-release"))

    def nodes(self):
        return self._call("GET", "/v1/nodes")

    def locks(self):
        return self._call("GET", "/v1/locks")

    def hold(
        self,
        resource,
        ttl_ms=None,
        wait_ms=None,
        owner=None,
        max_hold_ms=None,
        fence=None,
        on_lost=None,
    ):
        """A lock held while the returned `Hold` is open (use it in a `with`
        block): the agent renews it every third of the TTL and releases it
        when the connection closes. `on_lost(LockLost)` is called from the
        reader thread when the lock is lost.

        Raises as `acquire` when the lock is not granted."""
        body = _body(
            ttl_ms=ttl_ms, wait_ms=wait_ms, owner=owner, max_hold_ms=max_hold_ms, fence=fence
        )
        conn = self._connect(wait_ms)
        try:
            conn.request(
                "POST",
                lock_path(resource, "hold"),
                body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            if response.status != 200:
                raise _api_error(response.status, response.read())
            first = _event(response.readline())
            if first is None or first.get("event") != "acquired":
                raise Unreachable("a hold must start with `acquired`, got %r" % (first,))
        except OSError as e:
            conn.close()
            raise Unreachable("POST hold on %s: %s" % (self.socket_path, e)) from e
        except (http.client.HTTPException, ValueError) as e:
            conn.close()
            raise Unreachable("POST hold: %s" % e) from e
        except BaseException:
            conn.close()
            raise
        return Hold(self, resource, conn, response, first, time.monotonic(), on_lost)


def _event(line):
    """One NDJSON line as a dict; None at the end of the stream."""
    if not line:
        return None
    return json.loads(line)


class Hold:
    """A held lock, renewed by the agent while open. Attributes: `resource`,
    `token`, `ttl_ms`, `validity_ms` and `valid_until` (on
    `time.monotonic()`, moved by every renewal), `lost` (a
    `threading.Event`) and `lost_reason`."""

    def __init__(self, client, resource, conn, response, acquired, arrived, on_lost):
        self.client = client
        self.resource = resource
        self.token = acquired["token"]
        self.ttl_ms = acquired["ttl_ms"]
        self.validity_ms = acquired["validity_ms"]
        self.valid_until = arrived + self.validity_ms / 1000.0
        self.fence = acquired.get("fence")
        self.lost = threading.Event()
        self.lost_reason = None
        self._on_lost = on_lost
        self._conn = conn
        self._response = response
        self._closed = threading.Event()
        self._conn_closed = False
        self._lock = threading.Lock()
        self._reader = threading.Thread(
            target=self._read, name="redlock-hold-%s" % resource, daemon=True
        )
        self._reader.start()
        self._watchdog = threading.Thread(
            target=self._watch, name="redlock-deadline-%s" % resource, daemon=True
        )
        self._watchdog.start()

    def __repr__(self):
        return "Hold(resource=%r, ttl_ms=%d, lost=%r)" % (
            self.resource,
            self.ttl_ms,
            self.lost_reason,
        )

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        if exc_type is None and self.lost.is_set():
            raise LockLost(self.resource, self.lost_reason)
        return False

    def check(self):
        """Raises LockLost if the lock is lost; call it between steps."""
        if self.lost.is_set():
            raise LockLost(self.resource, self.lost_reason)

    def wait_lost(self, timeout=None):
        """Blocks until the lock is lost (True) or `timeout` seconds pass
        (False)."""
        return self.lost.wait(timeout)

    def release(self):
        """Releases through the API, then closes the hold. True when a
        quorum still held it (see `Client.release`)."""
        try:
            return self.client.release(self.resource, self.token)
        finally:
            self.close()

    def close(self):
        """Ends the hold: the connection closes and the agent releases the
        lock on every master."""
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

    def _close_conn(self):
        with self._lock:
            if self._conn_closed:
                return
            self._conn_closed = True
        self._conn.close()

    def _mark_lost(self, reason):
        with self._lock:
            if self.lost.is_set() or self._closed.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
        self.close()
        if self._on_lost is not None:
            self._on_lost(LockLost(self.resource, reason))

    def _read(self):
        try:
            self._read_events()
        finally:
            self._close_conn()

    def _read_events(self):
        sock = self._conn.sock
        if sock is not None:
            # Renewals come every third of the TTL; the watchdog, not a
            # socket timeout, decides when silence means lost.
            sock.settimeout(None)
        while not self._closed.is_set():
            try:
                event = _event(self._response.readline())
            except Exception as e:  # noqa: BLE001 - any failure ends the hold
                # After close() this is the shutdown we caused: not a loss.
                self._mark_lost("disconnected (%s: %s)" % (type(e).__name__, e))
                return
            if event is None:
                self._mark_lost("disconnected")
                return
            kind = event.get("event")
            if kind == "renewed":
                arrived = time.monotonic()
                with self._lock:
                    self.validity_ms = event["validity_ms"]
                    self.valid_until = arrived + self.validity_ms / 1000.0
            elif kind == "lost":
                self._mark_lost(event.get("reason", "lost"))
                return

    def _watch(self):
        # Lost when no renewal arrived by a twentieth of the last validity
        # before its end (the agent or its host is frozen).
        while not self._closed.is_set() and not self.lost.is_set():
            with self._lock:
                deadline = self.valid_until - self.validity_ms / 20000.0
            left = deadline - time.monotonic()
            if left <= 0:
                self._mark_lost("expired")
                return
            self._closed.wait(min(left, 1.0))

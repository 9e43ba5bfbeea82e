"""Trace context propagation: both clients send the caller's current span as
a W3C `traceparent` (and `tracestate` when set) to the agent, and without
OpenTelemetry they send nothing and work as before.

A capture socket stands in for the agent here: it records each request's
headers and answers an acquire as the agent does. The OpenTelemetry tests
need `opentelemetry-api` and `opentelemetry-sdk` in the venv
(`tools/test.sh` installs them); without them they are skipped, saying so,
and the test without OpenTelemetry still runs."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

from redlock_client import Client
from redlock_client.aio import AsyncClient

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    HAVE_OTEL = True
except ImportError:
    HAVE_OTEL = False

GRANT = {"resource": "traced", "token": "t.capture", "ttl_ms": 10000, "validity_ms": 9990}


class CaptureAgent:
    """A Unix socket that records every request's headers (names lowercased)
    and answers each with a grant, as the agent answers an acquire."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="redlock-trace-")
        self.socket = os.path.join(self.dir.name, "agent.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket)
        self.listener.listen(8)
        self.requests = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed by stop()
            with conn:
                self._answer(conn)

    def _answer(self, conn):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        lines = head.decode("ascii").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            rest += conn.recv(4096)
        self.requests.append({"line": lines[0], "headers": headers})
        answer = json.dumps(GRANT).encode()
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(answer)
            + answer
        )

    def stop(self):
        self.listener.close()
        self.dir.cleanup()


def parse_traceparent(value):
    """`00-<trace id>-<parent span id>-<flags>` as its four fields."""
    version, trace_id, span_id, flags = value.split("-")
    return version, trace_id, span_id, flags


class TraceTest(unittest.TestCase):
    def setUp(self):
        self.agent = CaptureAgent()
        self.addCleanup(self.agent.stop)

    def last_headers(self):
        self.assertEqual(len(self.agent.requests), 1, self.agent.requests)
        return self.agent.requests[-1]["headers"]

    def assert_caller(self, headers, span):
        """The traceparent names the caller's trace and span as parent."""
        self.assertIn("traceparent", headers)
        caller = span.get_span_context()
        version, trace_id, span_id, flags = parse_traceparent(headers["traceparent"])
        self.assertEqual(version, "00")
        self.assertEqual(trace_id, format(caller.trace_id, "032x"))
        self.assertEqual(span_id, format(caller.span_id, "016x"))
        # Sampled, plus the random-trace-id bit newer SDKs set.
        self.assertEqual(flags, format(caller.trace_flags, "02x"))
        self.assertTrue(int(flags, 16) & 1)

    @unittest.skipUnless(HAVE_OTEL, "opentelemetry-api/-sdk not installed in this venv")
    def test_blocking_client_sends_the_callers_span_as_traceparent(self):
        tracer = TracerProvider().get_tracer("redlock-client-test")
        with tracer.start_as_current_span("handle-order") as span:
            grant = Client(self.agent.socket).acquire("traced", ttl_ms=10000)
        self.assertEqual(grant.token, "t.capture")
        headers = self.last_headers()
        self.assert_caller(headers, span)
        self.assertNotIn("tracestate", headers)

    @unittest.skipUnless(HAVE_OTEL, "opentelemetry-api/-sdk not installed in this venv")
    def test_asyncio_client_sends_the_callers_span_and_its_tracestate(self):
        # A remote parent with vendor state, as a server span continued from
        # an incoming request has; the caller's own span inherits the state.
        parent = NonRecordingSpan(
            SpanContext(
                trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
                span_id=0x00F067AA0BA902B7,
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
                trace_state=TraceState([("vendor", "opaque-1")]),
            )
        )
        tracer = TracerProvider().get_tracer("redlock-client-test")

        async def call():
            with trace.use_span(parent):
                with tracer.start_as_current_span("handle-order") as span:
                    grant = await AsyncClient(self.agent.socket).acquire("traced", ttl_ms=10000)
            return span, grant

        span, grant = asyncio.run(call())
        self.assertEqual(grant.token, "t.capture")
        headers = self.last_headers()
        self.assert_caller(headers, span)
        self.assertTrue(headers["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-"))
        self.assertEqual(headers["tracestate"], "vendor=opaque-1")

    @unittest.skipUnless(HAVE_OTEL, "opentelemetry-api/-sdk not installed in this venv")
    def test_outside_any_span_no_trace_header_is_sent(self):
        Client(self.agent.socket).acquire("traced")
        self.assertNotIn("traceparent", self.last_headers())

    def test_without_opentelemetry_nothing_is_sent_and_calls_work(self):
        # A fresh interpreter where `import opentelemetry` fails, as it does
        # where the package is not installed, whether or not it is here.
        script = (
            "import sys, asyncio\n"
            "sys.modules['opentelemetry'] = None\n"
            "from redlock_client import Client\n"
            "from redlock_client.aio import AsyncClient\n"
            "print(Client(sys.argv[1]).acquire('traced').token)\n"
            "print(asyncio.run(AsyncClient(sys.argv[1]).acquire('traced')).token)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", script, self.agent.socket],
            capture_output=True,
            text=True,
            timeout=30,
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["t.capture", "t.capture"])
        self.assertEqual(len(self.agent.requests), 2)
        for request in self.agent.requests:
            self.assertNotIn("traceparent", request["headers"])
            self.assertNotIn("tracestate", request["headers"])


if __name__ == "__main__":
    unittest.main()

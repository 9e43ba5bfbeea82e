"""The caller's trace context as W3C Trace Context headers, for the blocking
and the asyncio clients alike.

OpenTelemetry is optional: when its API is importable, every request carries
what the application's configured propagator writes for the current context
(by default `traceparent`, `tracestate` when set, and `baggage`), so the
agent's spans join the caller's trace. Without it, no header is added and
nothing else changes."""

from __future__ import annotations

from typing import Dict

try:
    from opentelemetry import propagate as _propagate
except ImportError:  # the optional dependency is absent: send nothing
    _propagate = None


def trace_headers() -> Dict[str, str]:
    """The headers that carry the current trace context; empty without
    OpenTelemetry or outside a span.

    The asyncio client writes its request head by hand in ASCII, so a
    header that is not printable ASCII (which no conforming propagator
    writes) is dropped rather than allowed to split the head or fail the
    call."""
    if _propagate is None:
        return {}
    carrier: Dict[str, str] = {}
    try:
        _propagate.inject(carrier)
    except Exception:  # a broken propagator must never fail a lock call
        return {}
    return {
        str(name): str(value)
        for name, value in carrier.items()
        if _printable(str(name)) and _printable(str(value))
    }


def _printable(text: str) -> bool:
    return all(" " <= c <= "~" for c in text)

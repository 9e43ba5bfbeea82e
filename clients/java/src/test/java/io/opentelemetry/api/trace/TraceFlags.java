package io.opentelemetry.api.trace;

/** The stand-in for OpenTelemetry's {@code TraceFlags}; see {@link Span}. */
public interface TraceFlags {
    String asHex();
}

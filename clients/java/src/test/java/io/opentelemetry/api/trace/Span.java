package io.opentelemetry.api.trace;

/**
 * A stand-in for OpenTelemetry's {@code Span}, for the tests only: the real
 * API cannot be fetched where these tests run (no Maven Central), so the
 * client's reflection is checked against these classes, which have the
 * real API's names and signatures for what the client reads. The current
 * span is a thread-local here (the real API keeps it in its Context).
 */
public interface Span {
    ThreadLocal<Span> CURRENT = new ThreadLocal<>();

    /** The current span, as the real {@code Span.current()}: an invalid one outside any span. */
    static Span current() {
        Span span = CURRENT.get();
        return span != null ? span : () -> SpanContext.INVALID;
    }

    SpanContext getSpanContext();
}

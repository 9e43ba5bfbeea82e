package redlockagent;

import java.util.Optional;

/**
 * A W3C trace context: the {@code traceparent} (and {@code tracestate} when
 * set) a request carries so the agent's spans join the caller's trace.
 *
 * <p>The client sends the current OpenTelemetry span's context by itself
 * when {@code io.opentelemetry.api} is on its class path; applications that
 * carry trace context themselves give one through
 * {@link RedlockClient#withTraceContext}. Both are values checked here, so a
 * header can never break the request it rides on.
 */
public final class TraceContext {
    private final String traceparent;
    private final String tracestate;

    private TraceContext(String traceparent, String tracestate) {
        this.traceparent = traceparent;
        this.tracestate = tracestate;
    }

    /**
     * A trace context from its two headers' values.
     *
     * @param tracestate null or empty for none
     * @throws IllegalArgumentException when {@code traceparent} is not
     *     {@code version-traceid-parentid-flags} in lowercase hex, or
     *     {@code tracestate} is not printable ASCII
     */
    public static TraceContext of(String traceparent, String tracestate) {
        if (!validTraceparent(traceparent)) {
            throw new IllegalArgumentException("not a W3C traceparent: " + traceparent);
        }
        if (tracestate != null && !printable(tracestate)) {
            throw new IllegalArgumentException("tracestate is not printable ASCII");
        }
        return new TraceContext(traceparent, tracestate == null || tracestate.isEmpty() ? null : tracestate);
    }

    public String traceparent() {
        return traceparent;
    }

    public Optional<String> tracestate() {
        return Optional.ofNullable(tracestate);
    }

    /** The header lines of a request head, each ending in CRLF. */
    String headLines() {
        String lines = "traceparent: " + traceparent + "\r\n";
        return tracestate == null ? lines : lines + "tracestate: " + tracestate + "\r\n";
    }

    /**
     * Version, trace id, parent id and flags in 2-32-16-2 lowercase hex
     * digits; a later version may append fields after a dash, as the W3C
     * format allows. Version ff is invalid.
     */
    static boolean validTraceparent(String s) {
        if (s == null || s.length() < 55 || (s.length() > 55 && s.charAt(55) != '-') || !printable(s)) {
            return false;
        }
        for (int i = 0; i < 55; i++) {
            char c = s.charAt(i);
            boolean ok = (i == 2 || i == 35 || i == 52) ? c == '-' : (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
            if (!ok) {
                return false;
            }
        }
        return !s.startsWith("ff");
    }

    private static boolean printable(String s) {
        for (int i = 0; i < s.length(); i++) {
            if (s.charAt(i) < ' ' || s.charAt(i) > '~') {
                return false;
            }
        }
        return true;
    }

    @Override
    public String toString() {
        return "TraceContext(" + traceparent + (tracestate == null ? "" : ", " + tracestate) + ")";
    }
}

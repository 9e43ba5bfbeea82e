package redlockagent;

import java.lang.reflect.Method;
import java.util.Map;

/**
 * The current OpenTelemetry span's context, read by reflection so the client
 * has no compile-time dependency: without {@code io.opentelemetry.api} on
 * the class path that loaded this client, {@link #current()} is always null.
 *
 * <p>Looked up once: the class path does not change under a running class
 * loader. With the OpenTelemetry Java agent the application's API classes
 * are the ones the agent bridges, so this sees the agent's spans too.
 */
final class OpenTelemetrySpans {
    private static final OpenTelemetrySpans FOUND = find(OpenTelemetrySpans.class.getClassLoader());

    private final Method current;
    private final Method getSpanContext;
    private final Method isValid;
    private final Method getTraceId;
    private final Method getSpanId;
    private final Method getTraceFlags;
    private final Method asHex;
    private final Method getTraceState;
    private final Method asMap;

    private OpenTelemetrySpans(ClassLoader loader) throws ReflectiveOperationException {
        Class<?> span = Class.forName("io.opentelemetry.api.trace.Span", false, loader);
        Class<?> spanContext = Class.forName("io.opentelemetry.api.trace.SpanContext", false, loader);
        Class<?> traceFlags = Class.forName("io.opentelemetry.api.trace.TraceFlags", false, loader);
        Class<?> traceState = Class.forName("io.opentelemetry.api.trace.TraceState", false, loader);
        current = span.getMethod("current");
        getSpanContext = span.getMethod("getSpanContext");
        isValid = spanContext.getMethod("isValid");
        getTraceId = spanContext.getMethod("getTraceId");
        getSpanId = spanContext.getMethod("getSpanId");
        getTraceFlags = spanContext.getMethod("getTraceFlags");
        asHex = traceFlags.getMethod("asHex");
        getTraceState = spanContext.getMethod("getTraceState");
        asMap = traceState.getMethod("asMap");
    }

    private static OpenTelemetrySpans find(ClassLoader loader) {
        try {
            return new OpenTelemetrySpans(loader);
        } catch (ReflectiveOperationException | LinkageError e) {
            return null; // not on the class path: the client sends no trace context
        }
    }

    /** The current span's trace context; null without OpenTelemetry, outside a span, or on any failure. */
    static TraceContext current() {
        return FOUND == null ? null : FOUND.read();
    }

    private TraceContext read() {
        try {
            Object context = getSpanContext.invoke(current.invoke(null));
            if (!Boolean.TRUE.equals(isValid.invoke(context))) {
                return null;
            }
            String parent = "00-" + getTraceId.invoke(context) + "-" + getSpanId.invoke(context) + "-"
                + asHex.invoke(getTraceFlags.invoke(context));
            StringBuilder state = new StringBuilder();
            Object entries = asMap.invoke(getTraceState.invoke(context));
            if (entries instanceof Map) {
                for (Map.Entry<?, ?> e : ((Map<?, ?>) entries).entrySet()) {
                    state.append(state.length() == 0 ? "" : ",").append(e.getKey()).append('=').append(e.getValue());
                }
            }
            return TraceContext.of(parent, state.toString());
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null; // tracing must never fail a lock call
        }
    }
}

package io.opentelemetry.api.trace;

/** The stand-in for OpenTelemetry's {@code SpanContext}; see {@link Span}. */
public interface SpanContext {
    SpanContext INVALID = create("00000000000000000000000000000000", "0000000000000000", "00", TraceState.of());

    String getTraceId();

    String getSpanId();

    TraceFlags getTraceFlags();

    TraceState getTraceState();

    boolean isValid();

    static SpanContext create(String traceId, String spanId, String flags, TraceState state) {
        return new SpanContext() {
            @Override
            public String getTraceId() {
                return traceId;
            }

            @Override
            public String getSpanId() {
                return spanId;
            }

            @Override
            public TraceFlags getTraceFlags() {
                return () -> flags;
            }

            @Override
            public TraceState getTraceState() {
                return state;
            }

            @Override
            public boolean isValid() {
                return !traceId.matches("0+") && !spanId.matches("0+");
            }
        };
    }
}

package io.opentelemetry.api.trace;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/** The stand-in for OpenTelemetry's {@code TraceState}; see {@link Span}. */
public interface TraceState {
    Map<String, String> asMap();

    /** Entries in order, as key, value, key, value... */
    static TraceState of(String... keyValues) {
        Map<String, String> entries = new LinkedHashMap<>();
        for (int i = 0; i + 1 < keyValues.length; i += 2) {
            entries.put(keyValues[i], keyValues[i + 1]);
        }
        Map<String, String> view = Collections.unmodifiableMap(entries);
        return () -> view;
    }
}

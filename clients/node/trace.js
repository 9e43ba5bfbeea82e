'use strict';
/**
 * The caller's trace context as request headers, so the agent's spans join
 * the caller's trace.
 *
 * `@opentelemetry/api` is an optional peer dependency: when the application
 * has it, every request carries what the application's registered
 * propagator writes for the active context (with the SDK's defaults, W3C
 * `traceparent`, `tracestate` when set, and `baggage`). When it cannot be
 * loaded, no header is added and nothing else changes.
 */

let api; // undefined: not looked for yet; null: absent

function load() {
  if (api === undefined) {
    try {
      // Resolved from this package's place in node_modules, so it finds the
      // application's copy; the API keeps its state in one global, so
      // copies of compatible versions share the active context.
      api = require('@opentelemetry/api');
    } catch (_) {
      api = null;
    }
  }
  return api;
}

/** Printable ASCII only: http.request throws on anything else in a header. */
function printable(text) {
  return /^[\x20-\x7e]*$/.test(text);
}

/**
 * The headers that carry the active trace context: empty without
 * OpenTelemetry, outside a span, or when the propagator fails (tracing
 * must never fail a lock call).
 */
function traceHeaders() {
  const otel = load();
  if (!otel) return {};
  const carrier = {};
  try {
    otel.propagation.inject(otel.context.active(), carrier);
  } catch (_) {
    return {};
  }
  const out = {};
  for (const [name, value] of Object.entries(carrier)) {
    if (typeof value === 'string' && printable(name) && printable(value)) out[name.toLowerCase()] = value;
  }
  return out;
}

module.exports = { traceHeaders };

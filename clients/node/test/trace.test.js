'use strict';
// Trace context propagation through the package as installed: with
// OpenTelemetry the caller's active span arrives as a W3C traceparent (and
// tracestate when set); without it nothing is sent and calls work. A
// capture socket stands in for the agent: it records each request's
// headers and answers an acquire as the agent does.
//
// The OpenTelemetry tests need @opentelemetry/api and
// @opentelemetry/sdk-trace-node installed beside the package
// (tools/test.sh installs them); without them they are skipped, saying so.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');

const { Client } = require('redlock-agent-client');

let otel;
let NodeTracerProvider;
try {
  otel = require('@opentelemetry/api');
  ({ NodeTracerProvider } = require('@opentelemetry/sdk-trace-node'));
} catch (_) {
  otel = null;
}
const skip = otel ? false : '@opentelemetry/api and @opentelemetry/sdk-trace-node are not installed';

const GRANT = { resource: 'traced', token: 't.capture', ttl_ms: 10000, validity_ms: 9990 };

let dir;
let socket;
let server;
let seen = [];
let tracer;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redlock-trace-'));
  socket = path.join(dir, 'agent.sock');
  server = http.createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(GRANT));
    });
  });
  await new Promise((resolve) => server.listen(socket, resolve));
  if (otel) {
    // Registers the global tracer provider, the async context manager and
    // the W3C propagators, as an application's tracing setup does.
    const provider = new NodeTracerProvider();
    provider.register();
    tracer = otel.trace.getTracer('redlock-client-test');
  }
});

after(async () => {
  await new Promise((resolve) => server.close(resolve));
  fs.rmSync(dir, { recursive: true, force: true });
});

/** The one request since the last call, its headers. */
function only() {
  assert.equal(seen.length, 1, JSON.stringify(seen));
  const headers = seen[0];
  seen = [];
  return headers;
}

function assertCaller(headers, span) {
  const caller = span.spanContext();
  const [version, traceId, parentId, flags] = headers.traceparent.split('-');
  assert.equal(version, '00');
  assert.equal(traceId, caller.traceId);
  assert.equal(parentId, caller.spanId);
  assert.equal(parseInt(flags, 16) & 1, 1, 'sampled');
}

test("the active span is sent as traceparent, the caller's span as parent", { skip }, async () => {
  let span;
  const grant = await tracer.startActiveSpan('handle-order', async (s) => {
    span = s;
    try {
      // After an await, as real handlers are: the context follows.
      await new Promise((resolve) => setImmediate(resolve));
      return await new Client(socket).acquire('traced', { ttlMs: 10000 });
    } finally {
      s.end();
    }
  });
  assert.equal(grant.token, 't.capture');
  const headers = only();
  assertCaller(headers, span);
  assert.equal(headers.tracestate, undefined);
});

test('the tracestate of a remote parent is sent too', { skip }, async () => {
  const parent = otel.trace.setSpanContext(otel.context.active(), {
    traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
    spanId: '00f067aa0ba902b7',
    traceFlags: otel.TraceFlags.SAMPLED,
    traceState: otel.createTraceState('vendor=opaque-1'),
    isRemote: true,
  });
  let span;
  await otel.context.with(parent, () =>
    tracer.startActiveSpan('handle-order', async (s) => {
      span = s;
      try {
        return await new Client(socket).acquire('traced');
      } finally {
        s.end();
      }
    }),
  );
  const headers = only();
  assertCaller(headers, span);
  assert.equal(span.spanContext().traceId, '4bf92f3577b34da6a3ce929d0e0e4736');
  assert.equal(headers.tracestate, 'vendor=opaque-1');
});

test('outside any span no trace header is sent', { skip }, async () => {
  await new Client(socket).acquire('traced');
  assert.equal(only().traceparent, undefined);
});

test('without @opentelemetry/api nothing is sent and calls work', async () => {
  // A fresh process where loading the API fails, as where it is not
  // installed, whether or not it is installed here.
  const script = `
    const Module = require('node:module');
    const resolve = Module._resolveFilename;
    Module._resolveFilename = function (request, ...rest) {
      if (request === '@opentelemetry/api') throw new Error('Cannot find module ' + request);
      return resolve.call(this, request, ...rest);
    };
    const { Client } = require(process.argv[1]);
    new Client(process.argv[2]).acquire('traced').then((g) => console.log(g.token));
  `;
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, ['-e', script, require.resolve('redlock-agent-client'), socket], (e, stdout, stderr) =>
      e ? reject(new Error(`${e.message}\n${stderr}`)) : resolve(stdout),
    );
  });
  assert.equal(out.trim(), 't.capture');
  const headers = only();
  assert.equal(headers.traceparent, undefined);
  assert.equal(headers.tracestate, undefined);
});

package redlock_test

// Trace context propagation, against a fake agent that records each
// request's headers: the caller's trace context arrives as W3C traceparent
// and tracestate, and without one nothing is sent and calls work.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"redlock-agent.example/redlock"
)

// captureAgent answers every request as the agent answers an acquire and
// keeps each request's headers.
func captureAgent(t *testing.T) (string, func() []http.Header) {
	var mu sync.Mutex
	var seen []http.Header
	socket := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"resource":"traced","token":"t.capture","ttl_ms":10000,"validity_ms":9990}`))
	})
	return socket, func() []http.Header {
		mu.Lock()
		defer mu.Unlock()
		return append([]http.Header(nil), seen...)
	}
}

// span stands in for an OpenTelemetry span carried in a context, as
// OpenTelemetry-Go carries it, so the test exercises the same path as
// an application that plugs its propagator into Client.TraceContext.
type span struct{ traceID, spanID, state string }

type spanKey struct{}

func propagator(ctx context.Context) (string, string) {
	s, ok := ctx.Value(spanKey{}).(span)
	if !ok {
		return "", ""
	}
	return fmt.Sprintf("00-%s-%s-01", s.traceID, s.spanID), s.state
}

// The traceparent names the caller's trace, and the caller's span as the
// parent, on a plain call and on a release.
func TestTraceContextFromThePluggedPropagator(t *testing.T) {
	socket, seen := captureAgent(t)
	c := redlock.New(socket)
	c.TraceContext = propagator
	caller := span{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "vendor=opaque-1"}
	ctx := context.WithValue(context.Background(), spanKey{}, caller)
	l, err := c.Acquire(ctx, "traced", redlock.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token != "t.capture" {
		t.Fatalf("token %q", l.Token)
	}
	h := seen()
	if len(h) != 1 {
		t.Fatalf("%d requests", len(h))
	}
	fields := strings.Split(h[0].Get("traceparent"), "-")
	if len(fields) != 4 || fields[0] != "00" || fields[1] != caller.traceID || fields[2] != caller.spanID {
		t.Fatalf("traceparent %q, want trace %s parent %s", h[0].Get("traceparent"), caller.traceID, caller.spanID)
	}
	if got := h[0].Get("tracestate"); got != caller.state {
		t.Fatalf("tracestate %q", got)
	}
}

// WithTraceContext sends its values as they are, and wins over the
// plugged function.
func TestWithTraceContext(t *testing.T) {
	socket, seen := captureAgent(t)
	c := redlock.New(socket)
	c.TraceContext = propagator
	parent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := context.WithValue(context.Background(), spanKey{}, span{"11111111111111111111111111111111", "2222222222222222", ""})
	ctx = redlock.WithTraceContext(ctx, parent, "")
	if _, err := c.Acquire(ctx, "traced", redlock.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	h := seen()[0]
	if h.Get("traceparent") != parent {
		t.Fatalf("traceparent %q", h.Get("traceparent"))
	}
	if _, ok := h["Tracestate"]; ok {
		t.Fatalf("an empty tracestate was sent: %q", h.Get("tracestate"))
	}
}

// Without trace context nothing is sent, and a malformed one is dropped
// rather than failing the call.
func TestNoTraceContextSendsNothing(t *testing.T) {
	socket, seen := captureAgent(t)
	c := redlock.New(socket)
	if _, err := c.Acquire(context.Background(), "traced", redlock.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := redlock.WithTraceContext(context.Background(), "00-xyz\r\nInjected: 1", "a\nb")
	if _, err := c.Acquire(bad, "traced", redlock.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, h := range seen() {
		if _, ok := h["Traceparent"]; ok {
			t.Fatalf("request %d sent traceparent %q", i, h.Get("traceparent"))
		}
		if _, ok := h["Tracestate"]; ok {
			t.Fatalf("request %d sent tracestate %q", i, h.Get("tracestate"))
		}
		if _, ok := h["Injected"]; ok {
			t.Fatalf("request %d carried an injected header", i)
		}
	}
}

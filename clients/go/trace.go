package redlock

// Trace context: the caller's W3C traceparent and tracestate, sent on every
// request so the agent's spans join the caller's trace. Standard library
// only: the context comes from each call's context.Context, either put
// there by WithTraceContext or read by the Client's TraceContext function
// (where an application plugs in its OpenTelemetry propagator).

import (
	"context"
	"net/http"
)

type traceKey struct{}

type traceValues struct{ parent, state string }

// WithTraceContext returns a copy of ctx whose calls carry traceparent
// (and tracestate when not empty) to the agent, for applications that
// carry W3C trace context themselves. It takes precedence over the
// Client's TraceContext function.
func WithTraceContext(ctx context.Context, traceparent, tracestate string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceValues{traceparent, tracestate})
}

// traceHeaders sets the traceparent and tracestate headers of req from
// its context. A malformed traceparent sends neither, and a tracestate
// that is not printable ASCII is left out: trace context is best effort
// and must never fail a lock call (net/http refuses a request whose
// header has a line break).
func (c *Client) traceHeaders(req *http.Request) {
	ctx := req.Context()
	v, ok := ctx.Value(traceKey{}).(traceValues)
	if !ok && c.TraceContext != nil {
		v.parent, v.state = c.TraceContext(ctx)
	}
	if !validTraceparent(v.parent) {
		return
	}
	req.Header.Set("traceparent", v.parent)
	if v.state != "" && printable(v.state) {
		req.Header.Set("tracestate", v.state)
	}
}

// validTraceparent holds for version-traceid-parentid-flags in lowercase
// hex, 2-32-16-2 digits; a later version may append fields after a dash,
// as the W3C format allows.
func validTraceparent(s string) bool {
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') {
		return false
	}
	for i := 0; i < 55; i++ {
		switch i {
		case 2, 35, 52:
			if s[i] != '-' {
				return false
			}
		default:
			if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
				return false
			}
		}
	}
	return s[:2] != "ff" && printable(s)
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

package redlock

// Holds: a lock or a permit tied to a connection, renewed by the agent,
// and how their loss reaches the application.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// HoldOptions are a hold's: those of LockOptions and the hold's own.
type HoldOptions struct {
	LockOptions
	// MaxHold ends the hold with a loss (reason "max_hold") after this
	// long; the agent's lock.max_hold when zero.
	MaxHold time.Duration
	// ExpireOnDisconnect leaves the lock to expire by its TTL when the
	// connection ends without a release, instead of releasing it at once:
	// writes a vanished client still had in flight land before anyone else
	// can hold the lock (for storage that cannot check a fence).
	ExpireOnDisconnect bool
	// Reenter is the token of a lock this process holds: the hold
	// re-enters it (see Client.Reenter) and closing the hold lowers its
	// count as a release does.
	Reenter string
}

type holdBody struct {
	lockBody
	Limit        int    `json:"limit,omitempty"`
	MaxHoldMs    int64  `json:"max_hold_ms,omitempty"`
	OnDisconnect string `json:"on_disconnect,omitempty"`
}

func (o HoldOptions) body() holdBody {
	b := holdBody{lockBody: o.LockOptions.body(), MaxHoldMs: ms(o.MaxHold)}
	b.Token = o.Reenter
	if o.ExpireOnDisconnect {
		b.OnDisconnect = "expire"
	}
	return b
}

// event is one line of a hold's or a campaign's stream.
type event struct {
	Event      string  `json:"event"`
	Token      string  `json:"token"`
	ValidityMs int64   `json:"validity_ms"`
	TTLMs      int64   `json:"ttl_ms"`
	Fence      uint64  `json:"fence"`
	Permit     *int    `json:"permit"`
	HoldCount  int     `json:"hold_count"`
	Term       uint64  `json:"term"`
	Reason     string  `json:"reason"`
	Leader     *Leader `json:"leader"`
}

// Hold is a lock (a semaphore's permit, or a lock on several resources)
// the agent renews every third of its TTL for as long as the hold is open.
//
// ## Behavior
//   - Lost() is closed when the lock is lost; Reason() then says why: the
//     agent's reason (renew_failed, no_quorum, max_hold, shutdown,
//     force_released, node_lost), "expired" (no renewal came by a
//     twentieth of the last validity before its end: the agent or its host
//     is frozen) or "disconnected" (the stream ended without a notice).
//   - Context() is cancelled on a loss and on Close: hand it to the work.
//   - Close ends the hold: the connection closes and the agent releases the
//     lock on every master (or lets it expire, ExpireOnDisconnect). Lost()
//     is not closed by Close.
type Hold struct {
	s        *stream
	resource string
	token    string
	ttl      time.Duration
	fence    uint64
	permit   int
	count    int
	mode     Mode
	// resources are a lock on several's, sorted; nil for one lock or a permit.
	resources []string

	ctx    context.Context
	cancel context.CancelFunc
	lost   chan struct{}

	mu         sync.Mutex
	validity   time.Duration
	validUntil time.Time
	reason     string
	closed     bool
	timer      *time.Timer
}

// Hold takes the lock on resource (waiting up to o.Wait; as a reader with
// o.Mode Shared) and keeps it until Close or a loss. ctx bounds the wait
// only: once Hold returns, the hold lives until Close. Refusals are
// ErrInvalidMode and *Error as for Acquire.
func (c *Client) Hold(ctx context.Context, resource string, o HoldOptions) (*Hold, error) {
	b := o.body()
	m, err := o.Mode.wire()
	if err != nil {
		return nil, err
	}
	b.Mode = m
	h, err := c.hold(ctx, resource, path("locks", resource, "hold"), b)
	if err != nil {
		return nil, err
	}
	// The acquired event does not say: a hold is granted in the mode it asked.
	h.mode = granted(m)
	return h, nil
}

func (c *Client) hold(ctx context.Context, resource, u string, body interface{}) (*Hold, error) {
	var first event
	s, err := c.openStream(ctx, http.MethodPost, u, body, func(s *stream) error {
		if !s.next(&first) || first.Event != "acquired" {
			return fmt.Errorf("redlock: a hold on %s must start with acquired, got %+v", resource, first)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	arrived := time.Now()
	h := &Hold{
		s: s, resource: resource, token: first.Token, ttl: millis(first.TTLMs),
		fence: first.Fence, permit: -1, count: first.HoldCount, mode: Exclusive,
		lost: make(chan struct{}),
	}
	if h.count == 0 {
		h.count = 1 // only a re-entering hold's answer has a count
	}
	if first.Permit != nil {
		h.permit = *first.Permit
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.renewed(arrived, millis(first.ValidityMs))
	go h.read()
	return h, nil
}

// renewed moves the validity and the watchdog that calls the hold lost
// when no renewal comes by a twentieth of it before its end.
func (h *Hold) renewed(at time.Time, validity time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.validity, h.validUntil = validity, at.Add(validity)
	wait := time.Until(h.validUntil.Add(-validity / 20))
	if h.timer == nil {
		h.timer = time.AfterFunc(wait, func() { h.markLost("expired") })
	} else {
		h.timer.Reset(wait)
	}
}

func (h *Hold) read() {
	for {
		var e event
		if !h.s.next(&e) {
			h.markLost("disconnected")
			return
		}
		switch e.Event {
		case "renewed":
			h.renewed(time.Now(), millis(e.ValidityMs))
		case "lost":
			h.markLost(e.Reason)
			return
		}
	}
}

func (h *Hold) markLost(reason string) {
	h.mu.Lock()
	if h.closed || h.reason != "" {
		h.mu.Unlock()
		return
	}
	h.reason = reason
	h.closed = true
	h.timer.Stop()
	h.mu.Unlock()
	close(h.lost)
	h.cancel()
	h.s.close()
}

// Lost is closed when the lock is lost: stop using it.
func (h *Hold) Lost() <-chan struct{} { return h.lost }

// Reason says why the lock was lost; "" while it is not.
func (h *Hold) Reason() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reason
}

// Context is cancelled when the lock is lost or the hold closed.
func (h *Hold) Context() context.Context { return h.ctx }

// Resource is the lock's resource (a semaphore's name for a permit; the
// resources joined by commas for a lock on several).
func (h *Hold) Resource() string { return h.resource }

// Resources are the resources of a hold of several (HoldMany), sorted; nil
// for a hold of one lock or a permit.
func (h *Hold) Resources() []string { return append([]string(nil), h.resources...) }

// Token is the grant's token (for a re-entry of the lock).
func (h *Hold) Token() string { return h.token }

// TTL is the lock's TTL, which each renewal sets again.
func (h *Hold) TTL() time.Duration { return h.ttl }

// Fence is the fencing token, 0 when none was asked for.
func (h *Hold) Fence() uint64 { return h.fence }

// Permit is which permit a semaphore's hold has, -1 for a lock.
func (h *Hold) Permit() int { return h.permit }

// Mode is how the lock is held: Shared for a reader's hold, else
// Exclusive (a permit's and a lock on several's too).
func (h *Hold) Mode() Mode { return h.mode }

// HoldCount is the acquires a re-entering hold's close undoes, its own
// included; 1 for a hold that did not re-enter.
func (h *Hold) HoldCount() int { return h.count }

// ValidUntil is when the lock stops being safe to use unless renewed;
// every renewal moves it.
func (h *Hold) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// Close ends the hold: the agent releases the lock on every master.
func (h *Hold) Close() error {
	h.mu.Lock()
	h.closed = true
	h.timer.Stop()
	h.mu.Unlock()
	h.cancel()
	h.s.close()
	return nil
}

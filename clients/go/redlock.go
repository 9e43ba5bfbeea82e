// Package redlock is the Go client of redlock-agent's socket: locks
// (acquire, extend, release, re-entry), shared (read) and exclusive
// (write) modes of a lock, locks on several resources at once, holds the
// agent renews that tell when they are lost, fencing tokens, semaphores
// and leader elections.
//
// The agent speaks HTTP/1.1 + JSON on a Unix socket; this package wraps it
// with only the standard library. Every call takes a context.Context: it
// bounds the call, waiting for a taken lock included.
//
//	c := redlock.New("/run/redlock/agent.sock")
//	h, err := c.Hold(ctx, "orders-42", redlock.HoldOptions{TTL: 10 * time.Second, Wait: 5 * time.Second})
//	if err != nil { ... }                // errors.Is(err, redlock.ErrTaken) when someone else has it
//	defer h.Close()                      // released on every master
//	select {
//	case <-work(h.Context()):           // h.Context() is cancelled when the lock is lost
//	case <-h.Lost():
//		log.Printf("lock lost: %s", h.Reason())
//	}
//
// Layout: redlock.go (the client, its transport, errors and locks),
// trace.go (the caller's trace context as request headers),
// stream.go (one NDJSON answer and its connection), hold.go (holds and
// their loss), multi.go (locks on several resources at once),
// semaphore.go (permits), election.go (campaigns, leaders, observers).
package redlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The agent's error codes (the "code" of its error answers). Compare an
// error with errors.Is(err, ErrTaken) or read (*Error).Code.
const (
	CodeTaken          = "taken"
	CodeNoQuorum       = "no_quorum"
	CodeLost           = "lost"
	CodeInvalidRequest = "invalid_request"
	CodeTTLOutOfRange  = "ttl_out_of_range"
	CodeForbidden      = "forbidden"
	CodeNotReentrant   = "not_reentrant"
	CodeLimitMismatch  = "limit_mismatch"
	CodeNoLeader       = "no_leader"
)

// Sentinels for errors.Is: an *Error matches the sentinel of its code.
var (
	ErrTaken         = &Error{Code: CodeTaken}
	ErrNoQuorum      = &Error{Code: CodeNoQuorum}
	ErrLost          = &Error{Code: CodeLost}
	ErrNotReentrant  = &Error{Code: CodeNotReentrant}
	ErrLimitMismatch = &Error{Code: CodeLimitMismatch}
	ErrNoLeader      = &Error{Code: CodeNoLeader}
)

// Error is the agent's answer to a refused request:
// {"error": {"code", "message"}} with its HTTP status.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return "redlock: " + e.Code
	}
	return fmt.Sprintf("redlock: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches another *Error with the same code, so errors.Is(err,
// ErrTaken) holds for every "taken" answer.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Client talks to one agent's socket. It is safe for concurrent use; each
// hold, campaign and observer has a connection of its own.
type Client struct {
	socket string
	http   *http.Client

	// TraceContext, when set, returns the W3C traceparent and tracestate
	// of a call's context, sent to the agent so its spans join the
	// caller's trace ("" sends nothing). Applications on OpenTelemetry-Go
	// plug their propagator in here (see the README's Tracing section);
	// values set with WithTraceContext take precedence. Set it before the
	// client is shared: it is read on every call without a lock.
	TraceContext func(ctx context.Context) (traceparent, tracestate string)
}

// New returns a client of the agent listening on the Unix socket at
// path. Nothing is dialled until the first call.
func New(socket string) *Client {
	return &Client{
		socket: socket,
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
		}},
	}
}

// Socket is the path the client dials.
func (c *Client) Socket() string { return c.socket }

// path percent-encodes name as one path segment, "/" included.
func path(kind, name, action string) string {
	p := "http://agent/v1/" + kind + "/" + url.PathEscape(name)
	if action != "" {
		p += "/" + action
	}
	return p
}

// ms is d in whole milliseconds for a request body; 0 stays absent.
func ms(d time.Duration) int64 { return d.Milliseconds() }

func millis(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// send makes one request and returns the answer when it is 200; any other
// status becomes an *Error. The caller closes the body.
func (c *Client) send(ctx context.Context, method, u string, in interface{}) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.traceHeaders(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("redlock: %s %s on %s: %w", method, strings.TrimPrefix(u, "http://agent"), c.socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
		return &Error{Status: resp.StatusCode, Code: "unexpected_answer", Message: string(data)}
	}
	return &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
}

// call makes one request and decodes its JSON answer into out.
func (c *Client) call(ctx context.Context, method, u string, in, out interface{}) error {
	resp, err := c.send(ctx, method, u, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// Mode is how a lock is held: Exclusive (one holder; the zero value means
// it too) or Shared (a reader: any number at once, while no exclusive
// holder is there).
type Mode string

const (
	Exclusive Mode = "exclusive"
	Shared    Mode = "shared"
)

// ErrInvalidMode is the error, returned before any request is made, for
// a Mode other than Shared, Exclusive or the zero value.
var ErrInvalidMode = errors.New("redlock: a lock's mode must be shared or exclusive")

// wire is the mode as a request sends it: absent ("") for exclusive.
func (m Mode) wire() (string, error) {
	switch m {
	case "", Exclusive:
		return "", nil
	case Shared:
		return string(Shared), nil
	}
	return "", fmt.Errorf("%w, not %q", ErrInvalidMode, string(m))
}

// granted is the mode a grant's answer names: Shared, else Exclusive.
func granted(m string) Mode {
	if m == string(Shared) {
		return Shared
	}
	return Exclusive
}

// LockOptions are what every request that takes a lock or a permit
// shares. The zero value means the agent's default TTL, one attempt, no
// owner label, no fence, exclusive.
type LockOptions struct {
	// TTL of the lock; the agent's lock.default_ttl when zero.
	TTL time.Duration
	// Wait is how long the agent may keep trying while the lock is taken
	// (it queues the request, in FIFO order); zero means one attempt.
	Wait time.Duration
	// Owner is a label operators see beside the lock.
	Owner string
	// Fence asks for a fencing token (Lock.Fence): larger than the fence of
	// every earlier grant on these masters. See docs/fencing.md.
	Fence bool
	// Mode is a lock's: Shared takes it as a reader, beside any other
	// readers. Only Acquire and Hold take it; a lock on several resources
	// and a permit are exclusive, and their calls refuse Shared. Any other
	// value than Shared, Exclusive or "" is ErrInvalidMode.
	Mode Mode
}

type lockBody struct {
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	WaitMs int64  `json:"wait_ms,omitempty"`
	Owner  string `json:"owner,omitempty"`
	Fence  bool   `json:"fence,omitempty"`
	Token  string `json:"token,omitempty"`
	Mode   string `json:"mode,omitempty"`
}

// body is the request's fields but the mode: see lockBody and exclusive.
func (o LockOptions) body() lockBody {
	return lockBody{TTLMs: ms(o.TTL), WaitMs: ms(o.Wait), Owner: o.Owner, Fence: o.Fence}
}

// withMode is a lock's request, its mode checked and included.
func (o LockOptions) withMode() (lockBody, error) {
	b := o.body()
	m, err := o.Mode.wire()
	b.Mode = m
	return b, err
}

// exclusive refuses a mode for what takes none (what: "a permit", ...).
func (o LockOptions) exclusive(what string) error {
	m, err := o.Mode.wire()
	if err == nil && m != "" {
		err = fmt.Errorf("redlock: %s is exclusive: it has no %s mode", what, m)
	}
	return err
}

// Lock is a granted lock: use it only until ValidUntil. Extend it, or
// Release it; a lost token is lost for good.
type Lock struct {
	c        *Client
	Resource string
	// Token is the only proof of holding the lock; keep it secret.
	Token string
	TTL   time.Duration
	// Validity is how long the lock was safe to use when the answer came.
	Validity   time.Duration
	ValidUntil time.Time
	// Fence is the fencing token, 0 when none was asked for.
	Fence uint64
	// HoldCount is the releases the lock takes: 1 for a first grant, more
	// after re-entries.
	HoldCount int
	// Mode is how it is held: Shared for a reader's grant, else Exclusive.
	Mode Mode
}

type grantAnswer struct {
	Resource   string `json:"resource"`
	Token      string `json:"token"`
	ValidityMs int64  `json:"validity_ms"`
	TTLMs      int64  `json:"ttl_ms"`
	Fence      uint64 `json:"fence"`
	HoldCount  int    `json:"hold_count"`
	Mode       string `json:"mode"`
}

// Acquire takes the lock on resource, waiting up to o.Wait while it is
// taken: as a reader with o.Mode Shared, else as its one holder. It fails
// with ErrInvalidMode before any request, or with an *Error: ErrTaken
// (held by someone else for all of the wait; for a reader: by an
// exclusive holder), ErrNoQuorum, or another code of the agent.
func (c *Client) Acquire(ctx context.Context, resource string, o LockOptions) (*Lock, error) {
	b, err := o.withMode()
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, resource, b)
}

// Reenter acquires again an exclusive lock this process holds (a nested
// call that takes the same lock): the same token, the TTL set again, and
// one more release before the lock is released on the masters. Only the
// process that acquired it may, through the same agent (else
// ErrNotReentrant or a forbidden error). A reader's grant is re-entered
// with Lock.Reenter, which keeps the grant's mode (another mode is
// ErrNotReentrant).
func (c *Client) Reenter(ctx context.Context, resource, token string, ttl time.Duration) (*Lock, error) {
	return c.acquire(ctx, resource, lockBody{Token: token, TTLMs: ms(ttl)})
}

func (c *Client) acquire(ctx context.Context, resource string, body lockBody) (*Lock, error) {
	var g grantAnswer
	if err := c.call(ctx, http.MethodPost, path("locks", resource, "acquire"), body, &g); err != nil {
		return nil, err
	}
	arrived := time.Now()
	if g.HoldCount == 0 {
		g.HoldCount = 1 // a first grant's answer has no count
	}
	return &Lock{
		c: c, Resource: g.Resource, Token: g.Token,
		TTL: millis(g.TTLMs), Validity: millis(g.ValidityMs), ValidUntil: arrived.Add(millis(g.ValidityMs)),
		Fence: g.Fence, HoldCount: g.HoldCount, Mode: granted(g.Mode),
	}, nil
}

// Extended is the answer to an extend: the lock is valid for Validity
// from when it came.
type Extended struct {
	Validity   time.Duration
	TTL        time.Duration
	ValidUntil time.Time
}

type extendAnswer struct {
	ValidityMs int64 `json:"validity_ms"`
	TTLMs      int64 `json:"ttl_ms"`
}

func (a extendAnswer) extended() Extended {
	return Extended{Validity: millis(a.ValidityMs), TTL: millis(a.TTLMs), ValidUntil: time.Now().Add(millis(a.ValidityMs))}
}

// Extend gives the lock a new TTL from now (the agent's default when
// ttl is zero), granted only on a quorum with validity left: else ErrLost.
func (c *Client) Extend(ctx context.Context, resource, token string, ttl time.Duration) (Extended, error) {
	var a extendAnswer
	body := struct {
		Token string `json:"token"`
		TTLMs int64  `json:"ttl_ms,omitempty"`
	}{token, ms(ttl)}
	if err := c.call(ctx, http.MethodPost, path("locks", resource, "extend"), body, &a); err != nil {
		return Extended{}, err
	}
	return a.extended(), nil
}

// Released is the answer to a release.
type Released struct {
	// Released is true when a quorum still held the lock; false when it
	// had run out already (the work may have overlapped another holder's),
	// or when HoldCount > 0: a re-entered lock still held.
	Released bool
	// HoldCount is the releases a re-entered lock still takes.
	HoldCount int
}

type releaseAnswer struct {
	Released  bool `json:"released"`
	HoldCount int  `json:"hold_count"`
}

// Release releases the lock on every master at once. ErrNoQuorum means
// too many masters failed to tell; retrying is safe.
func (c *Client) Release(ctx context.Context, resource, token string) (Released, error) {
	var a releaseAnswer
	body := struct {
		Token string `json:"token"`
	}{token}
	if err := c.call(ctx, http.MethodPost, path("locks", resource, "release"), body, &a); err != nil {
		return Released{}, err
	}
	return Released(a), nil
}

// Extend extends the lock (see Client.Extend) and moves ValidUntil.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	e, err := l.c.Extend(ctx, l.Resource, l.Token, ttl)
	if err != nil {
		return err
	}
	l.TTL, l.Validity, l.ValidUntil = e.TTL, e.Validity, e.ValidUntil
	return nil
}

// Release releases the lock (see Client.Release).
func (l *Lock) Release(ctx context.Context) (Released, error) {
	return l.c.Release(ctx, l.Resource, l.Token)
}

// Reenter acquires the lock again in its mode (see Client.Reenter):
// release it once more.
func (l *Lock) Reenter(ctx context.Context, ttl time.Duration) (*Lock, error) {
	m, err := l.Mode.wire()
	if err != nil {
		return nil, err
	}
	return l.c.acquire(ctx, l.Resource, lockBody{Token: l.Token, TTLMs: ms(ttl), Mode: m})
}

// ForceRelease deletes resource's lock on every master whoever holds it:
// an operator's call, served only on the agent's admin socket (New with
// its path). It returns how many masters deleted a key.
func (c *Client) ForceRelease(ctx context.Context, resource string) (int, error) {
	var a struct {
		Deleted int `json:"deleted"`
	}
	if err := c.call(ctx, http.MethodPost, path("locks", resource, "force-release"), struct{}{}, &a); err != nil {
		return 0, err
	}
	return a.Deleted, nil
}

// Available reports whether a lock on any resource could get a quorum now
// (GET /v1/nodes' "available").
func (c *Client) Available(ctx context.Context) (bool, error) {
	var a struct {
		Available bool `json:"available"`
	}
	if err := c.call(ctx, http.MethodGet, "http://agent/v1/nodes", nil, &a); err != nil {
		return false, err
	}
	return a.Available, nil
}

// errClosed is what a stream's reader sees after Close.
var errClosed = errors.New("redlock: closed")

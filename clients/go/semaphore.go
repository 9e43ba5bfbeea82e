package redlock

// Semaphores: limit permits, each an ordinary lock of its own.

import (
	"context"
	"net/http"
	"time"
)

// MaxPermits is the largest limit a semaphore may have.
const MaxPermits = 256

// ByToken, passed as the permit to ExtendPermit or ReleasePermit, names
// the permit by its token alone: the agent finds which permit the token
// was made for, through any agent.
const ByToken = -1

// Permit is one of a semaphore's permits: use it only until ValidUntil,
// extend it or release it as a Lock.
type Permit struct {
	c         *Client
	Semaphore string
	// Permit is which permit, 0 to limit-1; the token alone names it.
	Permit     int
	Token      string
	TTL        time.Duration
	Validity   time.Duration
	ValidUntil time.Time
	// Fence is the permit's fencing token, 0 when none was asked for.
	Fence uint64
}

type permitBody struct {
	lockBody
	Limit int `json:"limit"`
}

// AcquirePermit takes one of the limit permits of semaphore name, waiting
// up to o.Wait while all are held. Every user of a semaphore must pass
// the same limit: another is refused with ErrLimitMismatch while permits
// are held. ErrTaken when all were held for all of the wait.
func (c *Client) AcquirePermit(ctx context.Context, name string, limit int, o LockOptions) (*Permit, error) {
	var a struct {
		Semaphore  string `json:"semaphore"`
		Permit     int    `json:"permit"`
		Token      string `json:"token"`
		ValidityMs int64  `json:"validity_ms"`
		TTLMs      int64  `json:"ttl_ms"`
		Fence      uint64 `json:"fence"`
	}
	if err := o.exclusive("a permit"); err != nil {
		return nil, err
	}
	if err := c.call(ctx, http.MethodPost, path("semaphores", name, "acquire"), permitBody{o.body(), limit}, &a); err != nil {
		return nil, err
	}
	return &Permit{
		c: c, Semaphore: a.Semaphore, Permit: a.Permit, Token: a.Token,
		TTL: millis(a.TTLMs), Validity: millis(a.ValidityMs), ValidUntil: time.Now().Add(millis(a.ValidityMs)),
		Fence: a.Fence,
	}, nil
}

type permitToken struct {
	Permit *int   `json:"permit,omitempty"`
	Token  string `json:"token"`
	TTLMs  int64  `json:"ttl_ms,omitempty"`
}

// permitTokenBody names a permit by its token, and by its number too when
// given (not ByToken).
func permitTokenBody(permit int, token string, ttl time.Duration) permitToken {
	b := permitToken{Token: token, TTLMs: ms(ttl)}
	if permit >= 0 {
		b.Permit = &permit
	}
	return b
}

// ExtendPermit gives a permit a new TTL from now; ErrLost when it has run
// out. permit may be ByToken: the token alone names the permit.
func (c *Client) ExtendPermit(ctx context.Context, name string, permit int, token string, ttl time.Duration) (Extended, error) {
	var a extendAnswer
	if err := c.call(ctx, http.MethodPost, path("semaphores", name, "extend"), permitTokenBody(permit, token, ttl), &a); err != nil {
		return Extended{}, err
	}
	return a.extended(), nil
}

// ReleasePermit releases a permit on every master; false when it had run
// out already. permit may be ByToken, as in ExtendPermit.
func (c *Client) ReleasePermit(ctx context.Context, name string, permit int, token string) (bool, error) {
	var a releaseAnswer
	if err := c.call(ctx, http.MethodPost, path("semaphores", name, "release"), permitTokenBody(permit, token, 0), &a); err != nil {
		return false, err
	}
	return a.Released, nil
}

// Extend extends the permit and moves ValidUntil.
func (p *Permit) Extend(ctx context.Context, ttl time.Duration) error {
	e, err := p.c.ExtendPermit(ctx, p.Semaphore, p.Permit, p.Token, ttl)
	if err != nil {
		return err
	}
	p.TTL, p.Validity, p.ValidUntil = e.TTL, e.Validity, e.ValidUntil
	return nil
}

// Release releases the permit.
func (p *Permit) Release(ctx context.Context) (bool, error) {
	return p.c.ReleasePermit(ctx, p.Semaphore, p.Permit, p.Token)
}

// HoldPermit holds one of the limit permits of semaphore name as Hold
// holds a lock: renewed by the agent, released on Close, Lost() closed
// when it is lost. h.Permit() says which permit.
func (c *Client) HoldPermit(ctx context.Context, name string, limit int, o HoldOptions) (*Hold, error) {
	if err := o.exclusive("a permit"); err != nil {
		return nil, err
	}
	b := o.body()
	b.Limit = limit
	return c.hold(ctx, name, path("semaphores", name, "hold"), b)
}

// PermitInfo is one held permit as GET /v1/semaphores/{name} shows it:
// who holds it, never its token.
type PermitInfo struct {
	Permit     int    `json:"permit"`
	Agent      string `json:"agent"`
	Owner      string `json:"owner"`
	ValidityMs int64  `json:"validity_ms"`
	HeldHere   bool   `json:"held_here"`
	Pid        int    `json:"pid"`
	UID        int    `json:"uid"`
}

// SemaphoreInfo is a semaphore's permits as a quorum of masters hold them.
type SemaphoreInfo struct {
	Semaphore string `json:"semaphore"`
	// Limit is 0 when no permit is held.
	Limit   int          `json:"limit"`
	Permits []PermitInfo `json:"permits"`
	// Waiters are this agent's requests waiting for a permit.
	Waiters int `json:"waiters"`
	// Unread names masters that could not be read: a permit may be missing.
	Unread  []string `json:"unread"`
	Partial bool     `json:"partial"`
}

// Semaphore reads who holds semaphore name's permits.
func (c *Client) Semaphore(ctx context.Context, name string) (*SemaphoreInfo, error) {
	var a SemaphoreInfo
	if err := c.call(ctx, http.MethodGet, path("semaphores", name, ""), nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

package redlock

// Locks on several resources at once: all of them or none, under one token.

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"
)

// MaxResources is the most resources one lock on several may name.
const MaxResources = 32

// MultiLock is a granted lock on several resources: one token and one
// fence for all of them. Use it only until ValidUntil; extend or release
// it as a Lock.
type MultiLock struct {
	c *Client
	// Resources are the resources held, sorted.
	Resources []string
	// Token is the only proof of holding them; it extends and releases all.
	Token      string
	TTL        time.Duration
	Validity   time.Duration
	ValidUntil time.Time
	// Fence is the fencing token, 0 when none was asked for: larger than
	// every earlier grant's fence of each of the resources.
	Fence uint64
}

type multiBody struct {
	holdBody
	Resources []string `json:"resources"`
}

type multiToken struct {
	Token     string   `json:"token"`
	TTLMs     int64    `json:"ttl_ms,omitempty"`
	Resources []string `json:"resources,omitempty"`
}

var errMultiReenter = errors.New("redlock: a lock on several resources cannot be re-entered")

// AcquireMany takes the locks on every one of resources (2 to
// MaxResources distinct names), all of them or none, waiting up to o.Wait
// while any is taken. Refusals are *Error as for Acquire: ErrTaken when
// one of them stayed held for all of the wait.
func (c *Client) AcquireMany(ctx context.Context, resources []string, o LockOptions) (*MultiLock, error) {
	var a struct {
		Resources  []string `json:"resources"`
		Token      string   `json:"token"`
		ValidityMs int64    `json:"validity_ms"`
		TTLMs      int64    `json:"ttl_ms"`
		Fence      uint64   `json:"fence"`
	}
	if err := o.exclusive("a lock on several resources"); err != nil {
		return nil, err
	}
	body := multiBody{holdBody: holdBody{lockBody: o.body()}, Resources: resources}
	if err := c.call(ctx, http.MethodPost, "http://agent/v1/locks/acquire", body, &a); err != nil {
		return nil, err
	}
	return &MultiLock{
		c: c, Resources: a.Resources, Token: a.Token,
		TTL: millis(a.TTLMs), Validity: millis(a.ValidityMs), ValidUntil: time.Now().Add(millis(a.ValidityMs)),
		Fence: a.Fence,
	}, nil
}

// ExtendMany gives every resource of the token's grant a new TTL from now
// (the agent's default when ttl is zero); ErrLost when they were not
// extended on a quorum in time. resources are needed only through an
// agent that did not grant the token.
func (c *Client) ExtendMany(ctx context.Context, token string, ttl time.Duration, resources ...string) (Extended, error) {
	var a extendAnswer
	if err := c.call(ctx, http.MethodPost, "http://agent/v1/locks/extend", multiTokenBody(token, ttl, resources), &a); err != nil {
		return Extended{}, err
	}
	return a.extended(), nil
}

// ReleaseMany releases every resource of the token's grant on every master
// at once; false when they had run out already. resources as in
// ExtendMany.
func (c *Client) ReleaseMany(ctx context.Context, token string, resources ...string) (bool, error) {
	var a releaseAnswer
	if err := c.call(ctx, http.MethodPost, "http://agent/v1/locks/release", multiTokenBody(token, 0, resources), &a); err != nil {
		return false, err
	}
	return a.Released, nil
}

func multiTokenBody(token string, ttl time.Duration, resources []string) multiToken {
	return multiToken{Token: token, TTLMs: ms(ttl), Resources: resources}
}

// Extend extends them all (see Client.ExtendMany) and moves ValidUntil.
func (l *MultiLock) Extend(ctx context.Context, ttl time.Duration) error {
	e, err := l.c.ExtendMany(ctx, l.Token, ttl)
	if err != nil {
		return err
	}
	l.TTL, l.Validity, l.ValidUntil = e.TTL, e.Validity, e.ValidUntil
	return nil
}

// Release releases them all (see Client.ReleaseMany).
func (l *MultiLock) Release(ctx context.Context) (bool, error) {
	return l.c.ReleaseMany(ctx, l.Token)
}

// HoldMany holds every one of resources as Hold holds one lock: granted
// all together or not at all, renewed together, Lost() closed when they
// are lost, released together on Close. h.Resources() names them, sorted.
// o.Reenter is refused: a lock on several resources is not re-entered.
func (c *Client) HoldMany(ctx context.Context, resources []string, o HoldOptions) (*Hold, error) {
	if o.Reenter != "" {
		return nil, errMultiReenter
	}
	if err := o.exclusive("a lock on several resources"); err != nil {
		return nil, err
	}
	sorted := append([]string(nil), resources...)
	sort.Strings(sorted)
	body := multiBody{holdBody: o.body(), Resources: sorted}
	h, err := c.hold(ctx, strings.Join(sorted, ","), "http://agent/v1/locks/hold", body)
	if err != nil {
		return nil, err
	}
	h.resources = sorted
	return h, nil
}

package redlock_test

// Locks on several resources at once against the real agent started by
// TestMain: all of them or none under one token, and a hold of several
// that frees them all on Close.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"redlock-agent.example/redlock"
)

// wantFree acquires each resource alone, within a short wait, and
// releases it.
func wantFree(ctx context.Context, t *testing.T, c *redlock.Client, resources ...string) {
	t.Helper()
	for _, r := range resources {
		l, err := c.Acquire(ctx, r, redlock.LockOptions{TTL: 30 * time.Second, Wait: 5 * time.Second})
		if err != nil {
			t.Fatalf("%s is not free: %v", r, err)
		}
		if rel, err := l.Release(ctx); err != nil || !rel.Released {
			t.Fatalf("release %s: %+v %v", r, rel, err)
		}
	}
}

// Two resources under one token refuse a single acquire of either (409
// taken) and a lock on several that shares one; released by the token,
// both are free.
func TestMultiLockRoundTrip(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	l, err := c.AcquireMany(ctx, []string{"go-many-b", "go-many-a"}, redlock.LockOptions{TTL: 10 * time.Second, Owner: "go-test", Fence: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l.Resources, []string{"go-many-a", "go-many-b"}) || l.Token == "" || l.Fence == 0 || l.Validity <= 0 || l.Validity > 10*time.Second {
		t.Fatalf("grant: %+v", l)
	}
	for _, r := range l.Resources {
		_, err = c.Acquire(ctx, r, redlock.LockOptions{})
		wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	}
	_, err = c.AcquireMany(ctx, []string{"go-many-a", "go-many-c"}, redlock.LockOptions{})
	wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	wantFree(ctx, t, c, "go-many-c")

	if err := l.Extend(ctx, 20*time.Second); err != nil || l.TTL != 20*time.Second || l.Validity <= 10*time.Second {
		t.Fatalf("extend: %v %+v", err, l)
	}
	if ok, err := c.ReleaseMany(ctx, l.Token); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	wantFree(ctx, t, c, "go-many-a", "go-many-b")
	if ok, err := c.ReleaseMany(ctx, l.Token, l.Resources...); err != nil || ok {
		t.Fatalf("second release: %v %v", ok, err)
	}
	_, err = c.ExtendMany(ctx, l.Token, 0, l.Resources...)
	wantCode(t, err, redlock.ErrLost, http.StatusConflict)
}

// A hold of several resources is renewed, keeps each of them from a
// single acquire, and frees them all on Close.
func TestHoldManyCloseReleases(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	o := redlock.HoldOptions{LockOptions: redlock.LockOptions{TTL: 600 * time.Millisecond, Fence: true}}
	h, err := c.HoldMany(ctx, []string{"go-hold-b", "go-hold-a"}, o)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.Resources(), []string{"go-hold-a", "go-hold-b"}) || h.Resource() != "go-hold-a,go-hold-b" || h.Fence() == 0 {
		t.Fatalf("hold: %v %q %d", h.Resources(), h.Resource(), h.Fence())
	}
	first := h.ValidUntil()
	end := time.Now().Add(deadline)
	for !h.ValidUntil().After(first) {
		if time.Now().After(end) {
			t.Fatal("no renewal")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range h.Resources() {
		_, err = c.Acquire(ctx, r, redlock.LockOptions{})
		wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	}
	h.Close()
	select {
	case <-h.Lost():
		t.Fatal("Close is not a loss")
	default:
	}
	// A TTL far longer than the wait: only the release lets these through.
	wantFree(ctx, t, c, "go-hold-a", "go-hold-b")

	o.Reenter = "a-token"
	if _, err := c.HoldMany(ctx, []string{"go-hold-a", "go-hold-b"}, o); err == nil {
		t.Fatal("a re-entering hold of several was not refused")
	}
}

// A hold of several hears of an operator's force release of one of them.
func TestHoldManyLostOnForceRelease(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	h, err := c.HoldMany(ctx, []string{"go-forced-a", "go-forced-b"}, redlock.HoldOptions{LockOptions: redlock.LockOptions{TTL: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	admin := redlock.New(filepath.Join(filepath.Dir(socket), "admin.sock"))
	if _, err := admin.ForceRelease(ctx, "go-forced-b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Lost():
	case <-time.After(deadline):
		t.Fatal("no loss notice")
	}
	if h.Reason() != "force_released" || !errors.Is(h.Context().Err(), context.Canceled) {
		t.Fatalf("reason %q, context %v", h.Reason(), h.Context().Err())
	}
	wantFree(ctx, t, c, "go-forced-a", "go-forced-b")
}

// The bodies sent: a lock on several names its resources (and a token
// alone to release it); a permit's number is sent unless ByToken.
func TestMultiAndPermitBodies(t *testing.T) {
	bodies := make(chan map[string]interface{}, 4)
	socket := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		var b map[string]interface{}
		_ = json.NewDecoder(r.Body).Decode(&b)
		b["path"] = r.URL.Path
		bodies <- b
		_, _ = w.Write([]byte(`{"released": true, "resources": ["a", "b"], "token": "t", "validity_ms": 1, "ttl_ms": 2}`))
	})
	c := redlock.New(socket)
	ctx := testContext(t)
	if _, err := c.AcquireMany(ctx, []string{"b", "a"}, redlock.LockOptions{TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	_, _ = c.ReleaseMany(ctx, "t")
	_, _ = c.ReleasePermit(ctx, "s", redlock.ByToken, "t")
	_, _ = c.ReleasePermit(ctx, "s", 0, "t")
	want := []string{
		`{"path":"/v1/locks/acquire","resources":["b","a"],"ttl_ms":1000}`,
		`{"path":"/v1/locks/release","token":"t"}`,
		`{"path":"/v1/semaphores/s/release","token":"t"}`,
		`{"path":"/v1/semaphores/s/release","permit":0,"token":"t"}`,
	}
	for _, w := range want {
		got, _ := json.Marshal(<-bodies)
		if string(got) != w {
			t.Fatalf("sent %s, want %s", got, w)
		}
	}
}

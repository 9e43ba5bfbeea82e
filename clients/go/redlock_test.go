package redlock_test

// The client against a real agent on three real redis-server masters
// (`redlock-agent dev`), started once for every test. The agent binary is
// $REDLOCK_AGENT, or target/debug/redlock-agent of this repository.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"redlock-agent.example/redlock"
)

const deadline = 15 * time.Second

var socket string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin := os.Getenv("REDLOCK_AGENT")
	if bin == "" {
		bin, _ = filepath.Abs("../../target/debug/redlock-agent")
	}
	if _, err := os.Stat(bin); err != nil {
		fmt.Fprintf(os.Stderr, "no agent binary at %s: run `cargo build -p redlock-agent` or set REDLOCK_AGENT\n", bin)
		return 1
	}
	dir, err := os.MkdirTemp("", "redlock-go-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	socket = filepath.Join(dir, "agent.sock")
	agent := exec.Command(bin, "dev", "--socket", socket, "--masters", "3", "--metrics", "127.0.0.1:0")
	logPath := filepath.Join(dir, "agent.log")
	log, err := os.Create(logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer log.Close()
	agent.Stderr = log
	if err := agent.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = agent.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(deadline):
			_ = agent.Process.Kill()
		}
	}()
	c := redlock.New(socket)
	end := time.Now().Add(deadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok, err := c.Available(ctx)
		cancel()
		if ok {
			break
		}
		if time.Now().After(end) {
			data, _ := os.ReadFile(logPath)
			fmt.Fprintf(os.Stderr, "the agent did not answer with a usable quorum: %v; its log:\n%s", err, data)
			return 1
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m.Run()
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, sentinel error, status int) {
	t.Helper()
	var e *redlock.Error
	if !errors.Is(err, sentinel) || !errors.As(err, &e) || e.Status != status {
		t.Fatalf("want %v (%d), got %v", sentinel, status, err)
	}
}

// Acquire, extend, release; a second acquire is refused as taken; a
// resource with "/" and ":" is one path segment; fences grow.
func TestLockRoundTrip(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	l, err := c.Acquire(ctx, "go/orders:42", redlock.LockOptions{TTL: 10 * time.Second, Owner: "go-test", Fence: true})
	if err != nil {
		t.Fatal(err)
	}
	if l.Resource != "go/orders:42" || l.Token == "" || l.Fence == 0 || l.Validity <= 0 || l.Validity > 10*time.Second {
		t.Fatalf("grant: %+v", l)
	}
	_, err = c.Acquire(ctx, "go/orders:42", redlock.LockOptions{TTL: 10 * time.Second})
	wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	if err := l.Extend(ctx, 20*time.Second); err != nil || l.TTL != 20*time.Second {
		t.Fatalf("extend: %v %+v", err, l)
	}
	r, err := l.Release(ctx)
	if err != nil || !r.Released {
		t.Fatalf("release: %+v %v", r, err)
	}
	_, err = l.Release(ctx)
	if err != nil {
		t.Fatalf("second release: %v", err)
	}
	_, err = c.Extend(ctx, "go/orders:42", l.Token, 0)
	wantCode(t, err, redlock.ErrLost, http.StatusConflict)

	next, err := c.Acquire(ctx, "go/orders:42", redlock.LockOptions{Fence: true})
	if err != nil || next.Fence <= l.Fence {
		t.Fatalf("next fence %+v after %d: %v", next, l.Fence, err)
	}
	_, _ = next.Release(ctx)

	_, err = c.Acquire(ctx, "go-r", redlock.LockOptions{TTL: time.Millisecond})
	var e *redlock.Error
	if !errors.As(err, &e) || e.Code != redlock.CodeTTLOutOfRange || e.Status != http.StatusBadRequest {
		t.Fatalf("ttl 1 ms: %v", err)
	}
}

// A re-entered lock takes one release per acquire; only the last releases
// it on the masters.
func TestReentry(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	l, err := c.Acquire(ctx, "go-reentry", redlock.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	again, err := l.Reenter(ctx, 10*time.Second)
	if err != nil || again.Token != l.Token || again.HoldCount != 2 {
		t.Fatalf("reenter: %+v %v", again, err)
	}
	r, err := l.Release(ctx)
	if err != nil || r.Released || r.HoldCount != 1 {
		t.Fatalf("first release: %+v %v", r, err)
	}
	_, err = c.Acquire(ctx, "go-reentry", redlock.LockOptions{})
	wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	r, err = l.Release(ctx)
	if err != nil || !r.Released || r.HoldCount != 0 {
		t.Fatalf("last release: %+v %v", r, err)
	}
	_, err = c.Reenter(ctx, "go-reentry", l.Token, 0)
	wantCode(t, err, redlock.ErrNotReentrant, http.StatusConflict)
	if l.HoldCount != 1 {
		t.Fatalf("a first grant's count: %d", l.HoldCount)
	}
}

// A hold re-enters a lock with its token: renewed while open, and its
// close lowers the count as a release does.
func TestHoldReenters(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	l, err := c.Acquire(ctx, "go-hold-reentry", redlock.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Hold(ctx, "go-hold-reentry", redlock.HoldOptions{Reenter: l.Token})
	if err != nil {
		t.Fatal(err)
	}
	if h.Token() != l.Token || h.HoldCount() != 2 {
		t.Fatalf("hold: token %q count %d", h.Token(), h.HoldCount())
	}
	r, err := l.Release(ctx)
	if err != nil || r.Released || r.HoldCount != 1 {
		t.Fatalf("release while the hold is open: %+v %v", r, err)
	}
	_, err = c.Acquire(ctx, "go-hold-reentry", redlock.LockOptions{})
	wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	h.Close() // the last: released on the masters
	next, err := c.Acquire(ctx, "go-hold-reentry", redlock.LockOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("after the hold closed: %v", err)
	}
	_, _ = next.Release(ctx)
}

// A hold hears of an operator's force release (on the admin socket) at
// once: Lost() closes, Reason() says force_released, Context() ends.
func TestHoldLostOnForceRelease(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	h, err := c.Hold(ctx, "go-hold", redlock.HoldOptions{LockOptions: redlock.LockOptions{TTL: 2 * time.Second, Fence: true, Owner: "go-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Token() == "" || h.Fence() == 0 || h.Permit() != -1 || time.Until(h.ValidUntil()) <= 0 {
		t.Fatalf("hold: token %q fence %d permit %d", h.Token(), h.Fence(), h.Permit())
	}
	// Renewed past its first TTL.
	select {
	case <-h.Lost():
		t.Fatalf("lost: %s", h.Reason())
	case <-time.After(2500 * time.Millisecond):
	}
	admin := redlock.New(filepath.Join(filepath.Dir(socket), "admin.sock"))
	deleted, err := admin.ForceRelease(ctx, "go-hold")
	if err != nil || deleted != 3 {
		t.Fatalf("force release: %d %v", deleted, err)
	}
	select {
	case <-h.Lost():
	case <-time.After(deadline):
		t.Fatal("no loss notice")
	}
	if h.Reason() != "force_released" {
		t.Fatalf("reason: %s", h.Reason())
	}
	<-h.Context().Done()
}

// Closing a hold releases the lock: a waiter gets it at once.
func TestHoldCloseReleases(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	h, err := c.Hold(ctx, "go-close", redlock.HoldOptions{LockOptions: redlock.LockOptions{TTL: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "go-close", redlock.LockOptions{TTL: 5 * time.Second, Wait: 10 * time.Second})
		if err == nil {
			_, err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter queue; the test holds either way
	start := time.Now()
	h.Close()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the waiter got the lock %v after the close: not released", waited)
	}
	select {
	case <-h.Lost():
		t.Fatal("Close is not a loss")
	default:
	}
}

// ctx bounds a wait for a taken lock.
func TestContextBoundsWait(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	l, err := c.Acquire(ctx, "go-ctx", redlock.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Hold(short, "go-ctx", redlock.HoldOptions{LockOptions: redlock.LockOptions{Wait: 10 * time.Second}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("hold after %v: %v", time.Since(start), err)
	}
	_, err = c.Acquire(short, "go-ctx", redlock.LockOptions{Wait: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire: %v", err)
	}
}

// k permits are granted, the (k+1)th is taken, then granted once one is
// released; another limit is limit_mismatch; a held permit shows.
func TestSemaphore(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	const name, k = "go-sem", 2
	var permits []*redlock.Permit
	seen := map[int]bool{}
	for i := 0; i < k; i++ {
		p, err := c.AcquirePermit(ctx, name, k, redlock.LockOptions{TTL: 10 * time.Second, Owner: "go-test"})
		if err != nil {
			t.Fatal(err)
		}
		if p.Permit < 0 || p.Permit >= k || seen[p.Permit] || p.Token == "" {
			t.Fatalf("permit %+v (seen %v)", p, seen)
		}
		seen[p.Permit] = true
		permits = append(permits, p)
	}
	_, err := c.AcquirePermit(ctx, name, k, redlock.LockOptions{})
	wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	_, err = c.AcquirePermit(ctx, name, k+1, redlock.LockOptions{})
	wantCode(t, err, redlock.ErrLimitMismatch, http.StatusConflict)

	info, err := c.Semaphore(ctx, name)
	if err != nil || info.Limit != k || len(info.Permits) != k {
		t.Fatalf("semaphore: %+v %v", info, err)
	}

	got := make(chan *redlock.Permit, 1)
	failed := make(chan error, 1)
	go func() {
		p, err := c.AcquirePermit(ctx, name, k, redlock.LockOptions{TTL: 10 * time.Second, Wait: 10 * time.Second})
		if err != nil {
			failed <- err
			return
		}
		got <- p
	}()
	if err := permits[0].Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, err := permits[0].Release(ctx); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	select {
	case p := <-got:
		if p.Permit != permits[0].Permit {
			t.Fatalf("granted permit %d, released %d", p.Permit, permits[0].Permit)
		}
		permits[0] = p
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(deadline):
		t.Fatal("the waiter was not granted")
	}
	// The token alone names a permit.
	if _, err := c.ExtendPermit(ctx, name, redlock.ByToken, permits[1].Token, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.ReleasePermit(ctx, name, redlock.ByToken, permits[1].Token); err != nil || !ok {
		t.Fatalf("release by token: %v %v", ok, err)
	}
	for _, p := range permits[:1] {
		if _, err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	h, err := c.HoldPermit(ctx, name, k, redlock.HoldOptions{LockOptions: redlock.LockOptions{TTL: 2 * time.Second, Fence: true}})
	if err != nil {
		t.Fatal(err)
	}
	if h.Permit() < 0 || h.Permit() >= k || h.Fence() == 0 {
		t.Fatalf("held permit %d fence %d", h.Permit(), h.Fence())
	}
	_, err = c.HoldPermit(ctx, name, 1, redlock.HoldOptions{})
	wantCode(t, err, redlock.ErrLimitMismatch, http.StatusConflict)
	h.Close()
}

// No leader is 404 no_leader; the first campaigner leads with a term; a
// second waits, then leads with a larger term once the first resigns;
// Leader and an observer follow.
func TestElection(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	const name = "go-election"
	_, err := c.Leader(ctx, name)
	wantCode(t, err, redlock.ErrNoLeader, http.StatusNotFound)

	first, err := c.Campaign(ctx, name, redlock.CampaignOptions{TTL: 2 * time.Second, Value: "10.0.0.1:80", Owner: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Term() == 0 || first.Election() != name {
		t.Fatalf("elected: term %d", first.Term())
	}
	leader, err := c.Leader(ctx, name)
	if err != nil || leader.Value != "10.0.0.1:80" || leader.Term != first.Term() || leader.Owner != "first" {
		t.Fatalf("leader: %+v %v", leader, err)
	}
	observer, err := c.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close()
	if l := <-observer.Changes(); l == nil || l.Term != first.Term() {
		t.Fatalf("observed first: %+v", l)
	}

	waiting := make(chan *redlock.Leader, 8)
	elected := make(chan *redlock.Leadership, 1)
	failed := make(chan error, 1)
	go func() {
		l, err := c.Campaign(ctx, name, redlock.CampaignOptions{TTL: 2 * time.Second, Value: "10.0.0.2:80", OnWaiting: func(l *redlock.Leader) {
			waiting <- l
		}})
		if err != nil {
			failed <- err
			return
		}
		elected <- l
	}()
	select {
	case l := <-waiting:
		if l != nil && l.Term != first.Term() {
			t.Fatalf("waiting behind %+v", l)
		}
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(deadline):
		t.Fatal("the second campaigner did not wait")
	}
	select {
	case <-elected:
		t.Fatal("two leaders")
	case <-time.After(2500 * time.Millisecond): // past the first's TTL: renewed
	}
	resigned := time.Now()
	first.Resign()
	var second *redlock.Leadership
	select {
	case second = <-elected:
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(deadline):
		t.Fatal("the second campaigner was not elected")
	}
	defer second.Resign()
	if second.Term() <= first.Term() {
		t.Fatalf("term %d after %d", second.Term(), first.Term())
	}
	if took := time.Since(resigned); took > 2*time.Second {
		t.Fatalf("elected %v after the resignation", took)
	}
	end := time.After(deadline)
	for {
		select {
		case l, ok := <-observer.Changes():
			if !ok {
				t.Fatal("the observation ended")
			}
			if l != nil && l.Term == second.Term() {
				if l.Value != "10.0.0.2:80" {
					t.Fatalf("observed %+v", l)
				}
				return
			}
		case <-end:
			t.Fatal("the observer did not see the second leader")
		}
	}
}

package redlock_test

// Read-write locks (Mode: Shared) against the real agent started by
// TestMain: readers together, a writer refused while one holds the lock,
// and modes checked before any request.

import (
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"redlock-agent.example/redlock"
)

// Two shared holds of one lock are granted at once; once both close, a
// writer gets it.
func TestSharedHoldsTogether(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	read := redlock.HoldOptions{LockOptions: redlock.LockOptions{TTL: 10 * time.Second, Mode: redlock.Shared}}
	first, err := c.Hold(ctx, "go-shared", read)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := c.Hold(ctx, "go-shared", read)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	defer second.Close()
	if first.Mode() != redlock.Shared || second.Mode() != redlock.Shared || first.Token() == second.Token() {
		t.Fatalf("holds: %s %s, tokens equal: %v", first.Mode(), second.Mode(), first.Token() == second.Token())
	}
	select {
	case <-first.Lost():
		t.Fatalf("the first reader lost the lock: %s", first.Reason())
	case <-second.Lost():
		t.Fatalf("the second reader lost the lock: %s", second.Reason())
	default:
	}
	first.Close()
	second.Close()
	w, err := c.Acquire(ctx, "go-shared", redlock.LockOptions{TTL: 10 * time.Second, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("a writer after the readers: %v", err)
	}
	if w.Mode != redlock.Exclusive {
		t.Fatalf("writer's mode: %q", w.Mode)
	}
	if r, err := w.Release(ctx); err != nil || !r.Released {
		t.Fatalf("release: %+v %v", r, err)
	}
}

// While a reader holds the lock an exclusive acquire with no wait is
// taken; the reader re-enters in its own mode only, and once released the
// writer gets the lock.
func TestExclusiveTakenWhileShared(t *testing.T) {
	ctx := testContext(t)
	c := redlock.New(socket)
	r, err := c.Acquire(ctx, "go-shared-x", redlock.LockOptions{TTL: 10 * time.Second, Mode: redlock.Shared})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != redlock.Shared || r.HoldCount != 1 {
		t.Fatalf("reader: mode %q count %d", r.Mode, r.HoldCount)
	}
	_, err = c.Acquire(ctx, "go-shared-x", redlock.LockOptions{})
	wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	_, err = c.Acquire(ctx, "go-shared-x", redlock.LockOptions{Mode: redlock.Exclusive})
	wantCode(t, err, redlock.ErrTaken, http.StatusConflict)
	_, err = c.Hold(ctx, "go-shared-x", redlock.HoldOptions{})
	wantCode(t, err, redlock.ErrTaken, http.StatusConflict)

	again, err := r.Reenter(ctx, 10*time.Second)
	if err != nil || again.Token != r.Token || again.HoldCount != 2 || again.Mode != redlock.Shared {
		t.Fatalf("reenter: %+v %v", again, err)
	}
	_, err = c.Reenter(ctx, "go-shared-x", r.Token, 0) // exclusive: not the grant's mode
	wantCode(t, err, redlock.ErrNotReentrant, http.StatusConflict)
	if err := r.Extend(ctx, 20*time.Second); err != nil || r.TTL != 20*time.Second {
		t.Fatalf("extend: %v %+v", err, r)
	}
	if rel, err := r.Release(ctx); err != nil || rel.Released || rel.HoldCount != 1 {
		t.Fatalf("first release: %+v %v", rel, err)
	}
	if rel, err := r.Release(ctx); err != nil || !rel.Released {
		t.Fatalf("last release: %+v %v", rel, err)
	}
	w, err := c.Acquire(ctx, "go-shared-x", redlock.LockOptions{})
	if err != nil {
		t.Fatalf("a writer after the reader: %v", err)
	}
	_, _ = w.Release(ctx)
}

// A mode other than shared or exclusive is refused before any request
// (nothing listens on the socket: a request would fail to dial), and so
// is a shared mode where there is none (a permit, a lock on several).
func TestModeCheckedLocally(t *testing.T) {
	ctx := testContext(t)
	nobody := redlock.New(filepath.Join(filepath.Dir(socket), "nobody.sock"))
	for _, m := range []redlock.Mode{"read", "Shared", "write", " shared"} {
		o := redlock.LockOptions{Mode: m}
		if _, err := nobody.Acquire(ctx, "go-mode", o); !errors.Is(err, redlock.ErrInvalidMode) || !strings.Contains(err.Error(), string(m)) {
			t.Errorf("acquire %q: %v", m, err)
		}
		if _, err := nobody.Hold(ctx, "go-mode", redlock.HoldOptions{LockOptions: o}); !errors.Is(err, redlock.ErrInvalidMode) {
			t.Errorf("hold %q: %v", m, err)
		}
		if _, err := nobody.AcquirePermit(ctx, "go-mode", 2, o); !errors.Is(err, redlock.ErrInvalidMode) {
			t.Errorf("permit %q: %v", m, err)
		}
	}
	shared := redlock.LockOptions{Mode: redlock.Shared}
	for what, call := range map[string]func() error{
		"permit": func() error { _, err := nobody.AcquirePermit(ctx, "go-mode", 2, shared); return err },
		"hold permit": func() error {
			_, err := nobody.HoldPermit(ctx, "go-mode", 2, redlock.HoldOptions{LockOptions: shared})
			return err
		},
		"many": func() error { _, err := nobody.AcquireMany(ctx, []string{"a", "b"}, shared); return err },
		"hold many": func() error {
			_, err := nobody.HoldMany(ctx, []string{"a", "b"}, redlock.HoldOptions{LockOptions: shared})
			return err
		},
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "no shared mode") {
			t.Errorf("%s with a shared mode: %v", what, err)
		}
	}
	// Exclusive, named or not, is sent: the request fails to dial.
	for _, m := range []redlock.Mode{"", redlock.Exclusive} {
		if _, err := nobody.Acquire(ctx, "go-mode", redlock.LockOptions{Mode: m}); err == nil || errors.Is(err, redlock.ErrInvalidMode) || !strings.Contains(err.Error(), "nobody.sock") {
			t.Errorf("acquire %q: %v", m, err)
		}
	}
}

// The bodies sent: "mode":"shared" for a reader, no mode for exclusive
// (named or not), as the wire wants; a reader's hold says it is shared
// though its acquired event does not.
func TestModeBodies(t *testing.T) {
	bodies := make(chan string, 4)
	socket := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		bodies <- r.URL.Path + " " + string(data)
		if strings.HasSuffix(r.URL.Path, "/hold") {
			_, _ = w.Write([]byte(`{"event":"acquired","token":"t","validity_ms":10000,"ttl_ms":10000}` + "\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		mode := ""
		if strings.Contains(string(data), `"mode":"shared"`) {
			mode = `, "mode": "shared"`
		}
		_, _ = w.Write([]byte(`{"resource": "r", "token": "t", "validity_ms": 1, "ttl_ms": 2` + mode + `}`))
	})
	c := redlock.New(socket)
	ctx := testContext(t)
	for _, m := range []redlock.Mode{redlock.Shared, redlock.Exclusive, ""} {
		l, err := c.Acquire(ctx, "r", redlock.LockOptions{Mode: m})
		if err != nil {
			t.Fatal(err)
		}
		want := redlock.Exclusive
		if m == redlock.Shared {
			want = redlock.Shared
		}
		if l.Mode != want {
			t.Fatalf("asked %q, granted %q", m, l.Mode)
		}
	}
	h, err := c.Hold(ctx, "r", redlock.HoldOptions{LockOptions: redlock.LockOptions{Mode: redlock.Shared}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Mode() != redlock.Shared {
		t.Fatalf("hold's mode: %q", h.Mode())
	}
	want := []string{
		`/v1/locks/r/acquire {"mode":"shared"}`,
		`/v1/locks/r/acquire {}`,
		`/v1/locks/r/acquire {}`,
		`/v1/locks/r/hold {"mode":"shared"}`,
	}
	for _, w := range want {
		if got := <-bodies; got != w {
			t.Fatalf("sent %s, want %s", got, w)
		}
	}
}

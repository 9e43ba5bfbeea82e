package redlock_test

// The client against a fake agent on a Unix socket, for what a real one
// does not do on demand: fall silent, or drop the stream without a notice.

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"redlock-agent.example/redlock"
)

// fakeAgent serves handler on a socket in a temp dir and returns its path.
func fakeAgent(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: handler}
	go func() { _ = server.Serve(l) }()
	t.Cleanup(func() { server.Close() })
	return path
}

func waitLost(t *testing.T, h *redlock.Hold, within time.Duration) string {
	t.Helper()
	select {
	case <-h.Lost():
		return h.Reason()
	case <-time.After(within):
		t.Fatal("no loss")
		return ""
	}
}

// An agent that stops renewing (frozen, or its host) is a loss by a
// twentieth of the validity before its end: "expired".
func TestHoldExpiresWithoutRenewals(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	socket := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = w.Write([]byte(`{"event":"acquired","token":"t","validity_ms":300,"ttl_ms":400}` + "\n"))
		w.(http.Flusher).Flush()
		<-release
	})
	h, err := redlock.New(socket).Hold(context.Background(), "r", redlock.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	start := time.Now()
	if reason := waitLost(t, h, 5*time.Second); reason != "expired" {
		t.Fatalf("reason %q", reason)
	}
	// About 285 ms (a twentieth of 300 before its end); the bounds leave
	// room for a loaded machine.
	if took := time.Since(start); took < 200*time.Millisecond || took > 2*time.Second {
		t.Fatalf("lost after %v", took)
	}
	<-h.Context().Done()
}

// A stream that ends without a lost line is a loss: "disconnected".
func TestHoldDisconnected(t *testing.T) {
	socket := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = w.Write([]byte(`{"event":"acquired","token":"t","validity_ms":10000,"ttl_ms":10000}` + "\n"))
		w.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		_, _ = w.Write([]byte(`{"event":"renewed","validity_ms":10000}` + "\n"))
	})
	h, err := redlock.New(socket).Hold(context.Background(), "r", redlock.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if reason := waitLost(t, h, 5*time.Second); reason != "disconnected" {
		t.Fatalf("reason %q", reason)
	}
}

// An answer that is not the agent's JSON error keeps its status.
func TestUnexpectedAnswer(t *testing.T) {
	socket := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	})
	_, err := redlock.New(socket).Acquire(context.Background(), "r", redlock.LockOptions{})
	e, ok := err.(*redlock.Error)
	if !ok || e.Status != http.StatusBadGateway || e.Code != "unexpected_answer" {
		t.Fatalf("%v", err)
	}
}

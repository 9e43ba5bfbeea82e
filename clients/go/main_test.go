package main

// The example against a real agent on three real redis-server masters
// (`redlock-agent dev`): the round trip, then a hold that hears of an
// operator's force release. The agent binary is $REDLOCK_AGENT, or
// target/debug/redlock-agent of this repository.

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const deadline = 15 * time.Second

func startAgent(t *testing.T) string {
	bin := os.Getenv("REDLOCK_AGENT")
	if bin == "" {
		bin, _ = filepath.Abs("../../target/debug/redlock-agent")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no agent binary at %s: run `cargo build -p redlock-agent` or set REDLOCK_AGENT", bin)
	}
	socket := filepath.Join(t.TempDir(), "agent.sock")
	agent := exec.Command(bin, "dev", "--socket", socket, "--masters", "3", "--metrics", "127.0.0.1:0")
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = agent.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(deadline):
			_ = agent.Process.Kill()
		}
	})
	c := newClient(socket)
	end := time.Now().Add(deadline)
	for {
		var nodes struct {
			Available bool `json:"available"`
		}
		resp, err := c.Get("http://agent/v1/nodes")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&nodes)
			resp.Body.Close()
			if err == nil && nodes.Available {
				return socket
			}
		}
		if time.Now().After(end) {
			t.Fatalf("the agent did not answer with a usable quorum: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExample(t *testing.T) {
	socket := startAgent(t)
	c := newClient(socket)

	var out strings.Builder
	if err := roundTrip(c, "go/orders:42", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "released: true") {
		t.Fatalf("round trip: %s", out.String())
	}

	// Refusals come back as the agent's error code.
	var g grant
	err := post(c, lockURL("go-r", "acquire"), map[string]interface{}{"ttl_ms": 1}, &g)
	if e, ok := err.(*apiError); !ok || e.Code != "ttl_out_of_range" || e.Status != http.StatusBadRequest {
		t.Fatalf("ttl_ms 1: %v", err)
	}

	pr, pw := io.Pipe()
	result := make(chan string, 1)
	go func() {
		reason, err := holdUntilLost(c, "go-example", pw)
		if err != nil {
			reason = "error: " + err.Error()
		}
		pw.Close()
		result <- reason
	}()
	first, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "held go-example") {
		t.Fatalf("first line %q: %v", first, err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	// Force release is served only on the admin socket, beside the agent's.
	admin := newClient(filepath.Join(filepath.Dir(socket), "admin.sock"))
	var forced struct{ Deleted int }
	if err := post(admin, lockURL("go-example", "force-release"), map[string]interface{}{}, &forced); err != nil || forced.Deleted != 3 {
		t.Fatalf("force release: %+v %v", forced, err)
	}
	select {
	case reason := <-result:
		if reason != "force_released" {
			t.Fatalf("lost: %s", reason)
		}
	case <-time.After(deadline):
		t.Fatal("no loss notice")
	}
}

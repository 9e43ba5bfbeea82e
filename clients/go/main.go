// Command redlock-example talks to redlock-agent over its Unix socket with
// only the standard library: net/http with a Unix-socket dialer.
//
//	go run . ./redlock.sock nightly-report
//
// It acquires, extends and releases a lock, then holds it (the agent renews
// it) and works until the lock is lost. Take it away as an operator would:
//
//	curl --unix-socket ./redlock-admin.sock -X POST localhost/v1/locks/nightly-report/force-release
//
// and it prints the loss notice at once (force_released) and exits 1.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// newClient returns an http.Client whose every request goes to the socket;
// the host in URLs is ignored ("http://agent/...").
func newClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
}

// lockURL percent-encodes the resource as one path segment, "/" included.
func lockURL(resource, action string) string {
	return "http://agent/v1/locks/" + url.PathEscape(resource) + "/" + action
}

// apiError is the agent's error answer: {"error": {"code", "message"}}.
type apiError struct {
	Status int
	Code   string `json:"code"`
	Msg    string `json:"message"`
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Msg) }

// post sends a JSON body and decodes a JSON answer into out, or returns
// the agent's error.
func post(c *http.Client, u string, in, out interface{}) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	resp, err := c.Post(u, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error apiError }
		if json.Unmarshal(data, &e) != nil {
			return fmt.Errorf("unexpected answer %d: %s", resp.StatusCode, data)
		}
		e.Error.Status = resp.StatusCode
		return &e.Error
	}
	return json.Unmarshal(data, out)
}

type grant struct {
	Resource   string `json:"resource"`
	Token      string `json:"token"`
	ValidityMs int64  `json:"validity_ms"`
	TTLMs      int64  `json:"ttl_ms"`
}

type event struct {
	Event      string `json:"event"`
	Token      string `json:"token"`
	ValidityMs int64  `json:"validity_ms"`
	Reason     string `json:"reason"`
}

// roundTrip acquires, extends and releases resource.
func roundTrip(c *http.Client, resource string, out io.Writer) error {
	var g grant
	if err := post(c, lockURL(resource, "acquire"), map[string]interface{}{"ttl_ms": 10000, "wait_ms": 2000, "owner": "go-example"}, &g); err != nil {
		return err
	}
	fmt.Fprintf(out, "acquired %s, valid for %d ms\n", g.Resource, g.ValidityMs)
	var ext struct {
		ValidityMs int64 `json:"validity_ms"`
	}
	if err := post(c, lockURL(resource, "extend"), map[string]interface{}{"token": g.Token, "ttl_ms": 10000}, &ext); err != nil {
		return err
	}
	fmt.Fprintf(out, "extended, valid for %d ms\n", ext.ValidityMs)
	var rel struct {
		Released bool `json:"released"`
	}
	if err := post(c, lockURL(resource, "release"), map[string]interface{}{"token": g.Token}, &rel); err != nil {
		return err
	}
	fmt.Fprintf(out, "released: %v\n", rel.Released)
	return nil
}

// holdUntilLost holds resource and works until the lock is lost; closing
// the response body (on return) releases it if it is still held.
func holdUntilLost(c *http.Client, resource string, out io.Writer) (lost string, err error) {
	body, _ := json.Marshal(map[string]interface{}{"ttl_ms": 2000, "wait_ms": 5000, "owner": "go-example"})
	resp, err := c.Post(lockURL(resource, "hold"), "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("hold refused: %d %s", resp.StatusCode, data)
	}
	events := make(chan event)
	go func() {
		defer close(events)
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			var e event
			if json.Unmarshal(lines.Bytes(), &e) != nil {
				return
			}
			events <- e
		}
	}()
	var validUntil time.Time
	for {
		// Stop at a twentieth of the validity before its end if no renewal came.
		var deadline <-chan time.Time
		if !validUntil.IsZero() {
			deadline = time.After(time.Until(validUntil))
		}
		select {
		case e, ok := <-events:
			if !ok {
				return "disconnected", nil
			}
			switch e.Event {
			case "acquired":
				fmt.Fprintf(out, "held %s, valid for %d ms, renewed by the agent\n", resource, e.ValidityMs)
			case "lost":
				return e.Reason, nil
			}
			validity := time.Duration(e.ValidityMs) * time.Millisecond
			if e.Event != "lost" && validity > 0 {
				validUntil = time.Now().Add(validity - validity/20)
			}
		case <-deadline:
			return "expired", nil
		}
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: redlock-example SOCKET [RESOURCE]")
		os.Exit(64)
	}
	resource := "nightly-report"
	if len(os.Args) > 2 {
		resource = os.Args[2]
	}
	c := newClient(os.Args[1])
	if err := roundTrip(c, resource, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "redlock-example:", err)
		os.Exit(69)
	}
	reason, err := holdUntilLost(c, resource, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlock-example:", err)
		os.Exit(69)
	}
	fmt.Printf("stopped: the lock on %s was lost: %s\n", resource, reason)
	os.Exit(1)
}

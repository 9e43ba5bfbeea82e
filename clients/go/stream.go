package redlock

// One NDJSON stream (a hold, a campaign, an observer): its connection, its
// lines, and a context that bounds only the start.

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"sync"
)

// stream is an open NDJSON answer. Closing it closes the connection, which
// ends the agent's side (releasing a hold, resigning a campaign).
type stream struct {
	resp   *http.Response
	cancel context.CancelFunc
	lines  *bufio.Scanner
	once   sync.Once
}

// openStream sends the request on a connection of its own. ctx bounds the
// request until start returns (the caller reads its first lines there);
// after that the stream lives until close, whatever ctx does.
func (c *Client) openStream(ctx context.Context, method, u string, in interface{}, start func(*stream) error) (*stream, error) {
	inner, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			cancel()
		case <-stopWatch:
		}
	}()
	s, err := c.startStream(inner, cancel, method, u, in, start)
	close(stopWatch)
	<-watched
	if err == nil && inner.Err() != nil {
		// ctx ended as the stream started: the caller gave up.
		s.close()
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return s, nil
}

func (c *Client) startStream(inner context.Context, cancel context.CancelFunc, method, u string, in interface{}, start func(*stream) error) (*stream, error) {
	resp, err := c.send(inner, method, u, in)
	if err != nil {
		cancel()
		return nil, err
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 4096), 1<<20)
	s := &stream{resp: resp, cancel: cancel, lines: lines}
	if err := start(s); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// next decodes the next line into out; false at the end of the stream or
// on a line that is not JSON.
func (s *stream) next(out interface{}) bool {
	if !s.lines.Scan() {
		return false
	}
	return json.Unmarshal(s.lines.Bytes(), out) == nil
}

func (s *stream) close() {
	s.once.Do(func() {
		s.cancel()
		s.resp.Body.Close()
	})
}

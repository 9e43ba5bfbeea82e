package redlock

// Leader elections: a campaign is a fenced hold on the election; its term
// is the fence.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Leader is an election's leader as the agent tells it.
type Leader struct {
	Election string `json:"election"`
	// Agent is agent.name of the agent the leader campaigns through.
	Agent string `json:"agent"`
	Owner string `json:"owner"`
	// Value is what the leader publishes (an address, say).
	Value string `json:"value"`
	Pid   int    `json:"pid"`
	UID   int    `json:"uid"`
	// Term is the leadership's fence, larger than every earlier term's; 0
	// when the leader's note could not be read.
	Term uint64 `json:"term"`
	// SinceMs is when it was elected, in ms since the Unix epoch (its
	// agent's clock); 0 when unknown.
	SinceMs int64 `json:"since_ms"`
	// ValidityMs is the time until the leadership ends unless renewed.
	ValidityMs int64 `json:"validity_ms"`
}

// CampaignOptions are a campaign's; the zero value is the agent's
// defaults.
type CampaignOptions struct {
	// TTL of the leadership: a leader that vanishes is replaced after at
	// most this long.
	TTL   time.Duration
	Owner string
	// Value is published to everyone who asks who leads (up to 1024 bytes).
	Value string
	// MaxHold ends the leadership (reason "max_hold") after this long.
	MaxHold time.Duration
	// OnWaiting, if set, is called (on the campaign's goroutine) each time
	// the campaign starts to wait and when the leader it waits behind
	// changes; leader is nil when none could be read.
	OnWaiting func(leader *Leader)
}

// Leadership is this campaigner leading an election, renewed by the agent
// while it is open. It behaves as a Hold: Lost() and Reason(), Context(),
// and Resign (or Close) to step down at once.
type Leadership struct {
	*Hold
	election string
	term     uint64
}

// Campaign campaigns for election name and returns once this campaigner
// is elected, or with ctx's error when ctx ends first (the campaign is
// then withdrawn). Use the leadership's Term as a fence on every write the
// leader makes.
func (c *Client) Campaign(ctx context.Context, name string, o CampaignOptions) (*Leadership, error) {
	body := struct {
		TTLMs     int64  `json:"ttl_ms,omitempty"`
		Owner     string `json:"owner,omitempty"`
		Value     string `json:"value,omitempty"`
		MaxHoldMs int64  `json:"max_hold_ms,omitempty"`
	}{ms(o.TTL), o.Owner, o.Value, ms(o.MaxHold)}
	var elected event
	s, err := c.openStream(ctx, http.MethodPost, path("elections", name, "campaign"), body, func(s *stream) error {
		for {
			var e event
			if !s.next(&e) {
				return fmt.Errorf("redlock: the campaign for %s ended before an election", name)
			}
			switch e.Event {
			case "waiting":
				if o.OnWaiting != nil {
					o.OnWaiting(e.Leader)
				}
			case "elected":
				elected = e
				return nil
			case "lost":
				return &Error{Code: CodeLost, Message: "campaign ended: " + e.Reason}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	h := &Hold{
		s: s, resource: name, token: "", ttl: millis(elected.TTLMs), fence: elected.Term, permit: -1,
		lost: make(chan struct{}),
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.renewed(time.Now(), millis(elected.ValidityMs))
	go h.read()
	return &Leadership{Hold: h, election: name, term: elected.Term}, nil
}

// Election is the election's name.
func (l *Leadership) Election() string { return l.election }

// Term is this leadership's fence: larger than every earlier term's.
func (l *Leadership) Term() uint64 { return l.term }

// Resign steps down at once (the next campaigner is elected).
func (l *Leadership) Resign() error { return l.Close() }

// Leader is who leads election name now; ErrNoLeader when nobody does.
func (c *Client) Leader(ctx context.Context, name string) (*Leader, error) {
	var l Leader
	if err := c.call(ctx, http.MethodGet, path("elections", name, ""), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Observer follows an election's leader.
type Observer struct {
	s       *stream
	changes chan *Leader
	done    chan struct{}
	once    sync.Once
}

// Observe follows election name until ctx ends or Close: Changes() gets
// the leader now, then every change.
func (c *Client) Observe(ctx context.Context, name string) (*Observer, error) {
	s, err := c.openStream(ctx, http.MethodGet, path("elections", name, "observe"), nil, func(*stream) error { return nil })
	if err != nil {
		return nil, err
	}
	o := &Observer{s: s, changes: make(chan *Leader, 1), done: make(chan struct{})}
	go func() {
		select {
		case <-ctx.Done():
			o.Close()
		case <-o.done:
		}
	}()
	go o.read()
	return o, nil
}

func (o *Observer) read() {
	defer close(o.changes)
	for {
		var e struct {
			Event string `json:"event"`
			Leader
		}
		if !o.s.next(&e) {
			return
		}
		var l *Leader
		if e.Event == "leader" {
			leader := e.Leader
			l = &leader
		}
		select {
		case o.changes <- l:
		case <-o.done:
			return
		}
	}
}

// Changes gets the leader (nil: none) when observing starts and at every
// change; it is closed when the observation ends.
func (o *Observer) Changes() <-chan *Leader { return o.changes }

// Close stops observing.
func (o *Observer) Close() error {
	o.once.Do(func() {
		close(o.done)
		o.s.close()
	})
	return nil
}

package kit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/nilness"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// Client is the machinery behind a primitives.Client: it owns the
// background work of the primitives made from it, over one backend, until
// Close. Every goroutine latchkit starts belongs to one: the renewals of
// its leases, its one pub/sub Hub, the give-backs that finish an abandoned
// acquisition (Spawn), the observers of its elections.
type Client struct {
	b  backend.Backend
	id *identity // who it is, and its records (identity.go)

	// calls counts the calls in flight, with closedBit set once Close
	// began; drained is closed by the call that leaves it at closedBit.
	calls     atomic.Int64
	drained   chan struct{}
	drainOnce sync.Once
	// ctx ends, with ErrClosed as its cause, when Close begins: every
	// waiting call is bound to it (see bind).
	ctx    context.Context
	cancel context.CancelCauseFunc

	// closed is closed once the goroutines Close stops have ended;
	// decided once the first Close has set closeEr, what it returned.
	closed  chan struct{}
	decided chan struct{}
	closeEr error

	mu      sync.Mutex
	closing bool
	leases  map[*Lease]struct{} // held, released by Close
	renew   *renewer            // for leases renewed by a script on b
	extend  *renewer            // for leases renewed by their holder's extend
	poll    bool                // ClientOptions.Poll: no hub, ever
	hub     *pubsub.Hub         // made on first use
	hubShut bool                // Close has shut hub: no more is made
	bgN     int                 // background goroutines running (spawn)
	bgIdle  chan struct{}       // closed when bgN drops to 0 after closing; nil otherwise
	bgCtx   context.Context
	bgStop  context.CancelFunc
}

// NewClient returns a Client over b, a backend made by an adapter's New,
// with the settings o. It starts nothing: goroutines begin with the first
// lease or waiter that needs them. A nil backend, and a bad name, are
// refused with an error matching latchkit.ErrInvalid.
func NewClient(b backend.Backend, o ClientOptions) (*Client, error) {
	if nilness.Is(b) {
		return nil, &latchkit.OpError{Op: "new", Kind: "client", Err: fmt.Errorf("%w: nil backend (%T): give an adapter's New of a client", latchkit.ErrInvalid, b)}
	}
	if v, ok := b.(backend.Validator); ok {
		if err := v.Validate(); err != nil {
			return nil, &latchkit.OpError{Op: "new", Kind: "client", Err: fmt.Errorf("%w: %s", latchkit.ErrInvalid, err)}
		}
	}
	id, err := newIdentity(o)
	if err != nil {
		return nil, &latchkit.OpError{Op: "new", Kind: "client", Err: err}
	}
	c := &Client{b: b, id: id, poll: o.Poll, drained: make(chan struct{}), closed: make(chan struct{}), decided: make(chan struct{}),
		leases: map[*Lease]struct{}{}}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.bgCtx, c.bgStop = context.WithCancel(context.Background())
	c.renew = newRenewer(b, c.bgCtx)
	c.extend = newRenewer(nil, c.bgCtx)
	return c, nil
}

// Close withdraws waiting calls, ends the leases still held (their
// Contexts end at once, with ErrClientClosed as the cause) and releases
// them, and returns once the Client's goroutines have ended; afterwards
// every call on its primitives returns an error matching
// latchkit.ErrClosed. If ctx ends first, Close returns ctx's error at
// once: what it had not released yet expires with its TTL, and its
// goroutines end within BackgroundTry after (a call a driver does not
// abandon when its context is cancelled, go-redis's, ends at its own
// deadline: a renewal in flight at its lease's deadline). A later Close
// waits for the first to finish and returns what it did.
func (c *Client) Close(ctx context.Context) error {
	if c == nil {
		return &latchkit.OpError{Op: "close", Kind: "client", Err: fmt.Errorf("%w: nil client: make one with NewClient", latchkit.ErrInvalid)}
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		for _, ch := range []chan struct{}{c.closed, c.decided} {
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return c.closeEr
	}
	c.closing = true
	c.mu.Unlock()

	// 1. Waiting calls end (they give back what they queued) and new
	// ones are refused; the leases held end now, whatever races them.
	if c.calls.Add(closedBit) == closedBit {
		c.drainOnce.Do(func() { close(c.drained) })
	}
	c.cancel(ErrClientClosed)
	ended := c.endLeases(nil)

	// 2. Wait for the calls in flight, so that a release hands what it
	// frees to another process's waiter rather than to one of ours that
	// is leaving; then release in the background, where a release that
	// cannot reach Redis is retried for as long as the lease could last.
	var err error
	select {
	case <-c.drained:
	case <-ctx.Done():
		err = fmt.Errorf("latchkit: close: calls still in flight: %w", ctx.Err())
	}
	ended = c.endLeases(ended) // granted to calls in flight meanwhile
	for _, l := range ended {
		window := l.window()
		c.Spawn(func(bg context.Context) { RetryGiveBack(bg, l.token, l.releaseToken, window) })
	}

	// 3. Background work (releases, give-backs) finishes within ctx, or
	// is cut short; then renewals and the subscription stop.
	c.mu.Lock()
	c.bgIdle = make(chan struct{})
	if c.bgN == 0 {
		close(c.bgIdle)
	}
	idle := c.bgIdle
	c.mu.Unlock()
	if err == nil {
		select {
		case <-idle:
		case <-ctx.Done():
			err = fmt.Errorf("latchkit: close: releases and give-backs still running: %w", ctx.Err())
		}
	}
	c.bgStop()
	go func() {
		defer close(c.closed)
		<-idle // cut short, each ends within BackgroundTry
		c.renew.close()
		c.extend.close()
		c.mu.Lock()
		h := c.hub
		c.hub, c.hubShut = nil, true
		c.mu.Unlock()
		if h != nil {
			h.Shutdown() // a driver may block closing a connection to a hung server
		}
	}()
	if err == nil {
		select {
		case <-c.closed:
		case <-ctx.Done():
			err = fmt.Errorf("latchkit: close: renewals and subscriptions still stopping: %w", ctx.Err())
		}
	}
	c.closeEr = err
	close(c.decided)
	return err
}

// BackgroundTry bounds each call the Client's background work makes
// (releases by Close, give-backs, background releases), so that once
// Close has cut that work short it ends within about that long, whatever
// the server does.
const BackgroundTry = time.Second

// endLeases ends, for Close, the leases the Client tracks that are not in
// ended yet, and returns ended with them.
func (c *Client) endLeases(ended []*Lease) []*Lease {
	c.mu.Lock()
	held := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		held = append(held, l)
	}
	c.mu.Unlock()
	for _, l := range held {
		if l.closeEnd() {
			ended = append(ended, l)
		}
	}
	return ended
}

// closedBit marks Client.calls once Close has begun.
const closedBit = int64(1) << 62

// ErrClientClosed is what a call on a closed Client returns, and the cause
// of the contexts Close ends.
var ErrClientClosed = fmt.Errorf("latchkit: client closed: %w", latchkit.ErrClosed)

// BackendOf is c's backend, nil for a nil Client (which NewConfig
// refuses).
func BackendOf(c *Client) backend.Backend {
	if c == nil {
		return nil
	}
	return c.b
}

// begin enters a call: it returns an error matching latchkit.ErrClosed
// once Close has begun, and otherwise counts the call in flight until end.
func (c *Client) begin() error {
	if c.calls.Add(1)&closedBit != 0 {
		c.end()
		return ErrClientClosed
	}
	return nil
}

// end leaves a call begun by begin.
func (c *Client) end() {
	if c.calls.Add(-1) == closedBit {
		c.drainOnce.Do(func() { close(c.drained) })
	}
}

// bind returns ctx, ended also (with ErrClientClosed as its cause) when
// Close begins, and the function that releases what bind took.
func (c *Client) bind(ctx context.Context) (context.Context, func()) {
	bctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.ctx, func() { cancel(ErrClientClosed) })
	return bctx, func() { stop(); cancel(context.Canceled) }
}

// track adds a lease to those Close releases.
func (c *Client) track(l *Lease) {
	c.mu.Lock()
	c.leases[l] = struct{}{}
	c.mu.Unlock()
}

// untrack drops an ended lease.
func (c *Client) untrack(l *Lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

// Spawn runs f on a goroutine of the Client's background work: Close waits
// for it, and ends ctx when its own context ends first.
func (c *Client) Spawn(f func(ctx context.Context)) {
	c.mu.Lock()
	c.bgN++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.bgN--
			if c.bgN == 0 && c.bgIdle != nil {
				select {
				case <-c.bgIdle:
				default:
					close(c.bgIdle)
				}
			}
			c.mu.Unlock()
		}()
		f(c.bgCtx)
	}()
}

// renewerFor returns the Client's renewer for leases renewed by a script on
// b (b is the Client's backend), or, for nil b, by their holder's extend.
func (c *Client) renewerFor(b backend.Backend) *renewer {
	if b == nil {
		return c.extend
	}
	return c.renew
}

// Hub returns the Client's pub/sub Hub, made on first use; nil once
// Close has shut it, and always for a Client that polls (Polls): its
// waiters then sleep for the holder's remaining time or the retry
// policy's delay (pubsub.NewWake with a nil Hub).
func (c *Client) Hub() *pubsub.Hub {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hub == nil && !c.hubShut && !c.poll {
		c.hub = pubsub.NewHub(c.b, pubsub.WithLinger(pubsub.DefaultLinger), pubsub.WithCallTimeout(BackgroundTry))
	}
	return c.hub
}

// Polls reports whether c never subscribes (ClientOptions.Poll).
func (c *Client) Polls() bool { return c.poll }

// CheckClient is why a constructor refuses c: nil, or closed.
func CheckClient(c *Client) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: nil client: make one with NewClient", latchkit.ErrInvalid)
	case c.calls.Load()&closedBit != 0:
		return ErrClientClosed
	}
	return nil
}

// Begin enters a call on every Client of the primitive (see Client.begin).
func (c *Config) Begin() error {
	for i, cl := range c.Cls {
		if err := cl.begin(); err != nil {
			for _, d := range c.Cls[:i] {
				d.end()
			}
			return err
		}
	}
	return nil
}

// End leaves a call begun by Begin.
func (c *Config) End() {
	for _, cl := range c.Cls {
		cl.end()
	}
}

// Bind is Client.bind for every Client of the primitive.
func (c *Config) Bind(ctx context.Context) (context.Context, func()) {
	if len(c.Cls) == 1 {
		return c.Cl.bind(ctx)
	}
	bctx, cancel := context.WithCancelCause(ctx)
	stops := make([]func() bool, len(c.Cls))
	for i, cl := range c.Cls {
		stops[i] = context.AfterFunc(cl.ctx, func() { cancel(ErrClientClosed) })
	}
	return bctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}

// RenewerWakes is how many times the renewer of c's backend has woken up
// (for tests).
func (c *Client) RenewerWakes() int {
	r := c.renew
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wakes
}

// ClientOf returns the machinery behind a *kit.Client (package
// github.com/latchkit/latchkit/kit), nil for a nil or zero one or any
// other value. Package kit sets it in its init, its only write: kit
// imports this package, so this one cannot name kit.Client, and the
// built-ins of package primitives, on a kit.Client, reach what is behind
// it here without a public accessor.
var ClientOf func(c any) *Client

package kit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

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
	b backend.Backend

	// calls counts the calls in flight, with closedBit set once Close
	// began; drained is closed by the call that leaves it at closedBit.
	calls     atomic.Int64
	drained   chan struct{}
	drainOnce sync.Once
	// ctx ends, with ErrClosed as its cause, when Close begins: every
	// waiting call is bound to it (see bind).
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	closing bool
	closed  chan struct{} // closed once Close has finished
	closeEr error
	leases  map[*Lease]struct{} // held, released by Close
	renew   *renewer            // for leases renewed by a script on b
	extend  *renewer            // for leases renewed by their holder's extend
	hub     *pubsub.Hub         // made on first use
	hubShut bool                // Close has shut hub: no more is made
	bgN     int                 // background goroutines running (spawn)
	bgIdle  chan struct{}       // closed when bgN drops to 0 after closing; nil otherwise
	bgCtx   context.Context
	bgStop  context.CancelFunc
}

// NewClient returns a Client over b, a backend made by an adapter's New. It
// starts nothing: goroutines begin with the first lease or waiter that
// needs them. A nil backend is refused with an error matching
// latchkit.ErrInvalid.
func NewClient(b backend.Backend) (*Client, error) {
	if nilness.Is(b) {
		return nil, &latchkit.OpError{Op: "new", Kind: "client", Err: fmt.Errorf("%w: nil backend (%T): give an adapter's New of a client", latchkit.ErrInvalid, b)}
	}
	if v, ok := b.(backend.Validator); ok {
		if err := v.Validate(); err != nil {
			return nil, &latchkit.OpError{Op: "new", Kind: "client", Err: fmt.Errorf("%w: %s", latchkit.ErrInvalid, err)}
		}
	}
	c := &Client{b: b, drained: make(chan struct{}), closed: make(chan struct{}),
		leases: map[*Lease]struct{}{}}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.bgCtx, c.bgStop = context.WithCancel(context.Background())
	c.renew = newRenewer(b, c.bgCtx)
	c.extend = newRenewer(nil, c.bgCtx)
	return c, nil
}

// Close withdraws waiting calls, releases the leases still held and
// returns once the Client's goroutines have ended; afterwards every call on
// its primitives returns an error matching latchkit.ErrClosed. If ctx ends
// first, Close returns ctx's error, and a lease not yet released expires
// with its TTL. A later Close waits for the first and returns what it did.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		select {
		case <-c.closed:
			return c.closeEr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.closing = true
	c.mu.Unlock()

	// 1. Waiting calls end (they give back what they queued) and new
	// ones are refused; wait for those in flight.
	if c.calls.Add(closedBit) == closedBit {
		c.drainOnce.Do(func() { close(c.drained) })
	}
	c.cancel(ErrClientClosed)
	var err error
	select {
	case <-c.drained:
	case <-ctx.Done():
		err = fmt.Errorf("latchkit: close: calls still in flight: %w", ctx.Err())
	}

	// 2. Release what is held, in parallel.
	c.mu.Lock()
	held := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		held = append(held, l)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range held {
		wg.Go(func() { _ = l.release(ctx, l.h.Release, ErrClientClosed) })
	}
	wg.Wait()

	// 3. Background work: give-backs finish within ctx, or are cut
	// short; then renewals and subscriptions stop.
	c.mu.Lock()
	c.bgIdle = make(chan struct{})
	if c.bgN == 0 {
		close(c.bgIdle)
	}
	idle := c.bgIdle
	c.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("latchkit: close: give-backs still running: %w", ctx.Err())
		}
	}
	c.bgStop()
	<-idle // cut short, they end at once
	c.renew.close()
	c.extend.close()
	c.mu.Lock()
	h := c.hub
	c.hub, c.hubShut = nil, true
	c.mu.Unlock()
	if h != nil {
		h.Shutdown()
	}

	c.mu.Lock()
	c.closeEr = err
	c.mu.Unlock()
	close(c.closed)
	return err
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
// Close has shut it.
func (c *Client) Hub() *pubsub.Hub {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hub == nil && !c.hubShut {
		c.hub = pubsub.NewHub(c.b, pubsub.WithLinger(pubsub.DefaultLinger))
	}
	return c.hub
}

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

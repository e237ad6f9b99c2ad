package kit

import (
	"context"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	engine "github.com/latchkit/latchkit/internal/kit"
)

// Client owns the background work of the primitives made from it, over one
// backend, until Close: the built-ins of package primitives (whose Client
// is this type) and the primitives written on this package.
//
// Every goroutine latchkit starts belongs to a Client: the renewals of its
// leases, its one pub/sub subscription (shared by every waiter of its
// primitives), the give-backs that finish an abandoned acquisition, the
// observers of its elections. A process makes one Client per Redis
// deployment, shares it, and closes it on shutdown.
type Client struct {
	k *engine.Client
}

// NewClient returns a Client over b, a backend made by an adapter's New. It
// starts nothing: goroutines begin with the first lease or waiter that
// needs them. A nil backend, or a bad option, is refused with an error
// matching latchkit.ErrInvalid.
func NewClient(b backend.Backend, opts ...ClientOption) (*Client, error) {
	var o engine.ClientOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	k, err := engine.NewClient(b, o)
	if err != nil {
		return nil, err
	}
	return &Client{k: k}, nil
}

// ClientOption configures a Client (NewClient).
type ClientOption func(*engine.ClientOptions)

// WithClientName names the Client: latchctl inspect, list and top show
// the name beside the host, pid and start of the Client that holds or
// waits for a primitive, and middleware.Tracing's latchkit.lease.oldest_age
// carries it. By default it is host:pid. A name longer than 256 bytes, or
// not valid UTF-8, is refused by NewClient with an error matching
// latchkit.ErrInvalid.
//
// Every token a Client mints begins with its id, and the Client keeps a
// record of who it is under each prefix its primitives use
// (prefix + "client:" + id, written once it has been in use for a second,
// rewritten every 10 minutes while it is, expiring 30 minutes after the
// last write, deleted by Close): nothing is sent per acquisition
// (docs/operations.md, "Who holds it").
func WithClientName(name string) ClientOption {
	return func(o *engine.ClientOptions) { o.Name = name }
}

// WithWakeUps turns off (or on, the default) the release messages the
// Client's waiters sleep on. Off, the Client never subscribes: a waiting
// Lock, Acquire, Campaign or latch Wait attempts again when the holder's
// remaining time has run out, or after the retry policy's delay
// (WithRetry), whichever comes first, and an Election's Observe reads
// the seat at that pace. It is for deployments that refuse SUBSCRIBE (a
// proxy such as twemproxy or Envoy's Redis proxy); on, a Client whose
// subscription fails falls back to the same timers while it tries to
// subscribe again in the background, as long as a waiter waits: a new
// connection each time, 10 ms apart at first, growing to one a second.
func WithWakeUps(on bool) ClientOption {
	return func(o *engine.ClientOptions) { o.Poll = !on }
}

// ClientIdentity is who a Client is, as latchctl shows the holder of a
// lease: its id (the first 12 hex digits of every token it mints), name,
// host, pid, and the time it was made (its own clock).
type ClientIdentity struct {
	ID      string
	Name    string
	Host    string
	PID     int
	Started time.Time
}

// Identity is who c is (zero for a nil Client).
func (c *Client) Identity() ClientIdentity {
	if core(c) == nil {
		return ClientIdentity{}
	}
	id := c.k.Identity()
	return ClientIdentity{ID: id.ID, Name: id.Name, Host: id.Host, PID: id.PID, Started: id.Started}
}

// Close withdraws waiting calls, ends and releases the leases still held
// and returns once the Client's goroutines have ended; afterwards every
// call on its primitives returns an error matching latchkit.ErrClosed. If
// ctx ends first, Close returns ctx's error at once: a lease not yet
// released expires with its TTL, and the goroutines end within about a
// second. A later Close waits for the first and returns what it did. A
// nil Client (or a zero one, not made by NewClient) and a nil ctx are
// refused with an error matching latchkit.ErrInvalid, closing nothing.
func (c *Client) Close(ctx context.Context) error {
	if core(c) == nil {
		return &latchkit.OpError{Op: "close", Kind: "client", Err: engine.CheckClient(nil)}
	}
	if err := engine.CheckCtx(ctx); err != nil {
		return &latchkit.OpError{Op: "close", Kind: "client", Err: err}
	}
	return c.k.Close(ctx)
}

// core is the machinery behind c (nil for a nil or zero c, which every
// constructor refuses).
func core(c *Client) *engine.Client {
	if c == nil {
		return nil
	}
	return c.k
}

func init() {
	engine.ClientOf = func(c any) *engine.Client {
		kc, _ := c.(*Client)
		return core(kc)
	}
}

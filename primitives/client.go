package primitives

import (
	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	engine "github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/kit"
)

// Client owns the background work of the primitives made from it, over one
// backend, until Close (kit.Client: a primitive written on package kit
// takes the same Client).
type Client = kit.Client

// NewClient returns a Client over b, a backend made by an adapter's New
// (kit.NewClient). It starts nothing: goroutines begin with the first
// lease or waiter that needs them. A nil backend, or a bad option, is
// refused with an error matching latchkit.ErrInvalid.
func NewClient(b backend.Backend, opts ...ClientOption) (*Client, error) {
	return kit.NewClient(b, opts...)
}

// ClientOption configures a Client (NewClient).
type ClientOption = kit.ClientOption

// WithClientName names the Client: latchctl inspect, list and top show
// the name beside the host, pid and start of the Client that holds or
// waits for a primitive (kit.WithClientName, which says more). By default
// it is host:pid.
func WithClientName(name string) ClientOption { return kit.WithClientName(name) }

// WithWakeUps turns off (or on, the default) the release messages the
// Client's waiters sleep on (kit.WithWakeUps, which says more): off, the
// Client never subscribes and its waiters poll, for deployments that
// refuse SUBSCRIBE.
func WithWakeUps(on bool) ClientOption { return kit.WithWakeUps(on) }

// ClientIdentity is who a Client is, as latchctl shows the holder of a
// lease (kit.ClientIdentity).
type ClientIdentity = kit.ClientIdentity

// core is the machinery behind c (nil for a nil or zero c, which every
// constructor refuses).
func core(c *Client) *engine.Client { return engine.ClientOf(c) }

// The errors a caller matches with errors.Is, so that a program needs no
// other latchkit package than this one and an adapter: the same values as
// package latchkit's.
var (
	// ErrNotAcquired: a Try call found the primitive held, or the retry
	// policy gave up (latchkit.ErrNotAcquired).
	ErrNotAcquired = latchkit.ErrNotAcquired
	// ErrLeaseLost: the lease expired or was taken (latchkit.ErrLeaseLost).
	ErrLeaseLost = latchkit.ErrLeaseLost
	// ErrInvalid: a bad argument; nothing was changed in Redis
	// (latchkit.ErrInvalid).
	ErrInvalid = latchkit.ErrInvalid
	// ErrUnavailable: Redis could not be reached; the call may or may not
	// have been applied (latchkit.ErrUnavailable).
	ErrUnavailable = latchkit.ErrUnavailable
	// ErrClosed: the Client was closed (latchkit.ErrClosed).
	ErrClosed = latchkit.ErrClosed
)

// Lease is a granted hold on a primitive (latchkit.Lease).
type Lease = latchkit.Lease

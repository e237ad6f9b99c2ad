package primitives

import (
	"context"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/kit"
)

// Client owns the background work of the primitives made from it, over one
// backend, until Close.
//
// Every goroutine latchkit starts belongs to a Client: the renewals of its
// leases, its one pub/sub subscription (shared by every waiter of its
// primitives), the give-backs that finish an abandoned acquisition, the
// observers of its elections. A process makes one Client per Redis
// deployment, shares it, and closes it on shutdown.
type Client struct {
	k *kit.Client
}

// NewClient returns a Client over b, a backend made by an adapter's New. It
// starts nothing: goroutines begin with the first lease or waiter that
// needs them. A nil backend is refused with an error matching
// latchkit.ErrInvalid.
func NewClient(b backend.Backend) (*Client, error) {
	k, err := kit.NewClient(b)
	if err != nil {
		return nil, err
	}
	return &Client{k: k}, nil
}

// Close withdraws waiting calls, releases the leases still held and
// returns once the Client's goroutines have ended; afterwards every call on
// its primitives returns an error matching latchkit.ErrClosed. If ctx ends
// first, Close returns ctx's error, and a lease not yet released expires
// with its TTL. A later Close waits for the first and returns what it did.
func (c *Client) Close(ctx context.Context) error { return c.k.Close(ctx) }

// core is the machinery behind c (nil for a nil c, which constructors
// refuse).
func (c *Client) core() *kit.Client {
	if c == nil {
		return nil
	}
	return c.k
}

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

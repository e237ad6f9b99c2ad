package contracttest

import (
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// Harness connects the suite to the backend under test.
type Harness interface {
	// NewClient returns a new client of the server under test (its own
	// connections), closed when t ends.
	NewClient(t testing.TB) Client
	// Unreachable returns a backend whose server cannot be reached (for
	// example a closed port on 127.0.0.1).
	Unreachable(t testing.TB) backend.Backend
	// AdvanceClock moves the server's clock forward by d: TIME jumps and
	// keys expire as if d had passed. It reports false when the server
	// follows real time only; the suite then sleeps instead.
	AdvanceClock(t testing.TB, d time.Duration) bool
	// KillSubscribers closes, on the server side, every connection in
	// pub/sub mode. It reports false when the server cannot do that.
	KillSubscribers(t testing.TB) bool
	// FlushScripts empties the script cache of every server the backend
	// talks to (SCRIPT FLUSH), so that EVALSHA answers NOSCRIPT. It
	// reports false when it cannot.
	FlushScripts(t testing.TB) bool
}

// Client is one client of the server under test.
type Client struct {
	// Backend is the client as a latchkit backend.
	Backend backend.Backend
	// Close closes the underlying driver client; calls on Backend made
	// after it must fail with backend.ErrClosed (a driver that closes
	// asynchronously may let a call made at once get through).
	Close func() error
	// Commands returns how many commands the client has sent so far,
	// counted by a driver hook (each EVALSHA and EVAL once; pub/sub
	// commands included where the driver's hook sees them). Nil when the
	// driver cannot count.
	Commands func() int64
}

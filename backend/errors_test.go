package backend_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// lateCtx is a context whose deadline has passed while its Err is still
// nil: the moment between a driver's socket deadline firing (the driver
// set it from the context's deadline) and the context's own timer.
type lateCtx struct {
	context.Context
	deadline time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c lateCtx) Err() error                  { return nil }

func noReply(error) (string, bool) { return "", false }

// netTimeout is what a dial or read whose socket deadline fired returns:
// "dial tcp 127.0.0.1:6379: i/o timeout", not matching
// context.DeadlineExceeded.
func netTimeout(op string) error {
	return &net.OpError{Op: op, Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6379}, Err: os.ErrDeadlineExceeded}
}

// TestWrapDeadlinePassed: a driver's I/O timeout that arrives once the
// call's deadline has passed but before its context reports it is the
// caller's deadline (context.DeadlineExceeded, still matching the driver's
// error), not an unreachable Redis. Before the deadline, it is
// ErrUnavailable and not DeadlineExceeded.
func TestWrapDeadlinePassed(t *testing.T) {
	for _, op := range []string{"dial", "read"} {
		cause := netTimeout(op)
		if errors.Is(cause, context.DeadlineExceeded) {
			t.Fatalf("the test's driver error %v already matches DeadlineExceeded", cause)
		}
		late := lateCtx{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
		err := backend.Wrap(late, cause, nil, noReply)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s timeout after the deadline: %v, want it to match context.DeadlineExceeded", op, err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("%s timeout after the deadline: %v, want it to match the driver's error", op, err)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("%s timeout after the deadline: %v, want the net.Error reachable", op, err)
		}

		early := lateCtx{Context: context.Background(), deadline: time.Now().Add(time.Hour)}
		err = backend.Wrap(early, cause, nil, noReply)
		if !errors.Is(err, backend.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s timeout before the deadline: %v, want ErrUnavailable only", op, err)
		}
	}
	// Without a deadline, an I/O timeout is the server's fault.
	err := backend.Wrap(context.Background(), netTimeout("read"), nil, noReply)
	if !errors.Is(err, backend.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timeout without a deadline: %v, want ErrUnavailable only", err)
	}
}

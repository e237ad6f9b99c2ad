package kit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/retry"
)

// TestWaitDeadlineAfterUnreachableSaysUnavailable: when the caller's
// deadline cuts an attempt short and the driver then says no more than the
// context's error (go-redis does: its own retry sleeps end with the
// context's error), the error of a waiting acquisition still says what the
// attempts before it met: Redis could not be reached (ErrUnavailable, and
// the connection's error), and, if an earlier one found the primitive
// held, that too. An unreachable Redis that later answered is not
// reported: it was reached since.
func TestWaitDeadlineAfterUnreachableSaysUnavailable(t *testing.T) {
	refusedConn := &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}
	cases := []struct {
		name        string
		before      []error // the attempts before the one cut short
		unavailable bool    // the error must match ErrUnavailable and name the connection error
		heldToo     bool    // the error must match ErrNotAcquired
		// cutSays: the cut attempt's error names the connection error
		// itself (go-redis's dial watch): it is not said twice.
		cutSays bool
	}{
		{"unreachable", []error{refusedConn, refusedConn}, true, false, false},
		{"held then unreachable", []error{held(time.Hour), refusedConn}, true, true, false},
		{"unreachable then held", []error{refusedConn, held(time.Hour)}, false, true, false},
		{"unreachable, and the cut attempt says so", []error{refusedConn}, true, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			n := 0
			a := Acquisition{Op: "lock", Kind: latchkit.KindMutex, Name: "m",
				Attempt: func(ctx context.Context, at *Attempt) (latchkit.Lease, error) {
					if n++; n <= len(c.before) {
						return nil, c.before[n-1]
					}
					<-ctx.Done() // cut short by the caller's deadline
					if c.cutSays {
						return nil, fmt.Errorf("%w (last dial: %w)", ctx.Err(), refusedConn)
					}
					return nil, ctx.Err()
				}}
			_, _, err := run(ctx, loopConfig(retry.Constant(time.Millisecond)), a)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v: does not match context.DeadlineExceeded", err)
			}
			unavailable := errors.Is(err, backend.ErrUnavailable) && strings.Contains(err.Error(), "connection refused")
			if unavailable != c.unavailable {
				t.Errorf("%v: matches ErrUnavailable naming the connection error: %v, want %v", err, unavailable, c.unavailable)
			}
			if n := strings.Count(err.Error(), "connection refused"); n > 1 {
				t.Errorf("%v: names the connection error %d times", err, n)
			}
			if errors.Is(err, latchkit.ErrNotAcquired) != c.heldToo {
				t.Errorf("%v: matches ErrNotAcquired: %v, want %v", err, !c.heldToo, c.heldToo)
			}
		})
	}
}

package faults_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// TestLostReply resets the connection right after the server ran a release
// or an acquire, so that the client never sees the reply:
//   - a release whose reply was lost, retried, reports success (the release
//     left a short-lived marker), never a false ErrLeaseLost, and the
//     primitive is free;
//   - an acquire whose reply was lost either succeeds (the driver retried
//     and the script recognized its own token) or fails, and then the grant
//     nobody knows of is gone within the TTL: another client gets it.
func TestLostReply(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	const lttl = 700 * time.Millisecond
	for _, d := range lane.Subset(drivers, 1, 1) {
		for _, p := range prims {
			t.Run(d.name+"/"+p.name, func(t *testing.T) {
				srv := redistest.Start(t)
				px := faultproxy.Start(t, srv.Addr)
				opts := []primitives.Option{primitives.WithTTL(lttl), primitives.WithAutoExtend(false), primitives.WithPrefix("l:")}
				lossy, lossyTry, _, err := p.open(clienttest.For(t, d.new(t, px.Addr)), 0, opts...)
				if err != nil {
					t.Fatal(err)
				}
				// A direct client, exclusive like the lossy one, checks the
				// primitive is free.
				direct, _, _, _ := p.open(clienttest.For(t, d.new(t, srv.Addr)), 0, opts...)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				violations, ops := 0, 0
				fail := func(format string, a ...any) { violations++; t.Errorf(format, a...) }
				// Free means every permit can be taken: both of a
				// Semaphore(2), the only one of a lock.
				permits := p.limit
				if permits > 2 {
					permits = 1 // an RWLock: worker 0 is a writer
				}
				tryFree := func(what string, within time.Duration) {
					c, cancel := context.WithTimeout(ctx, within)
					defer cancel()
					for i := 0; i < permits; i++ {
						ops++
						l, err := direct(c)
						if err != nil {
							fail("%s: permit %d of %d not free within %v: %v", what, i+1, permits, within, err)
							return
						}
						defer l.Release(ctx)
					}
				}

				l, err := lossy(ctx)
				if err != nil {
					t.Fatal(err)
				}
				px.DropNextReplies(1)
				err = l.Release(ctx)
				ops++
				t.Logf("release whose reply was lost: %v", err)
				if errors.Is(err, latchkit.ErrLeaseLost) {
					fail("release whose reply was lost: %v, a false ErrLeaseLost", err)
				} else if err != nil {
					ops++
					if err := l.Release(ctx); err != nil {
						fail("retried release whose first reply was lost: %v, want success", err)
					}
				}
				tryFree("after the lost release reply", 200*time.Millisecond)

				// A single attempt (TryLock): a waiting Lock would retry
				// and find its own grant.
				px.DropNextReplies(1)
				l, err = lossyTry(ctx)
				ops++
				if err == nil {
					l.Release(ctx)
				} else {
					// Granted or not, nobody knows: it must be gone
					// within the TTL.
					tryFree("after the lost acquire reply", lttl+500*time.Millisecond)
				}
				t.Logf("lost acquire reply: %v", err)
				table.mu.Lock()
				table.rows = append(table.rows, row{"lost reply", d.name, p.name, ops, "the reply of a release, then of an acquire, dropped and the connection reset after the server ran it", violations})
				table.mu.Unlock()
			})
		}
	}
}

package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// TestRedlockFenceSequence is issue 15's sequence of single faults, each
// over before the next, that sent a Redlock's fence backwards: three
// instances A, B, C (quorum 2); C stopped, five grants (fences 1-5), C
// continued; a grant gets fence 6, leaving the counters at A=6, B=6, C=1
// (a grant raised lower counters only while fewer than a quorum already
// had its fence); B loses its data (killed and restarted empty, or
// FLUSHALL); A stopped: the next grant, from B and C, got fence 2. After
// every grant every instance that granted must hold its fence, so that C
// carries 6 and the last grant gets more than 6.
func TestRedlockFenceSequence(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	for _, loss := range []string{"restart-empty", "FLUSHALL"} {
		t.Run(loss, func(t *testing.T) {
			srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
			a, b, c := srvs[0], srvs[1], srvs[2]
			var bs []backend.Backend
			for _, s := range srvs {
				cl := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true,
					DialTimeout: 100 * time.Millisecond, DialerRetries: 1, MaxRetries: -1})
				t.Cleanup(func() { cl.Close() })
				bs = append(bs, goredis.New(cl))
			}
			rl, err := primitives.NewRedlock(clienttest.All(t, bs), "seq", primitives.WithTTL(2*time.Second),
				primitives.WithInstanceTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			counters := func() string {
				out := ""
				for i, s := range srvs {
					qctx, qcancel := context.WithTimeout(ctx, 200*time.Millisecond)
					v, err := s.Do(qctx, "GET", "latch:{seq}:fence")
					qcancel()
					switch {
					case err == redis.Nil:
						v = "none"
					case err != nil:
						v = "?" // stopped
					}
					out += fmt.Sprintf(" %s=%v", instName(i), v)
				}
				return out
			}
			var last int64
			grant := func(when string) int64 {
				t.Helper()
				lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
				defer lcancel()
				l, err := rl.Lock(lctx)
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				f := l.Fence()
				// A release waits for a stopped instance up to its
				// context: the quorum's answers are in long before 300ms.
				rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer rcancel()
				if err := l.Release(rctx); err != nil {
					t.Fatalf("%s: release: %v", when, err)
				}
				return f
			}
			c.Pause()
			for i := 1; i <= 5; i++ {
				last = grant(fmt.Sprintf("grant %d, C stopped", i))
			}
			c.Resume()
			last = grant("grant 6, all up")
			t.Logf("after grant 6 (fence %d), counters:%s", last, counters())
			switch loss {
			case "restart-empty":
				b.Kill()
				b.Restart(t)
			case "FLUSHALL":
				if _, err := b.Do(ctx, "FLUSHALL"); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("B lost its data (%s), counters:%s", loss, counters())
			a.Pause()
			defer a.Resume()
			f := grant("grant 7, A stopped")
			t.Logf("grant 7 with A stopped: fence %d; counters of B and C:%s", f, counters())
			if f <= last {
				t.Errorf("fence went backwards: %d after %d (C stopped, 5 grants, C continued, a grant, B lost its data by %s, A stopped, a grant)", f, last, loss)
			}
		})
	}
}

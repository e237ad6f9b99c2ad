package primitives

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/latchkit/latchkit"
)

// annotate makes every acquisition carry an annotation, so that the fair
// scripts keep the annotations hash too.
var annotate = WithMiddleware(func(next latchkit.Acquire) latchkit.Acquire {
	return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
		req.Annotation = "holder"
		return next(ctx, req)
	}
})

// TestFairScriptsCheckBeforeWriting (issue 28): a FairSemaphore's release
// and give-back (fair_release.lua, fair_withdraw.lua), run with a holder
// and a waiter behind it, meet a list (no primitive keeps one) planted at
// each of the semaphore's keys: each either fails with an error matching
// ErrInvalid having changed nothing under the prefix, or, for a key it
// does not touch, leaves that key as it was. The scripts used to write
// (the finished tokens, the holder's entry) before type-checking the
// queue, liveness, holders, annotations and inboxes.
func TestFairScriptsCheckBeforeWriting(t *testing.T) {
	onFairServers(t, func(t *testing.T, srv fairServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const prefix = "fw:"
		scripts := []struct {
			name string
			run  func(s *fairSemaphore, tok string) error
		}{
			{"release", func(s *fairSemaphore, tok string) error { _, err := s.Release(ctx, tok); return err }},
			{"withdraw", func(s *fairSemaphore, tok string) error { return kit.ScriptErr(s.withdrawFn(ctx, tok)) }},
		}
		for _, sc := range scripts {
			for _, key := range keyspace.FairLayout.KeysOf(prefix, "f") {
				what := fmt.Sprintf("%s with a list at %s", sc.name, key)
				srv.c.FlushAll(ctx)
				s := newFairT(t, srv.b, "f", 2, WithPrefix(prefix), annotate)
				l, err := s.TryAcquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				deadWaiter(t, ctx, s, "waiter", 2)
				if err := srv.c.Del(ctx, key).Err(); err != nil {
					t.Fatal(err)
				}
				srv.c.RPush(ctx, key, "not latchkit's")
				before := RedisState(t, ctx, srv.c, prefix+"*")
				err = sc.run(s, l.Token())
				if err == nil {
					if after := RedisState(t, ctx, srv.c, key); after[key] != before[key] {
						t.Errorf("%s succeeded and changed it: %q, was %q", what, after[key], before[key])
					}
					continue
				}
				if !errors.Is(err, latchkit.ErrInvalid) {
					t.Errorf("%s: %v, want an error matching ErrInvalid", what, err)
				}
				CheckUnchanged(t, ctx, srv.c, prefix+"*", before, what)
			}
		}
	})
}

// TestFairReservedCountersLeftAlone (issue 39): a FairSemaphore keeps no
// ticket or fence counter (a new ticket is one above the last queued, a
// fence the server's clock above every fence held): what latchkit 0.x
// left at those keys, or anything else, is neither read nor written, and
// an attempt that sweeps a dead ticket and grants goes through. (Issue 28
// had a ticket counter that reads as a number but is no counter INCR
// takes refused before the attempt wrote anything.)
func TestFairReservedCountersLeftAlone(t *testing.T) {
	onFairServers(t, func(t *testing.T, srv fairServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const prefix = "ft:"
		for _, bad := range []string{"1.5", "0x10", "1e3"} {
			srv.c.FlushAll(ctx)
			s := newFairT(t, srv.b, "f", 2, WithPrefix(prefix), WithWaiterTimeout(30*time.Millisecond))
			l, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			deadWaiter(t, ctx, s, "dead", 2) // queued behind the holder: 1+2 > 2
			srv.pass(100 * time.Millisecond) // the waiter's ticket is dead; the holder lives (10s)
			keys := keyspace.FairLayout.KeysOf(prefix, "f")
			srv.c.Set(ctx, keys[8], bad, 0)
			srv.c.RPush(ctx, keys[9], "not latchkit's")
			before := RedisState(t, ctx, srv.c, prefix+"*")
			l2, err := s.TryAcquire(ctx)
			what := fmt.Sprintf("TryAcquire with the ticket counter %q, a list at the fence counter, and a dead ticket", bad)
			if err != nil {
				t.Errorf("%s: %v, want granted", what, err)
			} else if l2.Fence() <= l.Fence() {
				t.Errorf("%s: fence %d after %d", what, l2.Fence(), l.Fence())
			}
			after := RedisState(t, ctx, srv.c, prefix+"*")
			for _, k := range keys[8:] {
				if after[k] != before[k] {
					t.Errorf("%s changed %s: %q, was %q", what, k, after[k], before[k])
				}
			}
			if l2 != nil {
				l2.Release(ctx)
			}
			l.Release(ctx)
		}
	})
}

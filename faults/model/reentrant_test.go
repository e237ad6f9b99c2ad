package model_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// level is one level of a ReentrantMutex hold: a lease on its owner's
// grant (g), released on its own.
type level struct {
	id   int
	l    latchkit.Lease
	g    *mlease
	done bool
}

// TestModelReentrantMutex: a ReentrantMutex against its model. Each client
// is one owner (WithOwner) with its own ReentrantMutex; a Lock or TryLock
// by an owner whose grant is live (its Context not ended) re-enters it
// without a round trip, a level on the same grant (token, fence); the
// grant is released in Redis only with its last level; TTL and Extend of
// any level are the grant's, of a released level ErrLeaseLost; two owners
// exclude each other like a Mutex. A Lock without an owner is refused with
// ErrInvalid and changes nothing.
func TestModelReentrantMutex(t *testing.T) {
	r := newRig(t)
	r.warm(t, warmMutex)
	rapid.Check(t, func(t *rapid.T) {
		prefix, _, ls, pn, opts := r.leaseSession(t)
		// A grant's Context ends at its TTL by the client's clock, which
		// runs on while the server's does not: long TTLs, so that it ends
		// only when a call finds the grant lost.
		ttl := rapid.SampledFrom([]time.Duration{30 * time.Second, time.Minute}).Draw(t, "reentrant ttl")
		opts = append(opts, primitives.WithTTL(ttl))
		var mus []primitives.Mutex
		var owners []context.Context
		for c := range r.clients {
			mu, err := primitives.NewReentrantMutex(clienttest.For(t, r.clients[c].b), "m", opts...)
			if err != nil {
				t.Fatal(err)
			}
			mus = append(mus, mu)
			owners = append(owners, primitives.WithOwner(context.Background(), fmt.Sprint("owner", c)))
		}
		lockKey := keyspace.MutexLayout.KeysOf(prefix, "m")[0]
		var fences fenceSeq
		var levels []*level
		hold := make([]*mlease, len(r.clients)) // each owner's grant, as its middleware tracks it
		client, holder := ls.client, ls.holder
		depth := func(g *mlease) int {
			n := 0
			for _, lv := range levels {
				if lv.g == g && !lv.done {
					n++
				}
			}
			return n
		}
		noWaiter := func() string {
			if q := mutexWaiting(r, prefix, "m"); len(q) > 0 {
				return fmt.Sprintf("queued %v, the model has no waiter", q)
			}
			return ""
		}
		noStranger := func() string {
			v, left := heldLock(r, lockKey)
			h := holder()
			switch {
			case h == nil && v != "":
				return fmt.Sprintf("lock held by %q, the model says free", v)
			case h != nil && v != lockValue(h.l):
				return fmt.Sprintf("lock held by %q, the model says %v", v, h)
			case h != nil && left != h.exp.Sub(r.now):
				return fmt.Sprintf("lock's TTL %v, the model says %v", left, h.exp.Sub(r.now))
			}
			return ""
		}
		// acquire is a Lock or TryLock by owner c.
		acquire := func(t *rapid.T, c int, try bool) {
			g := hold[c]
			if g != nil && g.l.Context().Err() != nil {
				hold[c], g = nil, nil // lost: the owner acquires afresh
			}
			h := holder()
			d := callTimeout
			if g == nil && h != nil && !try {
				d = shortWait
			}
			ctx, cancel := context.WithTimeout(owners[c], d)
			var l latchkit.Lease
			var err error
			if try {
				l, err = mus[c].TryLock(ctx)
			} else {
				l, err = mus[c].Lock(ctx)
			}
			cancel()
			switch {
			case g != nil:
				want(t, "re-entry", err, "nil")
				if l.Token() != g.l.Token() || l.Fence() != g.l.Fence() {
					fail(t, "re-entry: not the owner's grant", l.Token(), g.l.Token())
				}
				levels = append(levels, &level{id: len(levels), l: l, g: g})
				return
			case h != nil && try:
				ls.touch()
				want(t, "TryLock of another owner's lock", err, "ErrNotAcquired")
				return
			case h != nil:
				ls.touch()
				if !errors.Is(err, context.DeadlineExceeded) {
					fail(t, "Lock of another owner's lock did not give up at its deadline", err)
				}
				// Its queued place is given back, in the background past
				// the give-back's budget on a busy machine: the next
				// release would hand the lock to it (see
				// TestRegressGaveUpLockThenRelease).
				eventually(t, "after a Lock gave up", func() string {
					if msg := noStranger(); msg != "" {
						return msg
					}
					return noWaiter()
				})
				return
			}
			ls.touch()
			if lateGrant(err, ttl) {
				eventually(t, "after a grant that came back late", noStranger)
				return
			}
			want(t, "acquire of a free lock", err, "nil")
			fences.next(t, l, "acquire")
			g = ls.add(l, c, 1, ttl)
			hold[c] = g
			levels = append(levels, &level{id: len(levels), l: l, g: g})
		}
		pick := func(t *rapid.T) *level {
			if len(levels) == 0 {
				t.Skip("no level")
			}
			lv := rapid.SampledFrom(levels).Draw(t, "level")
			ls.note(fmt.Sprint("L", lv.id))
			return lv
		}
		// onGrant runs f on lv's grant through lv (TTL, Extend, Release of
		// the last level: the grant's calls, as the leases model says).
		onGrant := func(lv *level, f func(*mlease)) {
			g := lv.g
			saved := g.l
			g.l = lv.l
			defer func() { g.l = saved }()
			f(g)
		}
		actions := map[string]func(*rapid.T){
			"Lock":       func(t *rapid.T) { acquire(t, client(t), false) },
			"TryLock":    func(t *rapid.T) { acquire(t, client(t), true) },
			"TimePasses": func(t *rapid.T) { r.advance(advanceDraw(t, ttl, ls.edges())) },
			"LockNoOwner": func(t *rapid.T) {
				c := client(t)
				ctx, cancel := ctxFor(callTimeout)
				_, err := mus[c].Lock(ctx)
				cancel()
				want(t, "Lock without an owner", err, "ErrInvalid")
			},
			"Release": func(t *rapid.T) {
				lv := pick(t)
				ctx, cancel := ctxFor(callTimeout)
				defer cancel()
				switch {
				case lv.done:
					// What its Release returned, again: checked by the
					// grant's model when it was the last level; an inner
					// level's said nil or, lost, ErrLeaseLost.
					err := lv.l.Release(ctx)
					if k := errKind(err); k != "nil" && k != "ErrLeaseLost" {
						fail(t, "Release of a released level", err)
					}
				case depth(lv.g) > 1:
					lost := lv.l.Context().Err() != nil
					err := lv.l.Release(ctx)
					lost2 := lv.l.Context().Err() != nil
					lv.done = true
					switch k := errKind(err); {
					case !lost && !lost2 && k != "nil", lost && k != "ErrLeaseLost":
						fail(t, "Release of an inner level", err, lost, lost2)
					}
				default:
					if hold[lv.g.c] == lv.g {
						hold[lv.g.c] = nil
					}
					onGrant(lv, func(g *mlease) { ls.release(t, g) })
					lv.done = true
				}
			},
			"ReleaseLostReply": func(t *rapid.T) {
				lv := pick(t)
				if lv.done || depth(lv.g) > 1 || lv.g.st == released {
					t.Skip("no round trip")
				}
				onGrant(lv, func(g *mlease) { ls.releaseLost(t, g) })
				if lv.g.st == released {
					lv.done = true
					if hold[lv.g.c] == lv.g {
						hold[lv.g.c] = nil
					}
				}
				// Else the outcome is unknown: the level is kept for the
				// caller to retry, and so is the owner's hold.
			},
			"Extend": func(t *rapid.T) {
				lv := pick(t)
				// Refused ones, or long enough that the grant's Context,
				// which decides re-entry, does not end by the client's
				// clock during the sequence.
				d := rapid.SampledFrom([]time.Duration{0, primitives.MinTTL - time.Millisecond, ttl, 2 * ttl}).Draw(t, "extend ttl")
				if lv.done {
					ctx, cancel := ctxFor(callTimeout)
					err := lv.l.Extend(ctx, d)
					cancel()
					kind := "ErrLeaseLost"
					if d < primitives.MinTTL {
						kind = "ErrInvalid" // bad input is refused first, as by every lease
					}
					want(t, "Extend of a released level", err, kind)
					return
				}
				onGrant(lv, func(g *mlease) { ls.extend(t, g, d) })
			},
			"TTL": func(t *rapid.T) {
				lv := pick(t)
				if lv.done {
					ctx, cancel := ctxFor(callTimeout)
					_, err := lv.l.TTL(ctx)
					cancel()
					want(t, "TTL of a released level", err, "ErrLeaseLost")
					return
				}
				onGrant(lv, func(g *mlease) { ls.ttl(t, g) })
			},
			"PanicBefore": func(t *rapid.T) {
				c := client(t)
				pn.set("before")
				if !recovered(func() { _, _ = mus[c].TryLock(owners[c]) }) {
					t.Fatalf("the middleware did not panic")
				}
			},
			"PanicAfterGrant": func(t *rapid.T) {
				c := client(t)
				if holder() != nil || hold[c] != nil {
					t.Skip("held: no grant to panic after")
				}
				ls.touch()
				pn.set("after")
				var err error
				if !recovered(func() { _, err = mus[c].TryLock(owners[c]) }) && !lateGrant(err, ttl) {
					t.Fatalf("the middleware did not panic: %v", err)
				}
				eventually(t, "after a middleware panicked on a grant", noStranger)
			},
			"": func(t *rapid.T) {
				if n := len(ls.live()); n > 1 {
					fail(t, "model: more than one live holder", n)
				}
				if msg := noStranger(); msg != "" {
					fail(t, "the holder in Redis is not the model's", msg, "\n"+r.dump(prefix, ls))
				}
				if msg := noWaiter(); msg != "" {
					fail(t, "a place is queued in Redis for no waiter", msg, "\n"+r.dump(prefix, ls))
				}
				ls.checkKeys(t)
			},
		}
		t.Repeat(ls.traced(actions))
	})
}

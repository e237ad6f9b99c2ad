package model_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// warmRW runs every RWLock script once (see rig.warm).
func warmRW(ctx context.Context, cl *primitives.Client, o []primitives.Option) error {
	rw, err := primitives.NewRWLock(cl, "w", o...)
	if err != nil {
		return err
	}
	rl, err := rw.TryRLock(ctx)
	if err != nil {
		return err
	}
	_, _ = rw.TryLock(ctx)
	wctx, cancel := context.WithTimeout(ctx, shortWait)
	_, _ = rw.Lock(wctx)
	cancel()
	_ = rl.Extend(ctx, time.Second)
	_, _ = rl.TTL(ctx)
	if err := rl.Release(ctx); err != nil {
		return err
	}
	wl, err := rw.TryLock(ctx)
	if err != nil {
		return err
	}
	_, _ = rw.TryRLock(ctx)
	_ = wl.Extend(ctx, time.Second)
	_, _ = wl.TTL(ctx)
	return wl.Release(ctx)
}

// TestModelRWLock: an RWLock against its model: one writer and nobody
// else, or readers, each expiring on its own, by the server's clock.
// Writer-preferring: while a writer waits (its Lock found the lock held
// and left its intent), a TryRLock is refused even when only readers
// hold; the model allows nothing else of the preference (no action
// leaves a writer waiting across steps: a Lock that gives up withdraws
// its intent).
func TestModelRWLock(t *testing.T) {
	r := newRig(t)
	r.warm(t, warmRW)
	rapid.Check(t, func(t *rapid.T) {
		prefix, ttl, ls, pn, opts := r.leaseSession(t)
		var rws []primitives.RWLock
		for _, c := range r.clients {
			rw, err := primitives.NewRWLock(clienttest.For(t, c.b), "rw", opts...)
			if err != nil {
				t.Fatal(err)
			}
			rws = append(rws, rw)
		}
		keys := keyspace.RWLayout.KeysOf(prefix, "rw")
		fences := &fenceSeq{}
		client := func(t *rapid.T) int { return r.clientDraw(t, "client") }
		writer := func() *mlease {
			for _, l := range ls.live() {
				if !l.reader {
					return l
				}
			}
			return nil
		}
		// free says whether an attempt of that kind is granted now, and
		// the wait hint of its refusal: the writer's remaining time, or
		// (a writer kept out by readers) the earliest reader's.
		free := func(write bool) (bool, time.Duration) {
			live := ls.live()
			if w := writer(); w != nil {
				return false, w.exp.Sub(r.now)
			}
			if !write || len(live) == 0 {
				return true, 0
			}
			first := time.Duration(1 << 62)
			for _, l := range live {
				first = min(first, l.exp.Sub(r.now))
			}
			return false, first
		}
		granted := func(t *rapid.T, c int, write bool, l latchkit.Lease, what string) {
			fences.next(t, l, what)
			ls.add(l, c, 1, ttl).reader = !write
		}
		kind := func(write bool) string {
			if write {
				return "write"
			}
			return "read"
		}
		try := func(c int, write bool) func(ctx context.Context) (latchkit.Lease, error) {
			if write {
				return rws[c].TryLock
			}
			return rws[c].TryRLock
		}
		// state compares Redis with the model: the writer (token, fence
		// and expiry), the live readers (tokens, fences and expiries),
		// never a writer beside a reader, and no writer's intent left.
		state := func() string {
			w := writer()
			v, err := r.m.Get(keys[1])
			wtok, wfence := fenceOfWriter(v)
			switch {
			case w == nil && err == nil:
				return fmt.Sprintf("writer %q in Redis, none in the model", v)
			case w != nil && (wtok != w.l.Token() || wfence != w.l.Fence()):
				return fmt.Sprintf("writer %q in Redis, the model says %v", v, w)
			case w != nil && r.m.TTL(keys[1]) != w.exp.Sub(r.now):
				return fmt.Sprintf("writer's TTL %v in Redis, %v in the model", r.m.TTL(keys[1]), w.exp.Sub(r.now))
			}
			got, fences := holdersIn(r.m, keys[0], r.now)
			if msg := fencesMatch(ls, fences, func(l *mlease) bool { return l.reader }); msg != "" {
				return msg
			}
			if err == nil && len(got) > 0 {
				return fmt.Sprintf("a writer beside readers %v", got)
			}
			want := map[string]int64{}
			for _, l := range ls.live() {
				if l.reader {
					want[l.l.Token()] = l.exp.UnixMilli()
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Sprintf("readers in Redis %v, in the model %v", got, want)
			}
			is, _ := r.m.ZMembers(keys[2])
			for _, i := range is {
				if sc, _ := r.m.ZScore(keys[2], i); int64(sc) > r.now.UnixMilli() {
					return fmt.Sprintf("a writer's intent %q is left", i)
				}
			}
			return ""
		}
		actions := ls.actions(ttl)
		actions["TryRLock/TryLock"] = func(t *rapid.T) {
			c, write := client(t), rapid.Bool().Draw(t, "write")
			ok, hint := free(write)
			ls.touch()
			ctx, cancel := ctxFor(callTimeout)
			l, err := try(c, write)(ctx)
			cancel()
			what := "Try " + kind(write)
			if !ok {
				want(t, what+" of a held lock", err, "ErrNotAcquired")
				var he *latchkit.HeldError
				if !errors.As(err, &he) || he.WaitHint != hint {
					fail(t, what+": wait hint differs from the model", err, hint)
				}
				return
			}
			if lateGrant(err, ttl) {
				eventually(t, "after a grant that came back late", state)
				return
			}
			if lateGrant(err, ttl) {
				eventually(t, "after a "+what+" whose grants came back late", state)
				return
			}
			want(t, what+" of a free lock", err, "nil")
			granted(t, c, write, l, what)
		}
		actions["RLock/Lock"] = func(t *rapid.T) {
			c, write := client(t), rapid.Bool().Draw(t, "write")
			ok, _ := free(write)
			ls.touch()
			d := callTimeout
			if !ok {
				d = shortWait
			}
			ctx, cancel := ctxFor(d)
			var l latchkit.Lease
			var err error
			if write {
				l, err = rws[c].Lock(ctx)
			} else {
				l, err = rws[c].RLock(ctx)
			}
			cancel()
			what := "waiting " + kind(write)
			if !ok {
				if !errors.Is(err, context.DeadlineExceeded) {
					fail(t, what+" of a held lock did not give up at its deadline", err)
				}
				eventually(t, "after a "+what+" gave up", state)
				return
			}
			want(t, what+" of a free lock", err, "nil")
			granted(t, c, write, l, what)
		}
		actions["WriterWaits"] = func(t *rapid.T) {
			if len(ls.live()) == 0 {
				t.Skip("free: a writer would not wait")
			}
			c, o := client(t), r.clientDraw(t, "reader's client")
			freeAll := rapid.Bool().Draw(t, "release every holder")
			ls.touch()
			w := r.clients[c].startWaiting(t, 3*time.Second, 20*time.Millisecond, rws[c].Lock)
			ctx, cancel := ctxFor(callTimeout)
			_, err := rws[o].TryRLock(ctx)
			cancel()
			if err == nil {
				w.stop()
				fail(t, "TryRLock granted while a writer waits")
			}
			want(t, "TryRLock while a writer waits", err, "ErrNotAcquired")
			if !freeAll {
				if res := w.stop(); res.err == nil {
					fail(t, "a writer was granted a held lock")
				}
				eventually(t, "after a waiting writer gave up", state)
				return
			}
			for _, h := range ls.live() {
				ls.release(t, h)
			}
			res := w.result()
			if lateGrant(res.err, ttl) {
				eventually(t, "after a waiting writer whose grants came back late", state)
				return
			}
			want(t, "Lock of a writer waiting once every holder released", res.err, "nil")
			granted(t, c, true, res.l, "Lock after waiting")
		}
		actions["TryLostReply"] = func(t *rapid.T) {
			c, write := client(t), rapid.Bool().Draw(t, "write")
			ok, _ := free(write)
			ls.touch()
			var l latchkit.Lease
			var err error
			r.clients[c].lostReply(func(ctx context.Context) { l, err = try(c, write)(ctx) })
			if err == nil {
				if !ok {
					fail(t, "Try whose reply was lost was granted a held lock")
				}
				granted(t, c, write, l, "Try answered by the resend")
			}
			eventually(t, "after a Try whose reply was lost", state)
		}
		actions["TryPaused"] = func(t *rapid.T) {
			c, write := client(t), rapid.Bool().Draw(t, "write")
			d := rapid.SampledFrom([]time.Duration{0, ttl, ttl + time.Millisecond}).Draw(t, "paused for")
			var err error
			r.clients[c].paused(func(ctx context.Context) { _, err = try(c, write)(ctx) }, func() { r.advance(d) })
			ls.touch()
			if err == nil {
				fail(t, "Try of a paused client was granted")
			}
			eventually(t, "after a paused Try", state)
		}
		actions["PanicBefore"] = func(t *rapid.T) {
			c, write := client(t), rapid.Bool().Draw(t, "write")
			pn.set("before")
			if !recovered(func() { _, _ = try(c, write)(context.Background()) }) {
				fail(t, "the middleware did not panic")
			}
		}
		actions["PanicAfterGrant"] = func(t *rapid.T) {
			c, write := client(t), rapid.Bool().Draw(t, "write")
			if ok, _ := free(write); !ok {
				t.Skip("held: no grant to panic after")
			}
			ls.touch()
			pn.set("after")
			var err error
			if !recovered(func() { _, err = try(c, write)(context.Background()) }) && !lateGrant(err, ttl) {
				fail(t, "the middleware did not panic", err)
			}
			eventually(t, "after a middleware panicked on a grant", state)
		}
		actions[""] = func(t *rapid.T) {
			if w := writer(); w != nil && len(ls.live()) > 1 {
				fail(t, "model: a writer beside others")
			}
			if msg := state(); msg != "" {
				fail(t, "Redis differs from the model", msg, "\n"+r.dump(prefix, ls))
			}
			ls.checkKeys(t)
			ls.checkIdle(t)
		}
		actions["TimePasses"] = ls.timePasses(ttl)
		t.Repeat(actions)
	})
}

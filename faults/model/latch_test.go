package model_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/primitives"
)

// warmLatch runs every Latch script once (see rig.warm).
func warmLatch(ctx context.Context, b backend.Backend, o []primitives.Option) error {
	l, err := primitives.NewLatch(b, "w", o...)
	if err != nil {
		return err
	}
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		return err
	}
	if _, err := l.Count(ctx); err != nil {
		return err
	}
	return l.CountDown(ctx)
}

// TestModelLatch: a Latch against its model: a count set by TrySetCount
// when open, lowered once per CountDown call (never below zero), the key
// living the retention after each change, a minute after the count-down
// that reached zero, by the server's clock. Faults: a CountDown or
// TrySetCount whose reply was lost (the server ran it, the proxy runs the
// same bytes again later: the copy changes nothing), a copy of a
// count-down arriving after the latch was re-armed (it must not count in
// the new round), a paused call arriving late (it counts once, where it
// lands), a Wait whose middleware panics.
func TestModelLatch(t *testing.T) {
	r := newRig(t)
	r.warm(t, warmLatch)
	rapid.Check(t, func(t *rapid.T) {
		prefix := r.begin()
		pn := &panicker{}
		opts := []primitives.Option{primitives.WithPrefix(prefix), primitives.WithRetention(retention), primitives.WithMiddleware(pn.mw)}
		var lts []primitives.Latch
		for _, c := range r.clients {
			l, err := primitives.NewLatch(c.b, "l", opts...)
			if err != nil {
				t.Fatal(err)
			}
			lts = append(lts, l)
		}
		key := primitives.LatchLayout.KeysOf(prefix, "l")[0]
		var (
			count int64
			exp   time.Time // when the key expires; zero: no key
		)
		cur := func() int64 {
			if !r.now.Before(exp) {
				return 0
			}
			return count
		}
		// set and down are what the server does with a TrySetCount and a
		// CountDown that reach it.
		set := func(n int64) bool {
			if cur() > 0 {
				return false
			}
			count, exp = n, r.now.Add(retention)
			return true
		}
		down := func() {
			switch c := cur(); {
			case c == 0:
			case c == 1:
				count, exp = 0, r.now.Add(markerTTL)
			default:
				count, exp = c-1, r.now.Add(retention)
			}
		}
		client := func(t *rapid.T) int { return r.clientDraw(t, "client") }
		state := func() string {
			got := int64(0)
			if v := r.m.HGet(key, "count"); v != "" {
				got, _ = strconv.ParseInt(v, 10, 64)
			}
			if got != cur() {
				return fmt.Sprintf("count %d in Redis, %d in the model", got, cur())
			}
			switch live := r.now.Before(exp); {
			case live && r.m.TTL(key) != exp.Sub(r.now):
				return fmt.Sprintf("the latch's TTL %v in Redis, %v in the model", r.m.TTL(key), exp.Sub(r.now))
			case !live && r.m.Exists(key):
				return fmt.Sprintf("the latch outlived its expiry in the model (%v left)", r.m.TTL(key))
			}
			return ""
		}
		// landed applies a call that may have reached the server (a
		// paused client's: the driver may have dropped the connection
		// holding it) when Redis says it did.
		landed := func(call func()) {
			c0, e0 := count, exp
			call()
			if state() != "" {
				count, exp = c0, e0
			}
		}
		actions := map[string]func(*rapid.T){}
		actions["TrySetCount"] = func(t *rapid.T) {
			c := client(t)
			n := rapid.SampledFrom([]int64{math.MinInt64, -1, 0, 1, 2, 3, rapid.Int64Range(1, 10).Draw(t, "n"), math.MaxInt64}).Draw(t, "count")
			ctx, cancel := ctxFor(callTimeout)
			ok, err := lts[c].TrySetCount(ctx, n)
			cancel()
			if n < 1 {
				want(t, "TrySetCount below 1", err, "ErrInvalid")
				return
			}
			want(t, "TrySetCount", err, "nil")
			if exp := set(n); ok != exp {
				fail(t, "TrySetCount differs from the model", ok, exp)
			}
		}
		actions["CountDown"] = func(t *rapid.T) {
			c := client(t)
			ctx, cancel := ctxFor(callTimeout)
			err := lts[c].CountDown(ctx)
			cancel()
			want(t, "CountDown", err, "nil")
			down()
		}
		actions["Count"] = func(t *rapid.T) {
			ctx, cancel := ctxFor(callTimeout)
			n, err := lts[client(t)].Count(ctx)
			cancel()
			want(t, "Count", err, "nil")
			if n != cur() {
				fail(t, "Count differs from the model", n, cur())
			}
		}
		actions["Wait"] = func(t *rapid.T) {
			c := client(t)
			open := cur() == 0
			d := callTimeout
			if !open {
				d = shortWait
			}
			ctx, cancel := ctxFor(d)
			err := lts[c].Wait(ctx)
			cancel()
			if open {
				want(t, "Wait on an open latch", err, "nil")
			} else if !errors.Is(err, context.DeadlineExceeded) {
				fail(t, "Wait on a set latch did not give up at its deadline", err)
			}
		}
		actions["WaitWoken"] = func(t *rapid.T) {
			if cur() != 1 {
				t.Skip("not one count-down from zero")
			}
			c, o := client(t), r.clientDraw(t, "counting client")
			w := r.clients[c].startWaiting(t, 3*time.Second, 30*time.Millisecond, func(ctx context.Context) (latchkit.Lease, error) {
				return nil, lts[c].Wait(ctx)
			})
			ctx, cancel := ctxFor(callTimeout)
			err := lts[o].CountDown(ctx)
			cancel()
			want(t, "CountDown to zero", err, "nil")
			down()
			want(t, "Wait woken by the count-down to zero", w.result().err, "nil")
		}
		actions["TrySetCountLostReply"] = func(t *rapid.T) {
			c := client(t)
			n := rapid.Int64Range(1, 3).Draw(t, "count")
			var ok bool
			var err error
			if !r.clients[c].lostReply(func(ctx context.Context) { ok, err = lts[c].TrySetCount(ctx, n) }) {
				fail(t, "TrySetCount with a lost reply made no round trip", err)
			}
			if exp := set(n); err == nil && ok != exp {
				fail(t, "TrySetCount answered by the resend differs from the model", ok, exp)
			}
		}
		actions["CountDownLostReply"] = func(t *rapid.T) {
			c := client(t)
			var err error
			if !r.clients[c].lostReply(func(ctx context.Context) { err = lts[c].CountDown(ctx) }) {
				fail(t, "CountDown with a lost reply made no round trip", err)
			}
			down() // once, though the server ran it twice
		}
		// CountDownLateCopy: a count-down that reached zero, whose copy
		// (the driver's resend) arrives after another client re-armed the
		// latch: the copy must not count in the new round.
		actions["CountDownLateCopy"] = func(t *rapid.T) {
			if cur() != 1 {
				t.Skip("not one count-down from zero")
			}
			c, o := client(t), r.clientDraw(t, "re-arming client")
			n := rapid.Int64Range(1, 3).Draw(t, "new count")
			lag := time.Millisecond * time.Duration(rapid.Int64Range(0, int64(markerTTL/time.Millisecond)-1).Draw(t, "server ms before the copy"))
			rs := r.clients[c].px.ResendNext(scripts, 150*time.Millisecond)
			ctx, cancel := ctxFor(faultTimeout)
			_ = lts[c].CountDown(ctx)
			cancel()
			select {
			case <-rs.Executed():
			case <-time.After(time.Second):
				r.clients[c].px.ResendNext(func([]string) bool { return false }, 0)
				fail(t, "CountDown with a lost reply made no round trip")
			}
			down()
			ctx, cancel = ctxFor(callTimeout)
			ok, err := lts[o].TrySetCount(ctx, n)
			cancel()
			want(t, "TrySetCount after the count-down to zero", err, "nil")
			if exp := set(n); ok != exp {
				fail(t, "TrySetCount after the count-down to zero differs from the model", ok, exp)
			}
			r.advance(lag)
			select {
			case <-rs.Done():
			case <-time.After(2 * time.Second):
			}
			r.clients[c].quiesce()
			// The copy changed nothing: the check after the step compares
			// the count.
		}
		actions["CountDownPaused"] = func(t *rapid.T) {
			c := client(t)
			d := advanceDraw(t, markerTTL, []time.Duration{exp.Sub(r.now)})
			var err error
			r.clients[c].paused(func(ctx context.Context) { err = lts[c].CountDown(ctx) }, func() { r.advance(d) })
			if err == nil {
				fail(t, "CountDown of a paused client returned nil")
			}
			landed(down) // late, once, or not at all
		}
		actions["TrySetCountPaused"] = func(t *rapid.T) {
			c := client(t)
			n := rapid.Int64Range(1, 3).Draw(t, "count")
			d := advanceDraw(t, markerTTL, []time.Duration{exp.Sub(r.now)})
			var err error
			r.clients[c].paused(func(ctx context.Context) { _, err = lts[c].TrySetCount(ctx, n) }, func() { r.advance(d) })
			if err == nil {
				fail(t, "TrySetCount of a paused client returned nil")
			}
			landed(func() { set(n) })
		}
		actions["WaitPanicBefore"] = func(t *rapid.T) {
			c := client(t)
			pn.set("before")
			if !recovered(func() { _ = lts[c].Wait(context.Background()) }) {
				fail(t, "the middleware did not panic")
			}
		}
		actions["TimePasses"] = func(t *rapid.T) {
			var edges []time.Duration
			if r.now.Before(exp) {
				edges = append(edges, exp.Sub(r.now))
			}
			r.advance(advanceDraw(t, markerTTL, edges))
		}
		actions[""] = func(t *rapid.T) {
			if msg := state(); msg != "" {
				fail(t, "Redis differs from the model", msg, "\n"+r.dump(prefix, &leases{}))
			}
			r.checkExpiries(t, prefix)
		}
		t.Repeat(actions)
	})
}

package model_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"math"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// warmLatch runs every Latch script once (see rig.warm).
func warmLatch(ctx context.Context, cl *primitives.Client, o []primitives.Option) error {
	l, err := primitives.NewLatch(cl, "w", clienttest.Fitting[primitives.LatchOption](o)...)
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
// that reached zero, by the server's clock. The count in Redis is compared
// with the model's after every step. Faults:
//
//   - a CountDown or TrySetCount whose reply was lost and whose caller gave
//     up (the server ran it once: lostReply's copy, 60 ms later, is not
//     sent, as every driver drops its connection when the call's context
//     ends first);
//   - a copy the driver sends (go-redis after a read timeout): the proxy
//     runs the call twice, the caller sees the second reply and returns
//     nil; the copy must change nothing (CountDownResent);
//   - a reply lost with the connection reset after the server ran the
//     call: the latch tries again with the same id on a new connection and
//     returns nil; the retry must change nothing: a CountDown counts once,
//     a TrySetCount reports the true of its first try (*Retried);
//   - the same retry held back by a partition until another client
//     re-armed the latch (and time passed): a count-down that counted in
//     the round it closed must not count again in the next one, while one
//     whose first try found the latch open counts once, in the new round
//     (CountDownRetriedLate);
//   - a paused call arriving late (it counts once, where it lands);
//   - a Wait whose middleware panics.
//
// The actions whose retry meets the id check are drawn three times as
// often as the others (see the weights below), so that the fast lane's
// few short sequences reach them on a set latch.
func TestModelLatch(t *testing.T) {
	r := newRig(t)
	r.warm(t, warmLatch)
	rapid.Check(t, func(t *rapid.T) {
		prefix := r.begin()
		pn := &panicker{}
		opts := []primitives.LatchOption{primitives.WithPrefix(prefix), primitives.WithRetention(retention), primitives.WithMiddleware(pn.mw)}
		var lts []primitives.Latch
		for _, c := range r.clients {
			l, err := primitives.NewLatch(clienttest.For(t, c.b), "l", opts...)
			if err != nil {
				t.Fatal(err)
			}
			lts = append(lts, l)
		}
		key := keyspace.LatchLayout.KeysOf(prefix, "l")[0]
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
			down() // it ran once (the caller gave up; the copy is not sent)
		}
		// CountDownResent: go-redis's resend after a read timeout. The
		// proxy runs the count-down, drops the reply and runs the same
		// bytes again d later, within the call's deadline: the caller
		// sees the copy's reply and returns nil.
		actions["CountDownResent"] = func(t *rapid.T) {
			c := client(t)
			d := time.Millisecond * time.Duration(rapid.IntRange(0, 15).Draw(t, "copy after ms"))
			missed, err := r.clients[c].resendWithin(d, func(ctx context.Context) error { return lts[c].CountDown(ctx) })
			if missed != "" {
				fail(t, missed, err)
			}
			want(t, "CountDown run twice", err, "nil")
			down() // once, though the server ran it twice
		}
		// retried runs call (a CountDown or TrySetCount of client c) as
		// client.retryAfterReset does, failing t when the fault did not
		// happen.
		retried := func(t *rapid.T, c int, call func(ctx context.Context) error, hold func()) error {
			missed, err := r.clients[c].retryAfterReset(lts[c], call, hold)
			if missed != "" {
				fail(t, missed, err)
			}
			return err
		}
		actions["CountDownRetried"] = func(t *rapid.T) {
			c := client(t)
			err := retried(t, c, func(ctx context.Context) error { return lts[c].CountDown(ctx) }, nil)
			want(t, "CountDown retried after a reset", err, "nil")
			down() // once, though the server ran it twice
		}
		actions["TrySetCountRetried"] = func(t *rapid.T) {
			c := client(t)
			n := rapid.Int64Range(1, 3).Draw(t, "count")
			var ok bool
			err := retried(t, c, func(ctx context.Context) (err error) { ok, err = lts[c].TrySetCount(ctx, n); return err }, nil)
			want(t, "TrySetCount retried after a reset", err, "nil")
			if exp := set(n); ok != exp {
				fail(t, "TrySetCount retried after a reset differs from the model", ok, exp)
			}
		}
		// CountDownRetriedLate: the retry of a count-down whose reply was
		// lost is held back (c partitioned) while another client re-arms
		// the latch and time passes. When the first try counted (the
		// latch was set), the retry must change nothing, in the round the
		// first try closed or in the next one (its id is kept for a minute
		// across the re-arm, and for the whole round); when the first try
		// found the latch open, the call counts once, in the new round.
		actions["CountDownRetriedLate"] = func(t *rapid.T) {
			c := client(t)
			o := (c + 1 + rapid.IntRange(0, len(r.clients)-2).Draw(t, "re-arming client offset")) % len(r.clients)
			n := rapid.Int64Range(1, 3).Draw(t, "new count")
			lag := advanceDraw(t, markerTTL, []time.Duration{retention})
			counted := cur() > 0 // what the first try finds
			var (
				ok, okWant bool
				serr       error
			)
			err := retried(t, c, func(ctx context.Context) error { return lts[c].CountDown(ctx) }, func() {
				if counted {
					down()
				}
				ctx, cancel := ctxFor(callTimeout)
				ok, serr = lts[o].TrySetCount(ctx, n)
				cancel()
				okWant = set(n)
				r.advance(lag)
			})
			want(t, "TrySetCount while a count-down's retry is held", serr, "nil")
			if ok != okWant {
				fail(t, "TrySetCount while a count-down's retry is held differs from the model", ok, okWant)
			}
			want(t, "CountDown retried late", err, "nil")
			if !counted {
				down() // the retry is the call's only count-down
			}
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
		// The retried calls meet the id check: weigh them three to one.
		for _, name := range []string{"CountDownResent", "CountDownRetried", "CountDownRetriedLate", "TrySetCountRetried"} {
			for i := 2; i <= 3; i++ {
				actions[fmt.Sprintf("%s#%d", name, i)] = actions[name]
			}
		}
		t.Repeat(actions)
	})
}

// disarmResend cancels a resend that found no command.
func (c *client) disarmResend() { c.px.ResendNext(func([]string) bool { return false }, 0) }

// resendWithin runs call (a CountDown or TrySetCount) on c as go-redis does
// after a read timeout: the proxy runs its script, drops the reply and
// runs the same bytes again d later, within the call's deadline, so the
// caller sees the copy's reply. It returns why the fault did not happen as
// meant ("" when it did) and the call's error.
func (c *client) resendWithin(d time.Duration, call func(ctx context.Context) error) (missed string, err error) {
	rs := c.px.ResendNext(scripts, d)
	ctx, cancel := ctxFor(callTimeout)
	err = call(ctx)
	cancel()
	select {
	case <-rs.Done():
	case <-time.After(time.Second):
		c.disarmResend()
		missed = "the copy of a call did not run"
	}
	c.quiesce()
	return missed, err
}

// retryAfterReset runs call (a CountDown or TrySetCount of latch l on c)
// with the reply of its first try dropped and c's connections reset once
// the server ran it: the latch tries again, with the same id, on a new
// connection (the reset is ErrUnavailable), and the call returns what
// that try answered. (The proxy would run the call again only after a
// minute; the reset ends its connection first.) With hold, c's traffic is
// held from the reset until hold returned (a partition), so that the
// retry reaches the server after what hold did: hold must not use c. Then
// it settles c (settleLatch). It returns why the fault did not happen as
// meant ("" when it did: the first try ran on the server and the call
// tried again) and the call's error.
func (c *client) retryAfterReset(l primitives.Latch, call func(ctx context.Context) error, hold func()) (missed string, err error) {
	before := c.b.started.Load()
	rs := c.px.ResendNext(scripts, time.Minute)
	ctx, cancel := ctxFor(callTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case <-rs.Executed():
	case err := <-done:
		c.disarmResend()
		return "a retried call returned before its script ran", err
	case <-time.After(time.Second):
		c.disarmResend()
		cancel()
		return "a retried call made no round trip", <-done
	}
	if hold != nil {
		c.px.Blackhole(true)
	}
	c.px.ResetAll()
	if hold != nil {
		hold()
		c.px.Blackhole(false)
	}
	err = <-done
	c.quiesce()
	if c.b.started.Load()-before < 2 {
		return "a call whose connection was reset did not try again", err
	}
	if serr := settleLatch(l); serr != nil {
		return "a client whose connections were reset cannot read the count", serr
	}
	return "", err
}

// settleLatch reads l's count 8 times at once, in rounds, until two rounds
// in a row succeed (at most 10 rounds): after a reset, a driver finds each
// of its dead connections on its next use of it (redigo's idle ones, which
// it does not check; rueidis's and valkey-go's wires), and Count, which
// does not try again, fails there with ErrUnavailable, as documented.
// Reads one at a time would take the same connection each time (redigo's
// idle list is last in, first out) and leave the dead ones below it for a
// later step. It returns an error that is not ErrUnavailable, or the last
// one when the reads did not settle.
func settleLatch(l primitives.Latch) error {
	var last error
	for rounds, clean := 0, 0; clean < 2; rounds++ {
		if rounds == 10 {
			return last
		}
		errs := make(chan error, 8)
		for range cap(errs) {
			go func() {
				ctx, cancel := ctxFor(callTimeout)
				defer cancel()
				_, err := l.Count(ctx)
				errs <- err
			}()
		}
		clean++
		for range cap(errs) {
			switch err := <-errs; {
			case err == nil:
			case errors.Is(err, backend.ErrUnavailable):
				last, clean = err, 0
			default:
				return err
			}
		}
	}
	return nil
}

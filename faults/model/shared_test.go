package model_test

import (
	"context"
	"log/slog"
	"time"

	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/primitives"
)

// leaseSession is the set-up every lease model's run begins with: a fresh
// prefix, the TTL drawn (the least one included), the model's leases with
// their lost-lease log, the panicking middleware, and the options each
// client's primitive is made with (auto-extend off: the model moves time
// itself).
func (r *rig) leaseSession(t *rapid.T) (prefix string, ttl time.Duration, ls *leases, pn *panicker, opts []primitives.Option) {
	prefix = r.begin()
	ttl = rapid.SampledFrom([]time.Duration{primitives.MinTTL, 50 * time.Millisecond, time.Second, 10 * time.Second}).Draw(t, "ttl")
	ls = &leases{r: r, log: &lostLog{}, lastTouch: r.now, prefix: prefix}
	pn = &panicker{}
	opts = []primitives.Option{primitives.WithPrefix(prefix), primitives.WithTTL(ttl), primitives.WithAutoExtend(false),
		primitives.WithRetention(retention), primitives.WithLogger(slog.New(ls.log)), primitives.WithMiddleware(pn.mw)}
	return prefix, ttl, ls, pn, opts
}

// fenceSeq checks that the fences of a name's grants strictly increase.
type fenceSeq struct{ last int64 }

func (f *fenceSeq) next(t *rapid.T, l latchkit.Lease, what string) {
	if l.Fence() <= f.last {
		fail(t, what+": fence not above the last", l.Fence(), f.last)
	}
	f.last = l.Fence()
}

// clientDraw draws one of r's clients.
func (r *rig) clientDraw(t *rapid.T, label string) int {
	return rapid.IntRange(0, len(r.clients)-1).Draw(t, label)
}

// waiting is a call that waits (a Lock, a Campaign, a Wait) running in the
// background while the sequence goes on.
type waiting struct {
	cancel context.CancelFunc
	done   chan waitResult
}

type waitResult struct {
	l   latchkit.Lease
	err error
}

// startWaiting starts call on c with a deadline d and returns once its
// first script has run (so that it found the primitive as the model says
// and queued, if it queues) or it returned. settle is how long it is then
// given to subscribe before anything it waits for happens.
func (c *client) startWaiting(t *rapid.T, d, settle time.Duration, call func(ctx context.Context) (latchkit.Lease, error)) *waiting {
	before := c.b.finished.Load()
	ctx, cancel := ctxFor(d)
	w := &waiting{cancel: cancel, done: make(chan waitResult, 1)}
	go func() {
		l, err := call(ctx)
		w.done <- waitResult{l, err}
	}()
	deadline := time.Now().Add(3 * time.Second)
	for c.b.finished.Load() == before {
		if len(w.done) > 0 {
			return w
		}
		if time.Now().After(deadline) {
			cancel()
			fail(t, "a waiting call made no attempt")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(settle)
	return w
}

// stop ends the call (if it still waits) and returns its outcome.
func (w *waiting) stop() waitResult {
	w.cancel()
	return <-w.done
}

// result waits for the call to end by itself.
func (w *waiting) result() waitResult {
	defer w.cancel()
	return <-w.done
}

package pubsub

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/latchkit/latchkit"
)

// WakeOnRelease is the middleware that lets waiting acquisitions sleep until
// a release instead of polling. It installs a latchkit.Waiter on the
// request; retry.Middleware, which must come after it in the chain, calls it
// between attempts:
//
//   - when the backend's shared Hub already has the request's channels
//     subscribed (they linger after a wait, or another waiter of the
//     process uses them), the request joins before its first attempt, at no
//     network cost, and its first wait sleeps at once;
//   - otherwise the first wait subscribes to the request's release channels
//     through the backend's shared Hub and returns at once, so that the
//     next attempt runs with the subscription in place and no release can
//     slip between a failed attempt and the sleep that follows it;
//   - later waits end on a release message (one message wakes as many local
//     waiters as it freed holders, oldest first; a hand-over wakes only the
//     waiter it names, see Request.WakeID), when the holder's remaining TTL
//     runs out (the request's WaitHint), or when ctx is done;
//   - while the subscription is down, waits fall back to the retry policy's
//     delay, capped by the WaitHint.
//
// Requests marked Try, and requests without channels, pass straight through.
func WakeOnRelease(opts ...Option) latchkit.Middleware {
	c := newConfig(opts, DefaultLinger)
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			if req.Try || len(req.Channels) == 0 || req.Backend == nil {
				return next(ctx, req)
			}
			// The shared Hub is looked up and joined in one step by the
			// first wait (JoinShared), not now: the one found now could go
			// idle during the first attempt, and joining it then would open
			// a second subscription beside the registry's new Hub.
			w := &waiter{h: c.hub, opts: opts}
			if c.hub == nil {
				// Already subscribed (the channel lingers, or another
				// waiter of this process uses it): join before the first
				// attempt, so that a release during it is not missed and
				// the first wait can sleep at once.
				if jw := JoinLive(req.Backend, req.WakeID, req.Channels); jw != nil {
					w.w, w.live = jw, true
				}
			}
			prev := req.Waiter
			req.Waiter = w
			defer func() {
				req.Waiter = prev
				if w.w != nil {
					w.w.Leave()
				}
			}()
			return next(ctx, req)
		}
	}
}

// Option configures WakeOnRelease and Hubs.
type Option func(*config)

type config struct {
	hub    *Hub
	linger time.Duration
}

func newConfig(opts []Option, linger time.Duration) config {
	c := config{linger: linger}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	c.linger = max(c.linger, 0)
	return c
}

// WithHub makes WakeOnRelease use h instead of the process's shared Hub of
// the request's backend.
func WithHub(h *Hub) Option { return func(c *config) { c.hub = h } }

// WithLinger sets how long a Hub keeps a channel subscribed after its last
// waiter left, and its connection open after its last channel went (default
// DefaultLinger for shared Hubs, 0 for NewHub). It applies to the Hub it
// creates: for WakeOnRelease, the backend's shared Hub when this middleware
// is the first to need it.
func WithLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

type waiter struct {
	h    *Hub // nil: the backend's shared Hub, found by the first Wait
	opts []Option
	w    *Waiter
	live bool
}

func (w *waiter) Wait(ctx context.Context, req *latchkit.Request, fallback time.Duration) error {
	if w.w == nil {
		// Subscribe, then let the caller attempt again at once: a release
		// between its failed attempt and now would otherwise go unseen.
		// Do not wait longer for the subscription than the caller would
		// have slept anyway.
		jctx, cancel := context.WithTimeout(ctx, max(bound(fallback, req.WaitHint), 50*time.Millisecond))
		if w.h == nil {
			w.w, w.live = JoinShared(jctx, req.Backend, req.WakeID, req.Channels, w.opts...)
		} else {
			w.w, w.live = w.h.JoinAs(jctx, req.WakeID, req.Channels...)
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if w.live {
			return nil
		}
	} else {
		w.live = w.w.Live()
	}
	d := bound(fallback, req.WaitHint)
	if w.live {
		// Sure to hear of a release: sleep until the holder's TTL runs out
		// (plus a little, so as not to beat the server's own expiry), and
		// let the policy's delay bound the wait only when no TTL is known.
		d = fallback
		if req.WaitHint > 0 {
			d = req.WaitHint + time.Millisecond + rand.N(req.WaitHint/16+time.Millisecond)
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.w.C():
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bound is the fallback delay, cut short when the holder's TTL ends sooner.
func bound(fallback, hint time.Duration) time.Duration {
	if hint > 0 && hint < fallback {
		return hint
	}
	return fallback
}

package pubsub

import (
	"context"
	"math/rand/v2"
	"time"
)

// Wake lets one waiting acquisition sleep until a release instead of
// polling. The wait loop of a primitive makes one per waiting Lock or
// Acquire and calls Wait between two attempts that found the primitive
// held:
//
//   - when the Hub already has the channels subscribed
//     (they linger after a wait, or another waiter of the process uses
//     them), NewWake joins at once, at no network cost, and the first Wait
//     sleeps;
//   - otherwise the first Wait subscribes the channels through the Hub
//     and returns at once, so that the next attempt runs with the
//     subscription in place and no release can slip between a failed
//     attempt and the sleep that follows it;
//   - later waits end on a release message (one message wakes as many
//     local waiters as it freed holders, oldest first; a hand-over wakes
//     only the waiter it names, see Target), when the holder's remaining
//     TTL runs out (the hint), or when ctx is done;
//   - while the subscription is down, waits fall back to the retry
//     policy's delay, capped by the hint.
//
// A Wake is used by one goroutine; Close must be called when the wait is
// over.
type Wake struct {
	h     *Hub
	id    string
	chans []string
	w     *Waiter
	live  bool
}

// NewWake prepares the wake-ups of one waiting acquisition through h:
// messages on channels, and messages targeted at id (Target(id); "" for
// none). It never waits for the network. A nil h gives no wake-ups: every
// Wait sleeps as the retry policy would.
func NewWake(h *Hub, id string, channels []string) *Wake {
	k := &Wake{h: h, id: id, chans: channels}
	if h != nil {
		// Already subscribed (the channel lingers, or another waiter of
		// this Hub uses it): join before the first attempt, so that a
		// release during it is not missed and the first wait can sleep.
		if jw := h.JoinLive(id, channels); jw != nil {
			k.w, k.live = jw, true
		}
	}
	return k
}

// Wait blocks until a release may have freed the primitive, until the
// holder's remaining time (hint; 0 when unknown) has run out, or until ctx
// is done (returning ctx.Err()). fallback is the delay the retry policy
// would sleep without notifications: the wait is that long at most while
// notifications are not live, and when no hint is known. The first call
// may return at once: it subscribes, and an attempt made after it cannot
// miss a release.
func (k *Wake) Wait(ctx context.Context, hint, fallback time.Duration) error {
	if k.h == nil {
		return Sleep(ctx, bound(fallback, hint))
	}
	if k.w == nil {
		// Subscribe, then let the caller attempt again at once: a release
		// between its failed attempt and now would otherwise go unseen.
		// Do not wait longer for the subscription than the caller would
		// have slept anyway.
		jctx, cancel := context.WithTimeout(ctx, max(bound(fallback, hint), 50*time.Millisecond))
		k.w, k.live = k.h.JoinAs(jctx, k.id, k.chans...)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if k.live {
			return nil
		}
	} else {
		k.live = k.w.Live()
	}
	d := bound(fallback, hint)
	if k.live {
		// Sure to hear of a release: sleep until the holder's TTL runs out
		// (plus a little, so as not to beat the server's own expiry), and
		// let the policy's delay bound the wait only when no TTL is known.
		d = fallback
		if hint > 0 {
			d = hint + time.Millisecond + rand.N(hint/16+time.Millisecond)
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-k.w.C():
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Handed returns, and forgets, what the last release message targeted at
// this wait's id said after the id (see Target and Waiter.Handed): the
// details of a hand-over to it. "" when none came since the last call.
func (k *Wake) Handed() string {
	if k.w == nil {
		return ""
	}
	return k.w.Handed()
}

// Close leaves the Hub: the wait is over.
func (k *Wake) Close() {
	if k.w != nil {
		k.w.Leave()
		k.w = nil
	}
}

// Option configures a Hub.
type Option func(*config)

type config struct {
	linger      time.Duration
	callTimeout time.Duration
}

// DefaultCallTimeout bounds each call a Hub makes to its backend (a
// subscription's dial and SUBSCRIBE, an UNSUBSCRIBE) when WithCallTimeout
// is not given.
const DefaultCallTimeout = 5 * time.Second

func newConfig(opts []Option, linger time.Duration) config {
	c := config{linger: linger, callTimeout: DefaultCallTimeout}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	c.linger = max(c.linger, 0)
	if c.callTimeout <= 0 {
		c.callTimeout = DefaultCallTimeout
	}
	return c
}

// WithLinger sets how long a Hub keeps a channel subscribed after its last
// waiter left, and its connection open after its last channel went
// (default 0).
func WithLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// WithCallTimeout bounds each call a Hub makes to its backend (default
// DefaultCallTimeout): a call that has not answered by then fails (a
// subscription is dialed again, with backoff), and once the Hub is shut
// down the call in flight ends within it, whatever the driver does with a
// cancelled context.
func WithCallTimeout(d time.Duration) Option { return func(c *config) { c.callTimeout = d } }

// Sleep waits d, or until ctx is done (returning ctx.Err()).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
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

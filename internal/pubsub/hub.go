// Package pubsub delivers release notifications to waiting acquisitions.
//
// A Hub keeps ONE subscription (one connection) per backend, shared by every
// waiter in the process: a channel is subscribed when its first waiter comes
// and stays subscribed for a linger period (DefaultLinger) after its last
// waiter left, so that a process that waits, holds and waits again does not
// pay a SUBSCRIBE (or a new connection) for every wait; the connection is
// closed once no channel is left. A release message carries how many holders
// it freed ("1" for a mutex); the Hub wakes that many local waiters, oldest
// first, instead of every waiter: the others would only lose the race. A
// release that hands the primitive over to one queued waiter names it
// (Target): only that waiter wakes, in whichever process it waits.
//
// Notifications are an optimization; the timer is the floor. When the
// subscription's connection drops, every waiter is woken to retry and falls
// back to its timer while the Hub re-subscribes in the background; a lost
// message costs latency, never correctness.
package pubsub

import (
	"context"
	"sync"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// DefaultLinger is how long a Client's Hub keeps a channel subscribed, and
// then its connection open, after the channel's last waiter left.
const DefaultLinger = 10 * time.Second

// Hub shares one subscription of a backend between all the waiters of a
// process. The zero value is not usable; see NewHub.
type Hub struct {
	b           backend.Backend
	onIdle      func(*Hub) // called without mu once the Hub has nothing left
	linger      time.Duration
	callTimeout time.Duration // WithCallTimeout

	mu       sync.Mutex
	sub      backend.Subscription // nil while disconnected
	healthy  bool                 // sub is up
	dialing  bool                 // connect() is running
	working  bool                 // work() is running
	ops      []op                 // subscription changes, in decision order
	channels map[string]*channel
	gen      uint64 // incremented by every new or abandoned subscription
	lost     error  // set when the subscription being dialed dropped before connect() installed it
	closed   bool
	sweep    *time.Timer // unsubscribes channels that lingered long enough; nil when not armed

	// ctx ends at Close: it cuts short a dial and the pause between two.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the Hub's goroutines: work, connect, closing a dropped subscription
}

type channel struct {
	waiters []*Waiter     // in order of arrival
	ready   chan struct{} // closed once subscribed (or known to have failed)
	gen     uint64        // subscription the channel is (being) added on
	err     error         // why adding it failed, if it did
	idle    time.Time     // when its last waiter left; zero while it has waiters
}

// op is a SUBSCRIBE (add) or UNSUBSCRIBE decided under mu; work() sends them
// in the order they were decided, so that a quick leave-and-rejoin can never
// end unsubscribed. An add carries the channels it subscribes: only its own
// confirmation makes them ready, never that of an earlier add of the same
// name that a leave-and-rejoin has since undone.
type op struct {
	add   bool
	names []string
	chans []*channel // for an add: the channels named, in order
	gen   uint64
}

// NewHub returns a Hub for b, which its maker must Close (or Shutdown).
// Only WithLinger applies (default 0: a channel is unsubscribed as soon as
// its last waiter leaves; a primitives.Client's Hub lingers DefaultLinger).
func NewHub(b backend.Backend, opts ...Option) *Hub {
	cfg := newConfig(opts, 0)
	h := &Hub{b: b, channels: map[string]*channel{}, linger: cfg.linger, callTimeout: cfg.callTimeout}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// Waiter is one waiting acquisition's registration with a Hub: the channels
// it listens to and the signal that wakes it.
type Waiter struct {
	h        *Hub
	id       string // for targeted wake-ups (JoinAs); "" for none
	channels []string
	c        chan struct{} // capacity 1: a wake-up is never lost, never doubled
	left     bool
	heard    func(channel, payload string) // Listen's: every message, under the Hub's lock
	// handed is what followed the id in the last message targeted at
	// this waiter (see Target), until Handed takes it; guarded by the
	// Hub's lock.
	handed string
	// dropped says a subscription the waiter was on dropped since the
	// last Dropped; guarded by the Hub's lock.
	dropped bool
}

// Handed returns, and forgets, what followed the waiter's id in the last
// release message targeted at it (Target(id) + " " + details): a
// hand-over tells its new holder what it needs there, such as the grant's
// fence. "" when no such message came since the last call, or it said
// nothing more.
func (w *Waiter) Handed() string {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	d := w.handed
	w.handed = ""
	return d
}

// Dropped reports, and forgets, whether a subscription the waiter was on
// dropped since the last call: messages may have been lost, also when the
// Hub has subscribed again since (Live is then true).
func (w *Waiter) Dropped() bool {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	d := w.dropped
	w.dropped = false
	return d
}

// Join registers a waiter for channels and subscribes them: once Join
// returns true, a release published on any of them wakes a waiter of this
// Hub, and the waiter has no wake-up pending: the caller is expected to make
// an attempt right after Join, which sees any earlier release. It returns
// false when notifications are not live (the server could not be reached,
// or ctx ended first): the waiter is still registered and is woken once its
// channels are subscribed, but the caller must poll meanwhile. Leave must
// be called when the wait is over.
func (h *Hub) Join(ctx context.Context, channels ...string) (*Waiter, bool) {
	return h.JoinAs(ctx, "", channels...)
}

// JoinAs is Join for a waiter named id: besides the usual wake-ups, a
// release message whose payload is Target(id) wakes it, and only it.
func (h *Hub) JoinAs(ctx context.Context, id string, channels ...string) (*Waiter, bool) {
	w, ready := h.register(id, nil, channels)
	return h.await(ctx, w, ready)
}

// Listen is Join for a listener that wants the messages themselves, not
// only wake-ups: heard is called with the channel and payload of every
// message on channels, in the order the subscription received them, from
// the Hub's receive loop with its lock held (it must not block nor call
// the Hub). C still receives after messages, and when the subscription
// drops (Dropped then reports it: messages may have been lost).
func (h *Hub) Listen(ctx context.Context, heard func(channel, payload string), channels ...string) (*Waiter, bool) {
	w, ready := h.register("", heard, channels)
	return h.await(ctx, w, ready)
}

// register adds a waiter for channels and starts whatever subscribing they
// need; it returns the channels' ready signals to wait on.
func (h *Hub) register(id string, heard func(string, string), channels []string) (*Waiter, []chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.registerLocked(id, heard, channels)
}

// registerLocked is register with mu held.
func (h *Hub) registerLocked(id string, heard func(string, string), channels []string) (*Waiter, []chan struct{}) {
	w := &Waiter{h: h, id: id, channels: channels, c: make(chan struct{}, 1), heard: heard}
	var ready []chan struct{}
	var fresh []string
	var freshChans []*channel
	for _, name := range channels {
		ch := h.channels[name]
		if ch == nil {
			ch = &channel{ready: make(chan struct{})}
			h.channels[name] = ch
		}
		ch.idle = time.Time{}
		ch.waiters = append(ch.waiters, w)
		ready = append(ready, ch.ready)
		if h.sub != nil && ch.gen != h.gen {
			ch.gen = h.gen
			fresh = append(fresh, name)
			freshChans = append(freshChans, ch)
		}
	}
	if h.closed {
		return w, nil
	}
	switch {
	case h.sub == nil && !h.dialing:
		h.dialing = true
		h.wg.Go(h.connect)
	case len(fresh) > 0:
		h.enqueueLocked(op{add: true, names: fresh, chans: freshChans, gen: h.gen})
	}
	return w, ready
}

// await waits for a registered waiter's channels to be subscribed.
func (h *Hub) await(ctx context.Context, w *Waiter, ready []chan struct{}) (*Waiter, bool) {
	if ready == nil {
		return w, false // closed Hub
	}
	for _, r := range ready {
		select {
		case <-r:
		case <-ctx.Done():
			return w, false
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.liveLocked(w) {
		return w, false
	}
	// The caller attempts once Join returns, which sees any release made
	// so far: a wake-up given meanwhile (the Hub tells every waiter to
	// retry when it subscribes) would only cost a useless attempt.
	select {
	case <-w.c:
	default:
	}
	return w, true
}

// C receives when a release may have freed what the waiter waits for.
func (w *Waiter) C() <-chan struct{} { return w.c }

// Live reports whether the Hub's subscription is up and the server has
// confirmed the waiter's channels on it, so that a release is sure to be
// signalled.
func (w *Waiter) Live() bool {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.liveLocked(w)
}

// liveLocked reports whether every channel of w is subscribed on the
// current, healthy subscription.
func (h *Hub) liveLocked(w *Waiter) bool {
	if !h.healthy || w.left {
		return false
	}
	for _, name := range w.channels {
		if !h.chanLiveLocked(name) {
			return false
		}
	}
	return true
}

// chanLiveLocked reports whether channel name is confirmed subscribed on
// the current subscription.
func (h *Hub) chanLiveLocked(name string) bool {
	ch := h.channels[name]
	return ch != nil && ch.gen == h.gen && ch.err == nil && isClosed(ch.ready)
}

// Leave unregisters the waiter. A wake-up it received but did not use is
// handed to the next waiter, so that leaving never swallows a release.
// Channels left without waiters are unsubscribed once they have lingered
// for the Hub's linger period, and the connection is closed when none is
// left. Leave is idempotent.
func (w *Waiter) Leave() {
	h := w.h
	h.mu.Lock()
	if w.left {
		h.mu.Unlock()
		return
	}
	w.left = true
	unused := false
	select {
	case <-w.c:
		unused = true
	default:
	}
	var gone []string
	for _, name := range w.channels {
		ch := h.channels[name]
		if ch == nil {
			continue
		}
		for i, x := range ch.waiters {
			if x == w {
				ch.waiters = append(ch.waiters[:i], ch.waiters[i+1:]...)
				break
			}
		}
		if unused {
			h.wakeLocked(ch, 1)
		}
		if len(ch.waiters) == 0 {
			if h.linger > 0 && !h.closed && h.sub != nil {
				ch.idle = time.Now()
				h.armSweepLocked(h.linger)
				continue
			}
			delete(h.channels, name)
			gone = append(gone, name)
		}
	}
	h.settleLocked(gone)
}

// settleLocked unsubscribes the channels gone, which have been removed from
// h.channels, or, when no channel is left, closes the subscription; then it
// unlocks mu and, if the Hub has nothing left, tells onIdle.
func (h *Hub) settleLocked(gone []string) {
	var sub backend.Subscription
	if len(h.channels) == 0 {
		sub = h.detachLocked()
	} else if h.sub != nil && len(gone) > 0 {
		h.enqueueLocked(op{names: gone, gen: h.gen})
	}
	idle := len(h.channels) == 0 && !h.dialing && !h.working
	h.mu.Unlock()
	// Out of the registry before the connection closes, so that whoever
	// sees the connection gone also finds the Hub gone (a waiter arriving
	// in between makes a fresh Hub rather than join one being closed).
	if idle && h.onIdle != nil {
		h.onIdle(h)
	}
	if sub != nil {
		_ = sub.Close() // after mu: closing waits for the receive loop, which may wait for mu
	}
}

// armSweepLocked makes sure a sweep runs within d.
func (h *Hub) armSweepLocked(d time.Duration) {
	if h.sweep == nil {
		h.sweep = time.AfterFunc(d, h.sweepIdle)
	}
}

// sweepIdle unsubscribes the channels that have had no waiter for the
// linger period (closing the connection when none is left) and arms itself
// again for those that have not yet.
func (h *Hub) sweepIdle() {
	h.mu.Lock()
	h.sweep = nil
	now := time.Now()
	var gone []string
	var next time.Duration
	for name, ch := range h.channels {
		if len(ch.waiters) > 0 || ch.idle.IsZero() {
			continue
		}
		if left := h.linger - now.Sub(ch.idle); left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		delete(h.channels, name)
		gone = append(gone, name)
	}
	if next > 0 && !h.closed {
		h.armSweepLocked(next)
	}
	h.settleLocked(gone)
}

// dropIdleLocked forgets the channels that nobody waits on, when the
// subscription they were on is gone: nobody needs them subscribed again.
func (h *Hub) dropIdleLocked() {
	for name, ch := range h.channels {
		if len(ch.waiters) == 0 {
			delete(h.channels, name)
		}
	}
}

// Close closes the Hub's subscription and wakes its waiters, which fall back
// to their timers. It does not wait for the Hub's goroutines (Shutdown
// does).
func (h *Hub) Close() error {
	h.mu.Lock()
	h.closed = true
	h.cancel()
	if h.sweep != nil {
		h.sweep.Stop()
		h.sweep = nil
	}
	for _, ch := range h.channels {
		h.wakeLocked(ch, len(ch.waiters))
	}
	sub := h.detachLocked()
	h.mu.Unlock()
	if sub != nil {
		return sub.Close()
	}
	return nil
}

// detachLocked takes the subscription out of the Hub for the caller to close
// once mu is released (closing waits for the receive loop, which may be
// waiting for mu).
func (h *Hub) detachLocked() backend.Subscription {
	sub := h.sub
	h.sub = nil
	h.healthy = false
	h.gen++
	return sub
}

// Shutdown closes the Hub and waits for its goroutines to end.
func (h *Hub) Shutdown() {
	_ = h.Close()
	h.wg.Wait()
}

// JoinLive joins h only if every channel is already subscribed on its live
// subscription (a lingering channel, or one another waiter uses): it
// returns nil otherwise, and subscribes nothing. It never waits for the
// network, so a caller can join before its first attempt: a release during
// that attempt then wakes it, and it need not attempt again at once after
// subscribing.
func (h *Hub) JoinLive(id string, channels []string) *Waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.healthy || h.closed {
		return nil
	}
	for _, name := range channels {
		if !h.chanLiveLocked(name) {
			return nil
		}
	}
	w, _ := h.registerLocked(id, nil, channels) // every channel is live: nothing to subscribe
	return w
}

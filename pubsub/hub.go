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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/registry"
)

// The payloads of release messages. Scripts publish them (package
// primitives puts these very constants into its Lua), and the Hub wakes
// waiters by them.
const (
	// WakeOne is the payload of a release that freed one holder: it wakes
	// one local waiter of the channel. Any positive count n wakes n.
	WakeOne = "1"
	// WakeAll is the payload of a release message that frees every waiter
	// (a writer's release of an RWLock, a forced release).
	WakeAll = "*"
	// TargetPrefix starts the payload of a targeted release message (see
	// Target).
	TargetPrefix = "="
)

// Target is the payload of a release message that wakes only the waiter that
// joined with id (see JoinAs): a release that handed the primitive over to
// that waiter. Processes without such a waiter ignore it.
func Target(id string) string { return TargetPrefix + id }

// Inbox is the channel on which a release hands a primitive over to a
// waiter of this process on b (see Target): the primitive's release channel
// plus an id of b unique in the process and a random id of the process, so
// that a hand-over's message reaches one connection, not every process
// subscribed to the release channel. It is stable for b's life.
func Inbox(b backend.Backend, channel string) string {
	id := processID
	if v := reflect.ValueOf(b); v.Kind() == reflect.Pointer {
		id += "." + strconv.FormatUint(uint64(v.Pointer()), 36)
	}
	return channel + ":to:" + id
}

// processID tells this process's inboxes from other processes'. Set once.
var processID = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// DefaultLinger is how long a shared Hub keeps a channel subscribed, and
// then its connection open, after the channel's last waiter left.
const DefaultLinger = 10 * time.Second

// Hub shares one subscription of a backend between all the waiters of a
// process. The zero value is not usable; see NewHub.
type Hub struct {
	b      backend.Backend
	onIdle func(*Hub) // called without mu once the Hub has nothing left
	linger time.Duration

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

// NewHub returns a Hub for b. Most users never call it: NewWake finds
// the process's shared Hub for a backend by itself (see For). A Hub made
// here is private to the caller, who must Close it. Only WithLinger applies
// (default 0: a channel is unsubscribed as soon as its last waiter leaves).
func NewHub(b backend.Backend, opts ...Option) *Hub {
	return &Hub{b: b, channels: map[string]*channel{}, linger: newConfig(opts, 0).linger}
}

// hubs holds the Hub of each backend that has waiters right now. An entry
// exists only while its Hub has channels, so nothing outlives a wait.
var hubs registry.Registry[*Hub]

// For returns the process's shared Hub for b, creating it on first use with
// opts (WithLinger; default DefaultLinger). The Hub drops out of the
// registry (and closes its connection) once its last channel has lingered
// unused for the linger period.
func For(b backend.Backend, opts ...Option) *Hub {
	if b == nil || !registry.Shareable(b) {
		// A backend that cannot be a map key gets a Hub of its own:
		// correct, merely without sharing (and without lingering, since
		// nobody would close it).
		return NewHub(b)
	}
	hubs.Lock()
	defer hubs.Unlock()
	return lookupLocked(b, opts)
}

// lookupLocked returns b's shared Hub, creating it; hubs is locked.
func lookupLocked(b backend.Backend, opts []Option) *Hub {
	return hubs.GetLocked(b, func() *Hub {
		h := NewHub(b)
		h.linger = newConfig(opts, DefaultLinger).linger
		h.onIdle = func(h *Hub) {
			hubs.Lock()
			defer hubs.Unlock()
			h.mu.Lock()
			idle := len(h.channels) == 0
			h.mu.Unlock()
			if idle {
				hubs.DeleteLocked(b, h)
			}
		}
		return h
	})
}

// Waiter is one waiting acquisition's registration with a Hub: the channels
// it listens to and the signal that wakes it.
type Waiter struct {
	h        *Hub
	id       string // for targeted wake-ups (JoinAs); "" for none
	channels []string
	c        chan struct{} // capacity 1: a wake-up is never lost, never doubled
	left     bool
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
	w, ready := h.register(id, channels)
	return h.await(ctx, w, ready)
}

// JoinShared is JoinAs on the process's shared Hub of b (see For, which
// opts are for), looked up and joined in one step, so that the Hub cannot
// go idle and leave the registry in between (a second Hub, and a second
// subscription, would follow).
func JoinShared(ctx context.Context, b backend.Backend, id string, channels []string, opts ...Option) (*Waiter, bool) {
	if b == nil || !registry.Shareable(b) {
		return For(b).JoinAs(ctx, id, channels...)
	}
	hubs.Lock()
	h := lookupLocked(b, opts)
	w, ready := h.register(id, channels)
	hubs.Unlock()
	return h.await(ctx, w, ready)
}

// JoinLive joins the process's shared Hub of b only if every channel is
// already subscribed on its live subscription (a lingering channel, or one
// another waiter uses): it returns nil otherwise, and subscribes nothing.
// It never waits for the network, so a caller can join before its first
// attempt: a release during that attempt then wakes it, and it need not
// attempt again at once after subscribing.
func JoinLive(b backend.Backend, id string, channels []string) *Waiter {
	if b == nil || !registry.Shareable(b) {
		return nil
	}
	hubs.Lock()
	defer hubs.Unlock()
	h, ok := hubs.LookupLocked(b)
	if !ok {
		return nil
	}
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
	w, _ := h.registerLocked(id, channels) // every channel is live: nothing to subscribe
	return w
}

// register adds a waiter for channels and starts whatever subscribing they
// need; it returns the channels' ready signals to wait on.
func (h *Hub) register(id string, channels []string) (*Waiter, []chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.registerLocked(id, channels)
}

// registerLocked is register with mu held.
func (h *Hub) registerLocked(id string, channels []string) (*Waiter, []chan struct{}) {
	w := &Waiter{h: h, id: id, channels: channels, c: make(chan struct{}, 1)}
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
		go h.connect()
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
	if sub != nil {
		_ = sub.Close() // after mu: closing waits for the receive loop, which may wait for mu
	}
	if idle && h.onIdle != nil {
		h.onIdle(h)
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
// to their timers. Only Hubs made by NewHub need closing.
func (h *Hub) Close() error {
	h.mu.Lock()
	h.closed = true
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

func (h *Hub) enqueueLocked(o op) {
	h.ops = append(h.ops, o)
	if !h.working {
		h.working = true
		go h.work()
	}
}

// work sends queued subscription changes in order, merging runs of the same
// kind into one command.
func (h *Hub) work() {
	for {
		h.mu.Lock()
		if len(h.ops) == 0 || h.sub == nil {
			h.ops = nil
			h.working = false
			idle := len(h.channels) == 0 && !h.dialing
			h.mu.Unlock()
			if idle && h.onIdle != nil {
				h.onIdle(h)
			}
			return
		}
		o := h.ops[0]
		h.ops = h.ops[1:]
		for len(h.ops) > 0 && h.ops[0].add == o.add && h.ops[0].gen == o.gen {
			o.names = append(o.names, h.ops[0].names...)
			o.chans = append(o.chans, h.ops[0].chans...)
			h.ops = h.ops[1:]
		}
		sub, gen := h.sub, h.gen
		h.mu.Unlock()
		if o.gen != gen {
			continue // meant for a subscription that is gone
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		if o.add {
			err = sub.Add(ctx, o.names...)
		} else {
			err = sub.Remove(ctx, o.names...)
		}
		cancel()
		if !o.add {
			continue // a failure shows up as a dropped subscription
		}
		h.mu.Lock()
		for _, ch := range o.chans {
			if ch.gen != gen {
				continue
			}
			ch.err = err
			closeOnce(ch.ready)
			if err == nil {
				// Waiters that stopped waiting for the subscription
				// poll: a release may have slipped past them.
				h.wakeLocked(ch, len(ch.waiters))
			}
		}
		h.mu.Unlock()
	}
}

// connect opens a subscription with every current channel, retrying with
// backoff while there are waiters. It runs in its own goroutine.
func (h *Hub) connect() {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(10*time.Millisecond),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0))
	for {
		h.mu.Lock()
		h.dropIdleLocked() // not worth a connection of their own
		if h.closed || len(h.channels) == 0 {
			h.dialing = false
			idle := len(h.channels) == 0 && !h.working
			h.mu.Unlock()
			if idle && h.onIdle != nil {
				h.onIdle(h)
			}
			return
		}
		h.gen++
		gen := h.gen
		h.lost = nil
		names := make([]string, 0, len(h.channels))
		for name, ch := range h.channels {
			names = append(names, name)
			ch.gen = gen
		}
		h.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sub, err := h.b.Subscribe(ctx, backend.Handler{
			Message: h.deliver,
			Dropped: func(err error) { h.dropped(gen, err) },
		})
		if err == nil {
			if err = sub.Add(ctx, names...); err != nil {
				_ = sub.Close()
			}
		}
		cancel()

		h.mu.Lock()
		if err == nil && h.lost != nil {
			// The connection died before we could install it: a failed
			// dial (its Dropped, which came first, was ignored).
			err = h.lost
			h.mu.Unlock()
			_ = sub.Close()
			h.mu.Lock()
		}
		if err == nil && (h.closed || len(h.channels) == 0 || h.gen != gen) {
			// Everyone left while we dialed.
			h.mu.Unlock()
			_ = sub.Close()
			continue
		}
		if err == nil {
			h.sub = sub
			h.healthy = true
			h.dialing = false
			var late []string
			var lateChans []*channel
			for name, ch := range h.channels {
				if ch.gen != gen { // arrived while we dialed
					ch.gen = gen
					late = append(late, name)
					lateChans = append(lateChans, ch)
					continue
				}
				ch.err = nil
				closeOnce(ch.ready)
				// A release may have happened while we were not listening.
				h.wakeLocked(ch, len(ch.waiters))
			}
			// Channels whose last waiter left while we dialed were
			// subscribed all the same: unsubscribe them.
			var gone []string
			for _, name := range names {
				if h.channels[name] == nil {
					gone = append(gone, name)
				}
			}
			if len(gone) > 0 {
				h.enqueueLocked(op{names: gone, gen: gen})
			}
			if len(late) > 0 {
				h.enqueueLocked(op{add: true, names: late, chans: lateChans, gen: gen})
			}
			h.mu.Unlock()
			return
		}
		// Tell the waiters that they must poll until we are back.
		for _, ch := range h.channels {
			ch.err = err
			closeOnce(ch.ready)
		}
		h.mu.Unlock()
		if errors.Is(err, backend.ErrClosed) {
			h.mu.Lock()
			h.dialing = false
			h.mu.Unlock()
			return
		}
		t := time.NewTimer(b.NextBackOff())
		<-t.C
	}
}

// dropped handles the loss of subscription gen: wake everyone (they retry
// and fall back to polling) and reconnect while there are waiters.
func (h *Hub) dropped(gen uint64, err error) {
	h.mu.Lock()
	if gen != h.gen {
		h.mu.Unlock()
		return
	}
	if h.sub == nil {
		// connect() has not installed the subscription yet: tell it, or it
		// would keep a dead subscription and believe it live.
		h.lost = err
		h.mu.Unlock()
		return
	}
	sub := h.detachLocked()
	h.dropIdleLocked()
	for _, ch := range h.channels {
		ch.err = err
		closeOnce(ch.ready) // joiners in flight poll
		ch.ready = make(chan struct{})
		h.wakeLocked(ch, len(ch.waiters))
	}
	if !h.closed && len(h.channels) > 0 && !h.dialing {
		h.dialing = true
		go h.connect()
	}
	idle := len(h.channels) == 0 && !h.dialing && !h.working
	h.mu.Unlock()
	// Close from another goroutine: we run on the receive loop that Close
	// waits for.
	go func() { _ = sub.Close() }()
	if idle && h.onIdle != nil {
		h.onIdle(h)
	}
}

// deliver wakes the waiters a release message frees.
func (h *Hub) deliver(m backend.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.channels[m.Channel]
	if ch == nil {
		return
	}
	if id, ok := strings.CutPrefix(m.Payload, TargetPrefix); ok {
		for _, w := range ch.waiters {
			if w.id == id {
				w.signal()
				return
			}
		}
		return
	}
	n, err := strconv.Atoi(m.Payload)
	if err != nil || n <= 0 {
		n = len(ch.waiters)
	}
	h.wakeLocked(ch, n)
}

// wakeLocked signals up to n waiters of ch, oldest first, skipping those
// that already have a wake-up pending.
func (h *Hub) wakeLocked(ch *channel, n int) {
	for _, w := range ch.waiters {
		if n <= 0 {
			return
		}
		if w.signal() {
			n--
		}
	}
}

// signal gives w a wake-up unless one is already pending; it reports
// whether it did.
func (w *Waiter) signal() bool {
	select {
	case w.c <- struct{}{}:
		return true
	default:
		return false
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

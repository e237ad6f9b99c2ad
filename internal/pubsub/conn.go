package pubsub

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/latchkit/latchkit/backend"
)

// The Hub's connection: subscription changes sent in order, the connection
// made and remade, messages delivered to waiters.

// enqueueLocked queues a subscription change for work to send.
func (h *Hub) enqueueLocked(o op) {
	h.ops = append(h.ops, o)
	if !h.working {
		h.working = true
		h.wg.Go(h.work)
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
		ctx, cancel := context.WithTimeout(h.ctx, h.callTimeout)
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

		ctx, cancel := context.WithTimeout(h.ctx, h.callTimeout)
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
		select {
		case <-t.C:
		case <-h.ctx.Done():
			t.Stop()
		}
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
		for _, w := range ch.waiters {
			w.dropped = true
		}
		h.wakeLocked(ch, len(ch.waiters))
	}
	if !h.closed && len(h.channels) > 0 && !h.dialing {
		h.dialing = true
		h.wg.Go(h.connect)
	}
	idle := len(h.channels) == 0 && !h.dialing && !h.working
	h.mu.Unlock()
	// Close from another goroutine: we run on the receive loop that Close
	// waits for.
	h.wg.Go(func() { _ = sub.Close() })
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
	for _, w := range ch.waiters {
		if w.heard != nil {
			w.heard(m.Channel, m.Payload)
		}
	}
	if target, ok := strings.CutPrefix(m.Payload, TargetPrefix); ok {
		id, details, _ := strings.Cut(target, " ")
		for _, w := range ch.waiters {
			if w.id == id {
				w.handed = details
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

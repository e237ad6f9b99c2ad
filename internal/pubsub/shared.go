package pubsub

import (
	"context"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/registry"
)

// The process's shared Hubs: one per backend, found by every waiter of the
// process, dropped once idle.

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
	w, ready := h.register(id, nil, channels)
	hubs.Unlock()
	return h.await(ctx, w, ready)
}

// ListenShared is Listen on the process's shared Hub of b (see
// JoinShared).
func ListenShared(ctx context.Context, b backend.Backend, heard func(channel, payload string), channels ...string) (*Waiter, bool) {
	if b == nil || !registry.Shareable(b) {
		return For(b).Listen(ctx, heard, channels...)
	}
	hubs.Lock()
	h := lookupLocked(b, nil)
	w, ready := h.register("", heard, channels)
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
	w, _ := h.registerLocked(id, nil, channels) // every channel is live: nothing to subscribe
	return w
}

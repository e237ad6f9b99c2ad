package goredis

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
)

// Subscribe opens a pub/sub connection with no channels. Messages and the
// loss of the connection are delivered to h from one goroutine. It returns
// by ctx's end (see the package doc); a connection still being opened then
// is closed once it is.
func (b *Backend) Subscribe(ctx context.Context, h backend.Handler) (backend.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	open := func() (*redis.PubSub, error) {
		ps := b.c.Subscribe(context.WithoutCancel(ctx))
		// go-redis connects lazily; a PING proves the connection up
		// front so that an unreachable server fails here and not in the
		// receive loop.
		if err := ps.Ping(ctx); err != nil {
			_ = ps.Close()
			return nil, wrap(ctx, err)
		}
		return ps, nil
	}
	var ps *redis.PubSub
	var err error
	if b.direct {
		ps, err = open()
	} else {
		ps, err = backend.Await(ctx, open, func(ps *redis.PubSub, _ error) {
			if ps != nil {
				_ = ps.Close() // opened after Subscribe gave up on it
			}
		})
	}
	if err != nil {
		return nil, err
	}
	s := &subscription{ps: ps, h: h, health: b.health, done: make(chan struct{}), pending: map[string][]chan struct{}{}}
	go s.loop()
	return s, nil
}

type subscription struct {
	ps     *redis.PubSub
	h      backend.Handler
	health time.Duration
	done   chan struct{}

	mu      sync.Mutex
	closed  bool
	dead    error
	pending map[string][]chan struct{} // "subscribe ch" -> calls awaiting the server's confirmation
}

// Add subscribes to channels and returns once the server confirmed each.
func (s *subscription) Add(ctx context.Context, channels ...string) error {
	return s.change(ctx, "subscribe", channels, s.ps.Subscribe)
}

// Remove unsubscribes from channels and returns once the server confirmed
// each: no message of theirs is delivered after it returns.
func (s *subscription) Remove(ctx context.Context, channels ...string) error {
	return s.change(ctx, "unsubscribe", channels, s.ps.Unsubscribe)
}

// change sends a (UN)SUBSCRIBE and waits for the server's confirmation of
// every channel, which the receive loop hands over through s.pending.
func (s *subscription) change(ctx context.Context, kind string, channels []string, send func(context.Context, ...string) error) error {
	if len(channels) == 0 {
		return nil // go-redis would read an empty UNSUBSCRIBE as "all channels"
	}
	keys := make([]string, len(channels))
	waits := make([]chan struct{}, len(channels))
	s.mu.Lock()
	if err := s.errLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	for i, ch := range channels {
		keys[i] = kind + " " + ch
		waits[i] = make(chan struct{})
		s.pending[keys[i]] = append(s.pending[keys[i]], waits[i])
	}
	s.mu.Unlock()
	// Sent on a goroutine of its own whatever the client's options: go-redis
	// holds the subscription's lock while its receive loop redials a broken
	// connection (for up to the dial and read timeouts), and send waits for
	// that lock. A send given up on may still reach the server; the
	// confirmation it gets then finds nobody waiting.
	channels = slices.Clone(channels) // the send may outlive this call
	_, err := backend.Await(ctx, func() (struct{}, error) {
		return struct{}{}, send(ctx, channels...)
	}, nil)
	if err != nil {
		s.forget(keys, waits)
		return wrap(ctx, err)
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-s.done:
			s.mu.Lock()
			err := s.errLocked()
			s.mu.Unlock()
			return err
		case <-ctx.Done():
			s.forget(keys, waits)
			return ctx.Err()
		}
	}
	return nil
}

func (s *subscription) forget(keys []string, waits []chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		list := s.pending[k]
		for j, w := range list {
			if w == waits[i] {
				list = append(list[:j], list[j+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(s.pending, k)
		} else {
			s.pending[k] = list
		}
	}
}

func (s *subscription) Close() error {
	if !backend.MarkOnce(&s.mu, &s.closed) {
		return nil
	}
	err := s.ps.Close()
	<-s.done
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		return wrap(context.Background(), err)
	}
	return nil
}

func (s *subscription) errLocked() error {
	return backend.SubscriptionErr(s.closed, s.dead)
}

// loop receives until the connection fails or the subscription is closed.
// A silent connection is probed with PING after s.health; a probe left
// unanswered for another s.health means the connection is gone.
func (s *subscription) loop() {
	defer close(s.done)
	ctx := context.Background()
	probed := false
	for {
		msg, err := s.ps.ReceiveTimeout(ctx, s.health)
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !probed {
				probed = true
				if perr := s.ps.Ping(ctx); perr == nil {
					continue
				}
			}
			s.drop(wrap(ctx, err))
			return
		}
		probed = false
		switch m := msg.(type) {
		case *redis.Message:
			if s.h.Message != nil {
				s.h.Message(backend.Message{Channel: m.Channel, Payload: m.Payload})
			}
		case *redis.Subscription:
			s.confirm(m.Kind + " " + m.Channel)
		}
	}
}

func (s *subscription) confirm(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.pending[key] {
		close(w)
	}
	delete(s.pending, key)
}

func (s *subscription) drop(err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.dead = err
	s.mu.Unlock()
	_ = s.ps.Close()
	if s.h.Dropped != nil {
		s.h.Dropped(err)
	}
}

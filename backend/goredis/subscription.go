package goredis

import (
	"context"
	"errors"
	"github.com/latchkit/latchkit/internal/adapterkit"
	"net"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
)

// Subscribe opens a pub/sub connection with no channels. Messages and the
// loss of the connection are delivered to h from one goroutine. It returns
// by ctx's end (see the package doc); a connection still being opened then
// is closed once it is.
func (b *adapter) Subscribe(ctx context.Context, h backend.Handler) (backend.Subscription, error) {
	if ctx == nil {
		return nil, backend.ErrNilContext
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
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
		return nil, b.unreached(ctx, start, err)
	}
	s := &subscription{b: b, ps: ps, h: h, health: b.health, done: make(chan struct{})}
	go s.loop()
	return s, nil
}

type subscription struct {
	b      *adapter // its unreached names a failed redial (see dials.go)
	ps     *redis.PubSub
	h      backend.Handler
	health time.Duration
	done   chan struct{}
	state  adapterkit.SubState // closed, dead, and the calls awaiting confirmations
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
// every channel, which the receive loop hands over through s.state.
func (s *subscription) change(ctx context.Context, kind string, channels []string, send func(context.Context, ...string) error) error {
	if ctx == nil {
		return backend.ErrNilContext
	}
	if len(channels) == 0 {
		return nil // go-redis would read an empty UNSUBSCRIBE as "all channels"
	}
	p, err := s.state.Expect(kind, channels)
	if err != nil {
		return err
	}
	// Sent on a goroutine of its own whatever the client's options: go-redis
	// holds the subscription's lock while its receive loop redials a broken
	// connection (for up to the dial and read timeouts), and send waits for
	// that lock. A send given up on may still reach the server; the
	// confirmation it gets then finds nobody waiting.
	channels = slices.Clone(channels) // the send may outlive this call
	start := time.Now()
	if _, err := backend.Await(ctx, func() (struct{}, error) {
		return struct{}{}, send(ctx, channels...)
	}, nil); err != nil {
		s.state.Forget(p)
		return s.b.unreached(ctx, start, wrap(ctx, err))
	}
	return s.state.Await(ctx, p, s.done)
}

func (s *subscription) Close() error {
	if !s.state.Close() {
		return nil
	}
	err := s.ps.Close()
	<-s.done
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		return wrap(context.Background(), err)
	}
	return nil
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
			if errors.Is(s.state.Err(), backend.ErrClosed) {
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
			s.state.Confirm(m.Kind, m.Channel)
		}
	}
}

// drop records the connection's loss and tells the handler, unless the
// subscription was closed.
func (s *subscription) drop(err error) {
	if !s.state.Drop(err) {
		return
	}
	_ = s.ps.Close()
	if s.h.Dropped != nil {
		s.h.Dropped(err)
	}
}

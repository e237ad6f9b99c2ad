package rueidis

import (
	"context"
	"errors"
	"sync"

	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/backend"
)

// Subscribe opens a dedicated pub/sub connection with no channels. rueidis
// answers a SUBSCRIBE or UNSUBSCRIBE only once the server has confirmed it,
// and reports the connection's end on the channel its pub/sub hooks return.
// It returns by ctx's end (see the package doc): rueidis dials a dedicated
// connection without the caller's context; a connection still being opened
// then is closed once it is.
func (b *Backend) Subscribe(ctx context.Context, h backend.Handler) (backend.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	open := func() (*subscription, error) {
		dc, cancel := b.c.Dedicate()
		s := &subscription{dc: dc, cancel: cancel, h: h, done: make(chan struct{})}
		s.wait = dc.SetPubSubHooks(rd.PubSubHooks{
			OnMessage: func(m rd.PubSubMessage) {
				if h.Message != nil {
					h.Message(backend.Message{Channel: m.Channel, Payload: m.Message})
				}
			},
		})
		// Prove the connection up front: an unreachable server fails here.
		if err := dc.Do(ctx, dc.B().Ping().Build()).Error(); err != nil {
			dc.Close()
			cancel()
			return nil, wrap(ctx, err)
		}
		return s, nil
	}
	s, err := backend.Await(ctx, open, func(s *subscription, _ error) {
		if s != nil { // opened after Subscribe gave up on it
			s.dc.Close()
			s.cancel()
		}
	})
	if err != nil {
		return nil, err
	}
	go s.watch()
	return s, nil
}

type subscription struct {
	dc     rd.DedicatedClient
	cancel func()
	h      backend.Handler
	wait   <-chan error // the connection's end, from its pub/sub hooks
	done   chan struct{}

	mu     sync.Mutex
	closed bool
	dead   error
}

// watch reports the connection's end, unless it was closed on purpose.
func (s *subscription) watch() {
	defer close(s.done)
	err := <-s.wait
	s.mu.Lock()
	closed := s.closed
	if !closed {
		if err == nil {
			err = errors.New("rueidis: pub/sub connection ended")
		}
		s.dead = &backend.Error{Class: backend.ErrUnavailable, Cause: err}
	}
	s.mu.Unlock()
	if !closed && s.h.Dropped != nil {
		s.h.Dropped(s.dead)
	}
}

func (s *subscription) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return backend.SubscriptionErr(s.closed, s.dead)
}

// Add subscribes to channels; it returns once the server confirmed them.
func (s *subscription) Add(ctx context.Context, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	if err := s.check(); err != nil {
		return err
	}
	if err := s.dc.Do(ctx, s.dc.B().Subscribe().Channel(channels...).Build()).Error(); err != nil {
		return wrap(ctx, err)
	}
	return nil
}

// Remove unsubscribes from channels; it returns once the server confirmed.
func (s *subscription) Remove(ctx context.Context, channels ...string) error {
	if len(channels) == 0 {
		return nil // an empty UNSUBSCRIBE would mean "all channels"
	}
	if err := s.check(); err != nil {
		return err
	}
	if err := s.dc.Do(ctx, s.dc.B().Unsubscribe().Channel(channels...).Build()).Error(); err != nil {
		return wrap(ctx, err)
	}
	return nil
}

// Close ends the subscription and its connection. It is idempotent.
func (s *subscription) Close() error {
	if !backend.MarkOnce(&s.mu, &s.closed) {
		return nil
	}
	s.dc.Close() // closes the connection instead of returning it to the pool
	s.cancel()
	<-s.done
	return nil
}

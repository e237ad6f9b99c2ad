package respkit

import (
	"context"
	"errors"
	"sync"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/adapterkit"
)

// Subscribe opens a dedicated pub/sub connection with no channels (see
// Backend). These drivers answer a SUBSCRIBE or UNSUBSCRIBE only once the
// server has confirmed it, and report the connection's end on the channel
// their pub/sub hooks return. It returns by ctx's end (see RESP): the
// drivers dial a dedicated connection without the caller's context; a
// connection still being opened then is closed once it is.
func (r *RESP[C, R, M, P, E]) Subscribe(ctx context.Context, h backend.Handler) (backend.Subscription, error) {
	if ctx == nil {
		return nil, backend.ErrNilContext
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	open := func() (*respSubscription[C, R, M, P, E], error) {
		deliver := func(backend.Message) {}
		if h.Message != nil {
			deliver = h.Message
		}
		conn, ended := r.d.dedicate(deliver)
		s := &respSubscription[C, R, M, P, E]{r: r, conn: conn, h: h, wait: ended, done: make(chan struct{})}
		// Prove the connection up front: an unreachable server fails here.
		if err := conn.do(ctx, r.d.ping()).Error(); err != nil {
			conn.close()
			return nil, r.wrap(ctx, err)
		}
		return s, nil
	}
	s, err := backend.Await(ctx, open, func(s *respSubscription[C, R, M, P, E], _ error) {
		if s != nil { // opened after Subscribe gave up on it
			s.conn.close()
		}
	})
	if err != nil {
		return nil, err
	}
	go s.watch()
	return s, nil
}

// respSubscription is a Subscription over a dedicated connection of a
// driver of the rueidis family.
type respSubscription[C any, R RESPResult[M], M any, P RESPMessage[M], E RESPError] struct {
	r    *RESP[C, R, M, P, E]
	conn respConn[C, R]
	h    backend.Handler
	wait <-chan error // the connection's end, from its pub/sub hooks
	done chan struct{}

	mu     sync.Mutex
	closed bool
	dead   error
}

// errPubSubEnded is the cause of a Dropped for a connection that ended
// without an error of its own.
var errPubSubEnded = errors.New("backend: pub/sub connection ended")

// watch reports the connection's end, unless it was closed on purpose.
func (s *respSubscription[C, R, M, P, E]) watch() {
	defer close(s.done)
	err := <-s.wait
	s.mu.Lock()
	closed := s.closed
	if !closed {
		if err == nil {
			err = errPubSubEnded
		}
		s.dead = &backend.Error{Class: backend.ErrUnavailable, Cause: err}
	}
	s.mu.Unlock()
	if !closed && s.h.Dropped != nil {
		s.h.Dropped(s.dead)
	}
}

// send sends SUBSCRIBE or UNSUBSCRIBE channels, unless the subscription
// is closed or dead.
func (s *respSubscription[C, R, M, P, E]) send(ctx context.Context, unsubscribe bool, channels []string) error {
	if ctx == nil {
		return backend.ErrNilContext
	}
	if len(channels) == 0 {
		return nil // an empty UNSUBSCRIBE would mean "all channels"
	}
	s.mu.Lock()
	err := adapterkit.SubscriptionErr(s.closed, s.dead)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.conn.do(ctx, s.r.d.channels(unsubscribe, channels)).Error(); err != nil {
		return s.r.wrap(ctx, err)
	}
	return nil
}

// Add subscribes to channels; it returns once the server confirmed them.
func (s *respSubscription[C, R, M, P, E]) Add(ctx context.Context, channels ...string) error {
	return s.send(ctx, false, channels)
}

// Remove unsubscribes from channels; it returns once the server confirmed.
func (s *respSubscription[C, R, M, P, E]) Remove(ctx context.Context, channels ...string) error {
	return s.send(ctx, true, channels)
}

// Close ends the subscription and its connection. It is idempotent.
func (s *respSubscription[C, R, M, P, E]) Close() error {
	if !adapterkit.MarkOnce(&s.mu, &s.closed) {
		return nil
	}
	s.conn.close() // closes the connection instead of returning it to the pool
	<-s.done
	return nil
}

package redigo

import (
	"context"
	"errors"
	"github.com/latchkit/latchkit/internal/adapterkit"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
)

// Subscribe dials a pub/sub connection of its own (see the package doc)
// with no channels. Messages and the loss of the connection are delivered
// to h from one goroutine. It returns by ctx's end; a connection still
// being opened then is closed once it is.
func (b *adapter) Subscribe(ctx context.Context, h backend.Handler) (backend.Subscription, error) {
	if ctx == nil {
		return nil, backend.ErrNilContext
	}
	open := func() (redis.Conn, error) {
		c, err := b.dial(ctx)
		if err != nil {
			return nil, wrap(ctx, err)
		}
		// Prove the server answers: a hung one fails here, by ctx's end.
		if _, err := redis.DoContext(c, ctx, "PING"); err != nil {
			_ = c.Close()
			return nil, wrap(ctx, err)
		}
		return c, nil
	}
	c, err := backend.Await(ctx, open, func(c redis.Conn, _ error) {
		if c != nil {
			_ = c.Close() // opened after Subscribe gave up on it
		}
	})
	if err != nil {
		return nil, err
	}
	s := &subscription{psc: redis.PubSubConn{Conn: c}, h: h, health: b.health,
		done: make(chan struct{}), pinged: make(chan struct{})}
	go s.loop()
	go s.ping()
	return s, nil
}

// dial opens a connection with the pool's own dial function, outside the
// pool.
func (b *adapter) dial(ctx context.Context) (redis.Conn, error) {
	switch {
	case b.pool == nil:
		return nil, errNoPool
	case b.pool.DialContext != nil:
		return b.pool.DialContext(ctx)
	case b.pool.Dial != nil:
		return b.pool.Dial()
	}
	return nil, errNoDial
}

var errNoDial = errors.New("redigo: the pool has neither Dial nor DialContext")

type subscription struct {
	psc    redis.PubSubConn
	h      backend.Handler
	health time.Duration
	done   chan struct{} // closed when the receive loop ends
	pinged chan struct{} // closed when the pinger ends
	wmu    sync.Mutex    // one writer at a time on the connection
	state  adapterkit.SubState
}

// Add subscribes to channels and returns once the server confirmed each.
func (s *subscription) Add(ctx context.Context, channels ...string) error {
	return s.change(ctx, "subscribe", channels, s.psc.Subscribe)
}

// Remove unsubscribes from channels and returns once the server confirmed
// each: no message of theirs is delivered after it returns.
func (s *subscription) Remove(ctx context.Context, channels ...string) error {
	return s.change(ctx, "unsubscribe", channels, s.psc.Unsubscribe)
}

// change sends a (UN)SUBSCRIBE and waits for the server's confirmation of
// every channel, which the receive loop hands over through s.state.
func (s *subscription) change(ctx context.Context, kind string, channels []string, send func(...any) error) error {
	if ctx == nil {
		return backend.ErrNilContext
	}
	if len(channels) == 0 {
		return nil // an empty UNSUBSCRIBE would mean "all channels"
	}
	p, err := s.state.Expect(kind, channels)
	if err != nil {
		return err
	}
	args := make([]any, len(channels))
	for i, ch := range channels {
		args[i] = ch
	}
	// The write holds s.wmu, which a write to a server that stopped
	// reading may keep: the caller still returns at ctx's end, and Close
	// ends the write by closing the connection.
	if _, err := backend.Await(ctx, func() (struct{}, error) {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		return struct{}{}, send(args...)
	}, nil); err != nil {
		s.state.Forget(p)
		if e := s.state.Err(); e != nil {
			return e
		}
		return wrap(ctx, err)
	}
	return s.state.Await(ctx, p, s.done)
}

// Close ends the subscription and closes its connection. It is idempotent.
func (s *subscription) Close() error {
	if !s.state.Close() {
		return nil
	}
	_ = s.psc.Close() // ends the receive loop and any write under way
	<-s.done
	<-s.pinged
	return nil
}

// loop receives until the connection fails or the subscription is closed.
// A read waits at most two health intervals: s.ping sends a PING every
// interval, so a live connection always has something to say.
func (s *subscription) loop() {
	defer close(s.done)
	for {
		switch m := s.psc.ReceiveWithTimeout(2 * s.health).(type) {
		case redis.Message:
			if s.h.Message != nil {
				s.h.Message(backend.Message{Channel: m.Channel, Payload: string(m.Data)})
			}
		case redis.Subscription:
			s.state.Confirm(m.Kind, m.Channel)
		case error:
			if s.psc.Conn.Err() == nil {
				// The read succeeded, the reply is not in pub/sub form:
				// the answer to a PING sent while no channel is
				// subscribed (+PONG, or the empty bulk of PING "").
				continue
			}
			// Closed on purpose, or lost: only a loss is reported.
			if err := wrap(context.Background(), m); s.state.Drop(err) {
				_ = s.psc.Close()
				if s.h.Dropped != nil {
					s.h.Dropped(err)
				}
			}
			return
		}
	}
}

// ping sends a PING every health interval until the loop ends. A failed
// send needs no handling: the loop's read fails too.
func (s *subscription) ping() {
	defer close(s.pinged)
	t := time.NewTicker(s.health)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.wmu.Lock()
			_ = s.psc.Ping("")
			s.wmu.Unlock()
		}
	}
}

package redigo

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
)

// Subscribe dials a pub/sub connection of its own (see the package doc)
// with no channels. Messages and the loss of the connection are delivered
// to h from one goroutine. It returns by ctx's end; a connection still
// being opened then is closed once it is.
func (b *Backend) Subscribe(ctx context.Context, h backend.Handler) (backend.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
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
		done: make(chan struct{}), pinged: make(chan struct{}), pending: map[string][]chan struct{}{}}
	go s.loop()
	go s.ping()
	return s, nil
}

// dial opens a connection with the pool's own dial function, outside the
// pool.
func (b *Backend) dial(ctx context.Context) (redis.Conn, error) {
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

	wmu sync.Mutex // one writer at a time on the connection

	mu      sync.Mutex
	closed  bool
	dead    error
	pending map[string][]chan struct{} // "subscribe ch" -> calls awaiting the server's confirmation
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
// every channel, which the receive loop hands over through s.pending.
func (s *subscription) change(ctx context.Context, kind string, channels []string, send func(...any) error) error {
	if len(channels) == 0 {
		return nil // an empty UNSUBSCRIBE would mean "all channels"
	}
	waits := make(map[string]chan struct{}, len(channels))
	s.mu.Lock()
	if err := backend.SubscriptionErr(s.closed, s.dead); err != nil {
		s.mu.Unlock()
		return err
	}
	for _, ch := range channels {
		k := kind + " " + ch
		if waits[k] == nil {
			waits[k] = make(chan struct{})
			s.pending[k] = append(s.pending[k], waits[k])
		}
	}
	s.mu.Unlock()
	// The write runs under s.wmu, which a write to a server that stopped
	// reading may hold: the caller still returns at ctx's end, and Close
	// ends the write by closing the connection.
	args := make([]any, len(channels))
	for i, ch := range channels {
		args[i] = ch
	}
	_, err := backend.Await(ctx, func() (struct{}, error) {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		return struct{}{}, send(args...)
	}, nil)
	if err != nil {
		s.forget(waits)
		if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
			return err
		}
		return s.failed(wrap(ctx, err))
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-s.done:
			return s.failed(nil)
		case <-ctx.Done():
			s.forget(waits)
			return ctx.Err()
		}
	}
	return nil
}

// failed is the error of a change that could not complete: the
// subscription's own state when it is closed or dead, else err.
func (s *subscription) failed(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := backend.SubscriptionErr(s.closed, s.dead); e != nil {
		return e
	}
	if err == nil {
		err = &backend.Error{Class: backend.ErrUnavailable, Cause: errEnded}
	}
	return err
}

var errEnded = errors.New("redigo: pub/sub connection ended")

// forget removes the waits of a change given up on.
func (s *subscription) forget(waits map[string]chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, w := range waits {
		list := slices.DeleteFunc(s.pending[k], func(c chan struct{}) bool { return c == w })
		if len(list) == 0 {
			delete(s.pending, k)
		} else {
			s.pending[k] = list
		}
	}
}

// Close ends the subscription and closes its connection. It is idempotent.
func (s *subscription) Close() error {
	if !backend.MarkOnce(&s.mu, &s.closed) {
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
			s.confirm(m.Kind + " " + m.Channel)
		case error:
			s.drop(m)
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

func (s *subscription) confirm(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.pending[key] {
		close(w)
	}
	delete(s.pending, key)
}

// drop reports the connection's loss, unless it was closed on purpose.
func (s *subscription) drop(err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.dead = wrap(context.Background(), err)
	s.mu.Unlock()
	_ = s.psc.Close()
	if s.h.Dropped != nil {
		s.h.Dropped(s.dead)
	}
}

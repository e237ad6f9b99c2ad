package adapterkit

import (
	"context"
	"errors"
	"github.com/latchkit/latchkit/backend"
	"slices"
	"sync"
)

// SubState is the state an adapter's Subscription keeps beside its
// connection: closed by Close, dead once the connection was lost, and the
// SUBSCRIBE and UNSUBSCRIBE calls awaiting the server's confirmation, for
// a driver that hands confirmations to a receive loop rather than to the
// call that sent the command (go-redis, redigo). The zero value is ready
// for use; its methods are safe for concurrent use.
type SubState struct {
	mu      sync.Mutex
	closed  bool
	dead    error
	pending map[string][]chan struct{} // kind+" "+channel -> calls awaiting its confirmation
}

// Pending is what one call awaits: a confirmation per channel.
type Pending struct {
	keys  []string
	waits []chan struct{}
}

// Err is the error of an operation on the subscription: ErrClosed after
// Close, the connection's loss after Drop, else nil (see SubscriptionErr).
func (s *SubState) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SubscriptionErr(s.closed, s.dead)
}

// Close marks the subscription closed and reports whether it was open:
// what an idempotent Close starts with.
func (s *SubState) Close() bool { return MarkOnce(&s.mu, &s.closed) }

// Drop records the connection's loss, err, and reports whether the caller
// should tell Handler.Dropped: not after Close, and only once.
func (s *SubState) Drop(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.dead != nil {
		return false
	}
	if err == nil {
		err = &backend.Error{Class: backend.ErrUnavailable, Cause: errSubEnded}
	}
	s.dead = err
	return true
}

var errSubEnded = errors.New("backend: pub/sub connection ended")

// Expect registers a call that will send kind ("subscribe" or
// "unsubscribe") for channels, before it sends it. It fails with Err when
// the subscription is closed or dead.
func (s *SubState) Expect(kind string, channels []string) (*Pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := SubscriptionErr(s.closed, s.dead); err != nil {
		return nil, err
	}
	if s.pending == nil {
		s.pending = map[string][]chan struct{}{}
	}
	p := &Pending{}
	for _, ch := range channels {
		k := kind + " " + ch
		if slices.Contains(p.keys, k) {
			continue
		}
		w := make(chan struct{})
		p.keys, p.waits = append(p.keys, k), append(p.waits, w)
		s.pending[k] = append(s.pending[k], w)
	}
	return p, nil
}

// Confirm hands the server's confirmation of kind for channel to every
// call awaiting it.
func (s *SubState) Confirm(kind, channel string) {
	k := kind + " " + channel
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.pending[k] {
		close(w)
	}
	delete(s.pending, k)
}

// Await waits until every confirmation p expects has arrived (nil), the
// receive loop has ended (done is closed: Err, or ErrUnavailable), or ctx
// ends (its error; p is forgotten).
func (s *SubState) Await(ctx context.Context, p *Pending, done <-chan struct{}) error {
	for _, w := range p.waits {
		select {
		case <-w:
		case <-done:
			if err := s.Err(); err != nil {
				return err
			}
			return &backend.Error{Class: backend.ErrUnavailable, Cause: errSubEnded}
		case <-ctx.Done():
			s.Forget(p)
			return ctx.Err()
		}
	}
	return nil
}

// Forget drops the confirmations p awaits, for a call given up on.
func (s *SubState) Forget(p *Pending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range p.keys {
		list := slices.DeleteFunc(s.pending[k], func(c chan struct{}) bool { return c == p.waits[i] })
		if len(list) == 0 {
			delete(s.pending, k)
		} else {
			s.pending[k] = list
		}
	}
}

// SubscriptionErr is the error of an operation on a Subscription that was
// closed (ErrClosed) or whose connection died (dead, as reported to
// Handler.Dropped); nil when neither.
func SubscriptionErr(closed bool, dead error) error {
	switch {
	case closed:
		return &backend.Error{Class: backend.ErrClosed}
	case dead != nil:
		return dead
	}
	return nil
}

// MarkOnce sets *flag under mu and reports whether it was unset: what a
// Close that may be called more than once starts with.
func MarkOnce(mu sync.Locker, flag *bool) bool {
	mu.Lock()
	defer mu.Unlock()
	was := *flag
	*flag = true
	return !was
}

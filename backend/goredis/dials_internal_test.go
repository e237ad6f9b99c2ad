package goredis

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
)

// TestUnreached: a call's error is said to be Redis unavailable, beside
// the context's error, only when the call ended with its context's error
// alone, its context done, and the latest dial of the client ended in
// failure after the call began. A dial that failed before the call, a
// later dial that connected, a dial go-redis cancelled itself, a live
// context (the driver's own deadline), an error already classified, an
// error reply, or a client not watched leave the error as it was.
func TestUnreached(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	done, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-done.Done()
	live := context.Background()
	type dial struct {
		after bool  // ended after the call began (before it otherwise)
		err   error // nil: connected
	}
	cases := []struct {
		name    string
		watched bool
		dials   []dial // in order; the last is the latest
		ctx     context.Context
		err     error
		want    bool // the error becomes ErrUnavailable naming the dial
	}{
		{"failed dial during the call", true, []dial{{true, refused}}, done, context.DeadlineExceeded, true},
		{"abandoned call", true, []dial{{true, refused}}, done, backend.Abandoned(done), true},
		{"failed dial before the call", true, []dial{{false, refused}}, done, context.DeadlineExceeded, false},
		{"connected since", true, []dial{{true, refused}, {true, nil}}, done, context.DeadlineExceeded, false},
		{"failed again since connecting", true, []dial{{false, nil}, {true, refused}}, done, context.DeadlineExceeded, true},
		{"a cancelled dial last", true, []dial{{true, refused}, {true, context.Canceled}}, done, context.DeadlineExceeded, true},
		{"no dial", true, nil, done, context.DeadlineExceeded, false},
		{"context live", true, []dial{{true, refused}}, live, context.DeadlineExceeded, false},
		{"already unavailable", true, []dial{{true, refused}}, done, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("reset")}, false},
		{"error reply", true, []dial{{true, refused}}, done, &backend.Error{Class: &backend.ReplyError{Msg: "ERR x"}}, false},
		{"not watched", false, []dial{{true, refused}}, done, context.DeadlineExceeded, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &adapter{}
			if c.watched {
				b.dials = new(dialWatch)
			}
			start := time.Now()
			if b.dials != nil {
				for _, d := range c.dials {
					if d.after {
						b.dials.DialHook(func(context.Context, string, string) (net.Conn, error) { return nil, d.err })(context.Background(), "tcp", "x")
					} else {
						b.dials.last.Store(&dialOutcome{at: start.Add(-time.Millisecond), err: d.err})
					}
				}
			}
			got := b.unreached(c.ctx, start, c.err)
			if !errors.Is(got, c.err) {
				t.Errorf("%v does not match the call's error %v", got, c.err)
			}
			var oe *net.OpError
			switch {
			case c.want && (!errors.Is(got, backend.ErrUnavailable) || !errors.As(got, &oe) || oe != refused):
				t.Errorf("%v: want it to match ErrUnavailable and the refused dial", got)
			case !c.want && got != c.err:
				t.Errorf("%v: changed, want %v as it was", got, c.err)
			}
		})
	}
}

// TestWatchesLetClientsGo: the registry of watched clients does not keep a
// client alive; its entry goes once the client is collected.
func TestWatchesLetClientsGo(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
	k := weak.Make(c)
	New(c)
	watches.mu.Lock()
	_, ok := watches.m[k]
	watches.mu.Unlock()
	if !ok {
		t.Fatal("New did not keep the client's watch")
	}
	c.Close()
	c = nil
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		watches.mu.Lock()
		_, ok = watches.m[k]
		watches.mu.Unlock()
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch of a collected client is still kept (client collected: %v)", k.Value() == nil)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

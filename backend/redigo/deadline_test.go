package redigo_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// The deadline every call under test gets, and how late past it a call may
// return: scheduling on a busy 2-core machine, not a performance target
// (see the same bound in package goredis). A call that waits for the
// server instead returns when the fault ends, seconds later.
const (
	callTimeout = 200 * time.Millisecond
	slack       = 250*time.Millisecond + raceSlack
)

// writeScript writes, as every latchkit acquire script does: under CLIENT
// PAUSE WRITE the server holds it until the pause ends.
var writeScript = backend.NewScript(`redis.call('SET', KEYS[1], ARGV[1]) return 1`)

// echoScript returns its argument: a reply that tells calls apart.
var echoScript = backend.NewScript(`return ARGV[1]`)

// adapter is what redigo.New returns, with the optional interfaces these
// tests call.
type adapter interface {
	backend.Backend
	backend.Batcher
	backend.ReplicaAcker
}

// poolKind is how a test makes the pool under test.
type poolKind struct {
	name string
	make func(addr string) *redis.Pool
}

var poolKinds = []poolKind{
	// What most users write: no timeout of any kind, so redigo alone
	// would wait for a hung server forever.
	{"default", func(addr string) *redis.Pool {
		return &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }, MaxIdle: 4}
	}},
	// redigo's documented health check: a PING on every borrowed idle
	// connection, made without a context or timeout.
	{"TestOnBorrow", func(addr string) *redis.Pool {
		return &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }, MaxIdle: 4,
			TestOnBorrow: func(c redis.Conn, _ time.Time) error { _, err := c.Do("PING"); return err }}
	}},
}

// fault hangs a server and ends the hang.
type fault struct {
	name  string
	start func(t *testing.T, srv *redistest.Server)
	end   func(t *testing.T, srv *redistest.Server)
}

var faults = []fault{
	{"CLIENT PAUSE WRITE", func(t *testing.T, srv *redistest.Server) {
		if _, err := srv.Do(ctxT(t, 5*time.Second), "CLIENT", "PAUSE", 2500, "WRITE"); err != nil {
			t.Fatal(err)
		}
	}, func(t *testing.T, srv *redistest.Server) {
		if _, err := srv.Do(ctxT(t, 5*time.Second), "CLIENT", "UNPAUSE"); err != nil {
			t.Error(err)
		}
	}},
	{"SIGSTOP", func(t *testing.T, srv *redistest.Server) { srv.Pause() },
		func(t *testing.T, srv *redistest.Server) { srv.Resume() }},
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// checkDeadline fails t unless err matches context.DeadlineExceeded (or is
// nil, when nilOK) and the call took no longer than its deadline plus
// slack.
func checkDeadline(t *testing.T, what string, took time.Duration, err error, nilOK bool) {
	t.Helper()
	if took > callTimeout+slack {
		t.Errorf("%s with a %v context returned after %v (bound %v)", what, callTimeout, took.Round(time.Millisecond), callTimeout+slack)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !(nilOK && err == nil) {
		t.Errorf("%s: %v, want an error matching context.DeadlineExceeded", what, err)
	}
}

// TestDeadlineHungServer: with pools that set no timeout at all, every call
// of the adapter returns by its context's deadline (plus slack) when the
// server holds it (CLIENT PAUSE WRITE) or is frozen (SIGSTOP), with an
// error matching context.DeadlineExceeded; the pool serves again once the
// fault ends.
func TestDeadlineHungServer(t *testing.T) {
	redistest.Require(t)
	for _, f := range faults {
		for _, k := range poolKinds {
			t.Run(f.name+"/"+k.name, func(t *testing.T) {
				srv := redistest.Start(t)
				p := k.make(srv.Addr)
				defer p.Close()
				b := redigo.New(p).(adapter)
				ctx := ctxT(t, 10*time.Second)
				// Warm up: idle connections, the script loaded, a
				// subscription open.
				calls := []backend.Call{{Script: writeScript, Keys: []string{"k"}, Args: []string{"0"}}, {Script: writeScript, Keys: []string{"k"}, Args: []string{"0"}}}
				b.EvalBatch(ctx, calls)
				if err := errors.Join(calls[0].Err, calls[1].Err); err != nil {
					t.Fatal(err)
				}
				sub, err := b.Subscribe(ctx, backend.Handler{})
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()

				f.start(t, srv)
				ended := false
				endFault := func() {
					if !ended {
						ended = true
						f.end(t, srv)
					}
				}
				defer endFault()

				var wg sync.WaitGroup
				run := func(what string, nilOK bool, call func(ctx context.Context) error) {
					wg.Go(func() {
						cctx, cancel := context.WithTimeout(ctx, callTimeout)
						defer cancel()
						start := time.Now()
						err := call(cctx)
						checkDeadline(t, what, time.Since(start), err, nilOK)
					})
				}
				run("Eval", false, func(ctx context.Context) error {
					_, err := b.Eval(ctx, writeScript, []string{"k"}, []string{"1"})
					return err
				})
				run("EvalBatch", false, func(ctx context.Context) error {
					calls := []backend.Call{
						{Script: writeScript, Keys: []string{"k1"}, Args: []string{"1"}},
						{Script: writeScript, Keys: []string{"k2"}, Args: []string{"1"}},
					}
					b.EvalBatch(ctx, calls)
					return errors.Join(calls[0].Err, calls[1].Err)
				})
				run("EvalAck", false, func(ctx context.Context) error {
					_, _, err := b.EvalAck(ctx, writeScript, []string{"k3"}, []string{"1"}, 0, 50*time.Millisecond)
					return err
				})
				// (UN)SUBSCRIBE and PING are not writes: CLIENT PAUSE WRITE
				// lets them through.
				pauseWrite := f.name == "CLIENT PAUSE WRITE"
				run("Subscribe", pauseWrite, func(ctx context.Context) error {
					s, err := b.Subscribe(ctx, backend.Handler{})
					if err == nil {
						s.Close()
					}
					return err
				})
				run("Add", pauseWrite, func(ctx context.Context) error { return sub.Add(ctx, "ch") })
				wg.Wait()
				endFault()
				if _, err := b.Eval(ctx, writeScript, []string{"k"}, []string{"2"}); err != nil {
					t.Errorf("after the fault: %v", err)
				}
			})
		}
	}
}

// TestAbandonedConnNotReused: a call given up on while its reply is on its
// way closes its connection. Its reply arrives once the fault ends; a pool
// that took the connection back would hand it to the next call, which
// would read the stale reply (1) instead of its own.
func TestAbandonedConnNotReused(t *testing.T) {
	redistest.Require(t)
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			srv := redistest.Start(t)
			// One connection at most, kept idle: the next call gets the
			// abandoned call's connection unless it was discarded.
			p := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", srv.Addr) }, MaxIdle: 1, MaxActive: 1, Wait: true}
			defer p.Close()
			b := redigo.New(p).(adapter)
			ctx := ctxT(t, 10*time.Second)
			for _, s := range []*backend.Script{writeScript, echoScript} {
				if _, err := b.Eval(ctx, s, []string{"k"}, []string{"0"}); err != nil {
					t.Fatal(err)
				}
			}
			f.start(t, srv)
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			_, err := b.Eval(cctx, writeScript, []string{"k"}, []string{"1"})
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Eval on a hung server: %v, want DeadlineExceeded", err)
			}
			f.end(t, srv)
			time.Sleep(50 * time.Millisecond) // room for the stale reply to arrive
			for i, want := range []string{"a", "b", "c"} {
				v, err := b.Eval(ctx, echoScript, nil, []string{want})
				if err != nil || v != want {
					t.Fatalf("call %d after the abandoned one: %#v, %v; want %q", i, v, err, want)
				}
			}
		})
	}
}

// TestAbandonedCallsEnd: calls abandoned on a frozen server end at their
// context's end, although the pool sets no read timeout and the server
// never resumes: nothing they started is left running.
func TestAbandonedCallsEnd(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	p := poolKinds[0].make(srv.Addr)
	defer p.Close()
	b := redigo.New(p).(adapter)
	ctx := ctxT(t, 10*time.Second)
	if _, err := b.Eval(ctx, writeScript, []string{"k"}, []string{"0"}); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()
	srv.Pause()
	defer srv.Resume()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for _, call := range []func() error{
		func() error { _, err := b.Eval(cctx, writeScript, []string{"k"}, []string{"1"}); return err },
		func() error {
			calls := []backend.Call{{Script: writeScript, Keys: []string{"k"}, Args: []string{"1"}}}
			b.EvalBatch(cctx, calls)
			return calls[0].Err
		},
		func() error {
			_, _, err := b.EvalAck(cctx, writeScript, []string{"k"}, []string{"1"}, 0, 10*time.Millisecond)
			return err
		},
		func() error {
			s, err := b.Subscribe(cctx, backend.Handler{})
			if err == nil {
				s.Close()
			}
			return err
		},
	} {
		wg.Go(func() {
			if err := call(); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v, want DeadlineExceeded", err)
			}
		})
	}
	wg.Wait()
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("abandoned calls still running, the server frozen: %v", err)
	}
}

// TestClosedPool: every call on a closed pool fails with ErrClosed, at once.
func TestClosedPool(t *testing.T) {
	m := miniredis.RunT(t)
	p := poolKinds[0].make(m.Addr())
	b := redigo.New(p).(adapter)
	ctx := ctxT(t, 5*time.Second)
	if _, err := b.Eval(ctx, echoScript, nil, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	_, err := b.Eval(ctx, echoScript, nil, []string{"x"})
	if !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Eval: %v, want ErrClosed", err)
	}
	calls := []backend.Call{{Script: echoScript, Args: []string{"x"}}}
	b.EvalBatch(ctx, calls)
	if !errors.Is(calls[0].Err, backend.ErrClosed) {
		t.Errorf("EvalBatch: %v, want ErrClosed", calls[0].Err)
	}
	if _, _, err := b.EvalAck(ctx, echoScript, nil, []string{"x"}, 1, time.Millisecond); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("EvalAck: %v, want ErrClosed", err)
	}
}

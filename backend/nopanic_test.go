package backend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	redigolib "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"
	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
)

// adapters returns a Backend of each of latchkit's adapters on m, and one
// of each over a client closed already.
func adapters(t *testing.T, m *miniredis.Miniredis) (live, closed map[string]backend.Backend) {
	t.Helper()
	live, closed = map[string]backend.Backend{}, map[string]backend.Backend{}
	for _, open := range []bool{true, false} {
		out := live
		if !open {
			out = closed
		}
		g := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		r, err := rd.NewClient(rd.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, AlwaysRESP2: true})
		if err != nil {
			t.Fatal(err)
		}
		v, err := vk.NewClient(vk.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, AlwaysRESP2: true})
		if err != nil {
			t.Fatal(err)
		}
		p := &redigolib.Pool{Dial: func() (redigolib.Conn, error) { return redigolib.Dial("tcp", m.Addr()) }}
		out["goredis"], out["rueidis"], out["valkey"], out["redigo"] = goredis.New(g), rueidis.New(r), valkey.New(v), redigo.New(p)
		closeAll := func() { g.Close(); r.Close(); v.Close(); p.Close() }
		if open {
			t.Cleanup(closeAll)
		} else {
			closeAll()
		}
	}
	return live, closed
}

// Issue 38, finding 5: every exported function and method of package
// backend with bad input (nil contexts, scripts, calls, targets and
// receivers, zero values, closed clients) returns an error (ErrInvalid for
// bad input, ErrClosed for a closed client) or is a documented no-op, never
// panics. The interfaces' methods are called on each of latchkit's
// adapters. apicover.Check requires a case for each.
func TestNoPanicOnBadInput(t *testing.T) {
	m := miniredis.RunT(t)
	live, closed := adapters(t, m)
	var nilCtx context.Context
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := backend.NewScript("return 1")
	twoSlots := []string{"{a}x", "{b}x"}
	inv, clo := backend.ErrInvalid, backend.ErrClosed
	each := func(t *testing.T, f func(t *testing.T, name string, b backend.Backend, open bool)) {
		for n, b := range live {
			f(t, n, b, true)
		}
		for n, b := range closed {
			f(t, n+" closed", b, false)
		}
	}
	subscribe := func(t *testing.T, name string, b backend.Backend) backend.Subscription {
		t.Helper()
		sub, err := b.Subscribe(ctx, backend.Handler{}) // nil functions: documented to be skipped
		if err != nil {
			t.Fatalf("%s: Subscribe: %v", name, err)
		}
		return sub
	}

	cases := map[string]func(t *testing.T){
		"Abandoned": func(t *testing.T) {
			apicover.Must(t, "Abandoned(nil)", func() error { return backend.Abandoned(nilCtx) }, inv)
			// A live context breaks the precondition: an error all the same.
			apicover.Calm(t, "Abandoned(live ctx).Error()", func() error { _ = backend.Abandoned(ctx).Error(); return nil })
		},
		"Await": func(t *testing.T) {
			call := func() (int, error) { return 1, nil }
			apicover.Must(t, "Await(nil ctx)", func() error { _, err := backend.Await(nilCtx, call, nil); return err }, inv)
			apicover.Must(t, "Await(nil call)", func() error { _, err := backend.Await[int](ctx, nil, nil); return err }, inv)
			if v, err := backend.Await(ctx, call, nil); v != 1 || err != nil {
				t.Errorf("Await(ctx, call, nil cleanup) = %v, %v", v, err)
			}
		},
		"IsCluster": func(t *testing.T) {
			apicover.Calm(t, "IsCluster(nil)", func() error { _ = backend.IsCluster(nil); return nil })
		},
		"Wrap": func(t *testing.T) {
			cause := errors.New("boom")
			// A nil ctx is one that never ends; a nil reply recognizes no
			// error reply (documented).
			err := apicover.Calm(t, "Wrap(nil ctx, err, nil, nil)", func() error { return backend.Wrap(nilCtx, cause, nil, nil) })
			if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, cause) {
				t.Errorf("Wrap(nil ctx, err, nil, nil) = %v, want ErrUnavailable and the cause", err)
			}
			apicover.Calm(t, "Wrap(ctx, nil, nil, nil)", func() error { return backend.Wrap(ctx, nil, nil, nil) })
		},
		"NewScript": func(t *testing.T) {
			apicover.Calm(t, "NewScript(\"\")", func() error { _ = backend.NewScript(""); return nil })
		},
		"Script.Hash": func(t *testing.T) {
			apicover.Calm(t, "(*Script)(nil).Hash", func() error { _ = (*backend.Script)(nil).Hash(); return nil })
			apicover.Calm(t, "(&Script{}).Hash", func() error { _ = (&backend.Script{}).Hash(); return nil })
		},
		"Script.Source": func(t *testing.T) {
			apicover.Calm(t, "(*Script)(nil).Source", func() error { _ = (*backend.Script)(nil).Source(); return nil })
		},
		"Error.Error": func(t *testing.T) {
			for _, e := range []*backend.Error{nil, {}, {Cause: errors.New("x")}} {
				apicover.Calm(t, "Error.Error", func() error { _ = e.Error(); return nil })
			}
		},
		"Error.Unwrap": func(t *testing.T) {
			for _, e := range []*backend.Error{nil, {}} {
				apicover.Calm(t, "Error.Unwrap", func() error { _ = e.Unwrap(); return nil })
			}
		},
		"ReplyError.Error": func(t *testing.T) {
			for _, e := range []*backend.ReplyError{nil, {}} {
				apicover.Calm(t, "ReplyError.Error", func() error { _ = e.Error(); return nil })
			}
		},
		"ReplyError.Is": func(t *testing.T) {
			for _, e := range []*backend.ReplyError{nil, {}} {
				apicover.Calm(t, "ReplyError.Is", func() error { _ = e.Is(backend.ErrWrongType); _ = e.Is(nil); return nil })
			}
		},
		"Backend.Eval": func(t *testing.T) {
			each(t, func(t *testing.T, n string, b backend.Backend, open bool) {
				apicover.Must(t, n+" Eval(nil ctx)", func() error { _, err := b.Eval(nilCtx, s, nil, nil); return err }, inv)
				apicover.Must(t, n+" Eval(nil script)", func() error { _, err := b.Eval(ctx, nil, nil, nil); return err }, inv)
				if !open {
					apicover.Must(t, n+" Eval", func() error { _, err := b.Eval(ctx, s, nil, nil); return err }, clo)
					return
				}
				// Keys of two hash slots: run on a single server, refused
				// with ErrInvalid by a cluster client (a wrapper that hides
				// backend.Cluster makes a MultiLock send them so).
				if backend.IsCluster(b) {
					apicover.Must(t, n+" Eval(keys of two slots)", func() error { _, err := b.Eval(ctx, s, twoSlots, nil); return err }, inv)
				} else {
					apicover.Calm(t, n+" Eval(keys of two slots)", func() error { _, err := b.Eval(ctx, s, twoSlots, nil); return err })
				}
			})
		},
		"Backend.Subscribe": func(t *testing.T) {
			each(t, func(t *testing.T, n string, b backend.Backend, open bool) {
				apicover.Must(t, n+" Subscribe(nil ctx)", func() error { _, err := b.Subscribe(nilCtx, backend.Handler{}); return err }, inv)
				if !open {
					// redigo dials a subscription outside its pool, closed
					// or not: no error there, and no panic anywhere.
					apicover.Calm(t, n+" Subscribe", func() error {
						sub, err := b.Subscribe(ctx, backend.Handler{})
						if err == nil {
							err = sub.Close()
						}
						return err
					})
					return
				}
				// A Handler without functions: a message and a drop are
				// skipped.
				sub := subscribe(t, n, b)
				defer sub.Close()
				if err := sub.Add(ctx, "ch"); err != nil {
					t.Fatalf("%s: Add: %v", n, err)
				}
				m.Publish("ch", "hello")
				time.Sleep(20 * time.Millisecond)
			})
		},
		"Batcher.EvalBatch": func(t *testing.T) {
			each(t, func(t *testing.T, n string, b backend.Backend, open bool) {
				bt, ok := b.(backend.Batcher)
				if !ok {
					return
				}
				calls := []backend.Call{{Script: s}, {Script: nil}}
				apicover.Calm(t, n+" EvalBatch(nil ctx)", func() error { bt.EvalBatch(nilCtx, calls); return nil })
				for i, c := range calls {
					if !errors.Is(c.Err, inv) {
						t.Errorf("%s: EvalBatch(nil ctx): call %d: %v, want ErrInvalid", n, i, c.Err)
					}
				}
				calls = []backend.Call{{Script: s}, {Script: nil}}
				apicover.Calm(t, n+" EvalBatch(a nil script)", func() error { bt.EvalBatch(ctx, calls); return nil })
				if !errors.Is(calls[1].Err, inv) {
					t.Errorf("%s: EvalBatch: a call without a script: %v, want ErrInvalid", n, calls[1].Err)
				}
				if open && (calls[0].Err != nil || calls[0].Value != int64(1)) {
					t.Errorf("%s: EvalBatch: the other call: %v, %v, want 1", n, calls[0].Value, calls[0].Err)
				}
				apicover.Calm(t, n+" EvalBatch(nil)", func() error { bt.EvalBatch(ctx, nil); return nil })
				if open && backend.IsCluster(b) {
					calls := []backend.Call{{Script: s, Keys: []string{"a"}}, {Script: s, Keys: twoSlots}}
					apicover.Calm(t, n+" EvalBatch(keys of two slots)", func() error { bt.EvalBatch(ctx, calls); return nil })
					if !errors.Is(calls[1].Err, inv) || calls[0].Err != nil {
						t.Errorf("%s: EvalBatch: a call of keys of two slots: %v (the other %v), want ErrInvalid (and nil)", n, calls[1].Err, calls[0].Err)
					}
				}
			})
		},
		"ReplicaAcker.EvalAck": func(t *testing.T) {
			each(t, func(t *testing.T, n string, b backend.Backend, open bool) {
				ra, ok := b.(backend.ReplicaAcker)
				if !ok {
					return
				}
				apicover.Must(t, n+" EvalAck(nil ctx)", func() error { _, _, err := ra.EvalAck(nilCtx, s, nil, nil, 1, time.Millisecond); return err }, inv)
				apicover.Must(t, n+" EvalAck(nil script)", func() error { _, _, err := ra.EvalAck(ctx, nil, nil, nil, 1, time.Millisecond); return err }, inv)
				apicover.Must(t, n+" EvalAck(-1 replicas)", func() error { _, _, err := ra.EvalAck(ctx, s, nil, nil, -1, time.Millisecond); return err }, inv)
				apicover.Must(t, n+" EvalAck(negative timeout)", func() error { _, _, err := ra.EvalAck(ctx, s, nil, nil, 1, -1); return err }, inv)
				if open && backend.IsCluster(b) {
					apicover.Must(t, n+" EvalAck(keys of two slots)", func() error { _, _, err := ra.EvalAck(ctx, s, twoSlots, nil, 0, time.Millisecond); return err }, inv)
				}
			})
		},
		"Cluster.Cluster": func(t *testing.T) {
			each(t, func(t *testing.T, n string, b backend.Backend, _ bool) {
				if c, ok := b.(backend.Cluster); ok {
					apicover.Calm(t, n+" Cluster", func() error { _ = c.Cluster(); return nil })
				}
			})
		},
		"Unwrapper.As": func(t *testing.T) {
			each(t, func(t *testing.T, n string, b backend.Backend, _ bool) {
				u, ok := b.(backend.Unwrapper)
				if !ok {
					return
				}
				for _, target := range []any{nil, 1, new(int), (*redis.UniversalClient)(nil), (**redis.Client)(nil), (*redis.Cmdable)(nil),
					(**redis.ClusterClient)(nil), (**redigolib.Pool)(nil), (*rd.Client)(nil), (*vk.Client)(nil)} {
					apicover.Calm(t, n+" As", func() error {
						if u.As(target) && target == nil {
							t.Errorf("%s: As(nil) = true", n)
						}
						return nil
					})
				}
			})
		},
		"Validator.Validate": func(t *testing.T) {
			each(t, func(t *testing.T, n string, b backend.Backend, _ bool) {
				if v, ok := b.(backend.Validator); ok {
					apicover.Calm(t, n+" Validate", func() error { _ = v.Validate(); return nil })
				}
			})
		},
		"Subscription.Add": func(t *testing.T) {
			for n, b := range live {
				sub := subscribe(t, n, b)
				apicover.Must(t, n+" Add(nil ctx)", func() error { return sub.Add(nilCtx, "x") }, inv)
				apicover.Calm(t, n+" Add()", func() error { return sub.Add(ctx) })
				_ = sub.Close()
				apicover.Must(t, n+" Add after Close", func() error { return sub.Add(ctx, "x") }, clo)
			}
		},
		"Subscription.Remove": func(t *testing.T) {
			for n, b := range live {
				sub := subscribe(t, n, b)
				apicover.Must(t, n+" Remove(nil ctx)", func() error { return sub.Remove(nilCtx, "x") }, inv)
				apicover.Calm(t, n+" Remove()", func() error { return sub.Remove(ctx) })
				apicover.Calm(t, n+" Remove of a channel not subscribed", func() error { return sub.Remove(ctx, "never") })
				_ = sub.Close()
				apicover.Must(t, n+" Remove after Close", func() error { return sub.Remove(ctx, "x") }, clo)
			}
		},
		"Subscription.Close": func(t *testing.T) {
			for n, b := range live {
				sub := subscribe(t, n, b)
				apicover.Calm(t, n+" Close", sub.Close)
				apicover.Calm(t, n+" Close again", sub.Close)
			}
		},
	}
	apicover.Check(t, ".", cases)
}

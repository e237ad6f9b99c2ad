package goredis_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// ops are the adapter's script calls, each returning its error.
var ops = []struct {
	name string
	call func(ctx context.Context, b adapter) error
}{
	{"Eval", func(ctx context.Context, b adapter) error {
		_, err := b.Eval(ctx, writeScript, []string{"k"}, []string{"v"})
		return err
	}},
	{"EvalBatch", func(ctx context.Context, b adapter) error {
		calls := []backend.Call{{Script: writeScript, Keys: []string{"k"}, Args: []string{"v"}}}
		b.EvalBatch(ctx, calls)
		return calls[0].Err
	}},
	{"EvalAck", func(ctx context.Context, b adapter) error {
		_, _, err := b.EvalAck(ctx, writeScript, []string{"k"}, []string{"v"}, 1, time.Second)
		return err
	}},
}

// A call that its deadline cuts short while the client cannot connect
// (nothing listens at its address) ends with an error matching the
// deadline, latchkit's ErrUnavailable and the dial's error, whose text it
// names: go-redis itself returns only the context's error then (it dials
// 5 times 100 ms apart, and tries the command 4 times, about 1.7 s in
// all), which said nothing of Redis being unreachable (issue 28, finding
// 11). For every client type the adapter watches, with and without
// ContextTimeoutEnabled. A Sentinel failover client whose sentinels are
// all gone fails its first dial after some 1.7 s (asking each sentinel
// takes as long): it gets 3 s.
func TestCutShortAgainstDeadAddrSaysUnavailable(t *testing.T) {
	type kind struct {
		name     string
		deadline time.Duration
		make     func(addr string, cte bool) redis.UniversalClient
	}
	kinds := []kind{
		{"Client", 300 * time.Millisecond, func(addr string, cte bool) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: cte})
		}},
		{"ClusterClient", 300 * time.Millisecond, func(addr string, cte bool) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: cte})
		}},
		{"UniversalClient", 300 * time.Millisecond, func(addr string, cte bool) redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: cte})
		}},
		{"FailoverClient", 3 * time.Second, func(addr string, cte bool) redis.UniversalClient {
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: cte})
		}},
	}
	for _, k := range kinds {
		for _, cte := range []bool{false, true} {
			for _, op := range ops {
				if k.name == "FailoverClient" && op.name != "Eval" {
					continue // 3 s each: one call shows the failover dialer's error is watched
				}
				name := k.name + "/" + op.name
				if cte {
					name += "/ContextTimeoutEnabled"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c := k.make(redistest.DeadAddr(t), cte)
					defer c.Close()
					b := goredis.New(c).(adapter)
					ctx, cancel := context.WithTimeout(context.Background(), k.deadline)
					defer cancel()
					start := time.Now()
					err := op.call(ctx, b)
					t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("does not match context.DeadlineExceeded: %v", err)
					}
					if !errors.Is(err, backend.ErrUnavailable) {
						t.Errorf("does not match ErrUnavailable: %v", err)
					}
					if err != nil && !strings.Contains(err.Error(), "connection refused") {
						t.Errorf("does not name the dial's error (connection refused): %v", err)
					}
					var oe *net.OpError
					if !errors.As(err, &oe) {
						t.Errorf("the dial's error cannot be reached (errors.As *net.OpError): %v", err)
					}
				})
			}
		}
	}
}

// A call cut short by its deadline against a server that accepts
// connections and never answers (dials succeed) ends with the context's
// error alone, as before: it says its deadline passed, not that Redis
// could not be reached.
func TestCutShortHungServerOnlyDeadline(t *testing.T) {
	for _, cte := range []bool{false, true} {
		t.Run("ContextTimeoutEnabled="+map[bool]string{false: "false", true: "true"}[cte], func(t *testing.T) {
			t.Parallel()
			c := redis.NewClient(&redis.Options{Addr: redistest.SilentAddr(t), ContextTimeoutEnabled: cte})
			t.Cleanup(func() { c.Close() }) // after the listener's cleanup: closed connections end the call
			b := goredis.New(c).(adapter)
			for _, op := range ops {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				err := op.call(ctx, b)
				cancel()
				t.Logf("%s: %v", op.name, err)
				if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backend.ErrUnavailable) {
					t.Errorf("%s: %v, want context.DeadlineExceeded only", op.name, err)
				}
			}
		})
	}
}

// buildCounter counts the times go-redis builds its hook chain over it: once
// when it is added, and once more for every hook added after it.
type buildCounter struct{ builds atomic.Int32 }

func (h *buildCounter) DialHook(next redis.DialHook) redis.DialHook {
	h.builds.Add(1)
	return next
}
func (h *buildCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *buildCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// New adds one hook to a *redis.Client however many Backends are made
// over it, one to each node client of a *redis.ClusterClient, and none to
// a *redis.Ring or a wrapper.
func TestNewHooksOnce(t *testing.T) {
	t.Run("Client", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t)})
		defer c.Close()
		h := new(buildCounter)
		c.AddHook(h)
		goredis.New(c)
		if n := h.builds.Load(); n != 2 {
			t.Fatalf("after New: the chain was built %d times over the test's hook, want 2 (New adds one hook)", n)
		}
		goredis.New(c)
		goredis.New(c, goredis.WithHealthCheck(time.Second))
		if n := h.builds.Load(); n != 2 {
			t.Errorf("after New three times: the chain was built %d times, want 2 (one hook)", n)
		}
	})
	t.Run("ClusterClient", func(t *testing.T) {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redistest.DeadAddr(t)}})
		defer cc.Close()
		var mu sync.Mutex
		var nodes []*buildCounter
		cc.OnNewNode(func(node *redis.Client) {
			h := new(buildCounter)
			node.AddHook(h)
			mu.Lock()
			nodes = append(nodes, h)
			mu.Unlock()
		})
		b := goredis.New(cc).(adapter)
		goredis.New(cc)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := ops[0].call(ctx, b) // creates the seed's node client
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Errorf("Eval: %v, want ErrUnavailable", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(nodes) == 0 {
			t.Fatal("no node client was created")
		}
		for i, h := range nodes {
			if n := h.builds.Load(); n != 2 {
				t.Errorf("node %d: the chain was built %d times over the test's hook, want 2 (New twice adds one hook)", i, n)
			}
		}
	})
	t.Run("Ring and wrapper", func(t *testing.T) {
		r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redistest.DeadAddr(t)}})
		defer r.Close()
		c := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t)})
		defer c.Close()
		for name, u := range map[string]redis.UniversalClient{"Ring": r, "wrapper": wrapped{c}} {
			h := new(buildCounter)
			u.AddHook(h)
			goredis.New(u)
			if n := h.builds.Load(); n != 1 {
				t.Errorf("%s: the chain was built %d times over the test's hook, want 1 (New adds none)", name, n)
			}
		}
	})
}

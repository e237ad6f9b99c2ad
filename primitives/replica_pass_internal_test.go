package primitives

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/lane"
)

// lateAcker is a backend.ReplicaAcker over a real server whose replicas
// are the test's: every script runs on the server as it is, and WAIT's
// count is made up, 0 for the first unacked grants (an acquire script's
// {1, ...} reply), then the replicas asked for. It keeps a copy of the
// last grant's call, so that a test can run it again: the late copy of
// that attempt.
type lateAcker struct {
	backend.Backend
	mu      sync.Mutex
	unacked int // grants still to report as not acknowledged
	grants  int // grants seen
	calls   int // EvalAck calls seen
	last    evalCopy
}

func (a *lateAcker) EvalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, _ time.Duration) (backend.Value, int, error) {
	v, err := a.Backend.Eval(ctx, s, keys, args)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if r, ok := v.([]backend.Value); err != nil || !ok || len(r) == 0 || r[0] != int64(1) {
		return v, replicas, err // refused, or not an acquire: acknowledged or not, no matter
	}
	a.grants++
	a.last = evalCopy{s, slices.Clone(keys), slices.Clone(args)}
	if a.unacked > 0 {
		a.unacked--
		return v, 0, nil
	}
	return v, replicas, nil
}

func (a *lateAcker) counts() (grants, calls int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.grants, a.calls
}

// clusterAcker is a lateAcker that says it is a Cluster: a MultiLock over
// it takes its names one by one (multiLock.takeEach), each name's script a
// call of its own.
type clusterAcker struct{ *lateAcker }

func (clusterAcker) Cluster() bool { return true }

// passKind is a primitive whose waiting acquisition a replica-ack test
// drives: open makes it on b (its waiting acquisition), block takes it
// from a plain client so that the waiting acquisition has to wait, and
// holders reads from Redis the tokens that hold it.
type passKind struct {
	name    string
	open    func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error)
	block   func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error)
	holders func(ctx context.Context, c *redis.Client, prefix, name string) ([]string, error)
	cluster bool // over a clusterAcker: an attempt is a grant per name
}

func semOpen(limit, n int) func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
	return func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		s, err := NewSemaphore(c, name, limit, opts...)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (latchkit.Lease, error) { return s.AcquireN(ctx, n) }, nil
	}
}

func fairOpen(limit, n int) func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
	return func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		s, err := NewFairSemaphore(c, name, limit, opts...)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (latchkit.Lease, error) { return s.AcquireN(ctx, n) }, nil
	}
}

func rwOpen(write bool) func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
	return func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		rw, err := NewRWLock(c, name, opts...)
		if err != nil {
			return nil, err
		}
		if write {
			return rw.Lock, nil
		}
		return rw.RLock, nil
	}
}

func mutexOpen(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
	m, err := NewMutex(c, name, opts...)
	if err != nil {
		return nil, err
	}
	return m.Lock, nil
}

func multiOpen(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
	m, err := NewMultiLock(c, []string{name + "1", name + "2"}, opts...)
	if err != nil {
		return nil, err
	}
	return m.Lock, nil
}

// semHolders: the holders' zset, and every holder of a weight (the
// weights hash but its waiters' marks, "~" and "!") is one of them.
func semHolders(ctx context.Context, c *redis.Client, prefix, name string) ([]string, error) {
	keys := keyspace.SemLayout.KeysOf(prefix, name)
	hs, err := c.ZRange(ctx, keys[0], 0, -1).Result()
	if err != nil {
		return nil, err
	}
	hs = HolderTokens(hs)
	ws, err := c.HKeys(ctx, keys[3]).Result()
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		if w != "~" && w != "!" && !slices.Contains(hs, w) { // but the waiters' marks
			hs = append(hs, w+" (a weight without a permit)")
		}
	}
	return hs, nil
}

// fairHolders: the holders' hash.
func fairHolders(ctx context.Context, c *redis.Client, prefix, name string) ([]string, error) {
	return c.HKeys(ctx, keyspace.FairLayout.KeysOf(prefix, name)[2]).Result()
}

// rwHolders: the readers, then the writer (whose value is "token fence",
// as a Mutex lock's).
func rwHolders(ctx context.Context, c *redis.Client, prefix, name string) ([]string, error) {
	keys := keyspace.RWLayout.KeysOf(prefix, name)
	hs, err := c.ZRange(ctx, keys[0], 0, -1).Result()
	if err != nil {
		return nil, err
	}
	return appendHolder(ctx, c, HolderTokens(hs), keys[1])
}

func appendString(ctx context.Context, c *redis.Client, hs []string, key string) ([]string, error) {
	w, err := c.Get(ctx, key).Result()
	switch {
	case err == redis.Nil:
		return hs, nil
	case err != nil:
		return nil, err
	}
	return append(hs, w), nil
}

// appendHolder is appendString of a Mutex-layout lock: its holder's token.
func appendHolder(ctx context.Context, c *redis.Client, hs []string, key string) ([]string, error) {
	n := len(hs)
	hs, err := appendString(ctx, c, hs, key)
	if err == nil && len(hs) > n {
		if hs[n], _ = LockHolder(hs[n]); hs[n] == "" {
			hs = hs[:n] // a free marker holds nothing
		}
	}
	return hs, err
}

func mutexHolders(ctx context.Context, c *redis.Client, prefix, name string) ([]string, error) {
	return appendHolder(ctx, c, nil, keyspace.MutexLayout.KeysOf(prefix, name)[0])
}

// multiHolders: each name's lock holder, one entry per name held.
func multiHolders(ctx context.Context, c *redis.Client, prefix, name string) ([]string, error) {
	var hs []string
	for _, n := range []string{name + "1", name + "2"} {
		var err error
		if hs, err = appendHolder(ctx, c, hs, keyspace.MutexLayout.KeysOf(prefix, n)[0]); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

var passKinds = []passKind{
	{"Mutex", mutexOpen, mutexOpen, mutexHolders, false}, // the control: Mutex implements passer
	{"Semaphore", semOpen(1, 1), semOpen(1, 1), semHolders, false},
	{"Semaphore/AcquireN(2)", semOpen(3, 2), semOpen(3, 2), semHolders, false},
	{"FairSemaphore", fairOpen(1, 1), fairOpen(1, 1), fairHolders, false},
	{"FairSemaphore/AcquireN(2)", fairOpen(3, 2), fairOpen(3, 2), fairHolders, false},
	{"RWLock/RLock", rwOpen(false), rwOpen(true), rwHolders, false},
	{"RWLock/Lock", rwOpen(true), rwOpen(false), rwHolders, false},
	{"MultiLock", multiOpen, func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		return mutexOpen(c, name+"1", opts...) // blocked on its first name
	}, multiHolders, false},
	{"MultiLock/Cluster", multiOpen, func(c *Client, name string, opts ...Option) (func(context.Context) (latchkit.Lease, error), error) {
		return mutexOpen(c, name+"1", opts...)
	}, multiHolders, true},
}

// TestReplicaAckRefusedGrantKeepsWaiting: with WithReplicaAck, a waiting
// acquisition whose grant WAIT did not confirm on enough replicas gives
// the grant back and goes on with the same token (see passOn): its next
// attempt must not be taken for a late copy of an attempt whose
// acquisition ended. So once the replicas acknowledge a grant (here: the
// third), the waiting call is granted, long before its deadline, whether
// the primitive was free or held by another client at first; Redis then
// holds it for the returned lease's token alone (the refused grants were
// freed, not left to a token nobody has), its Release succeeds and frees
// it; a late copy of the granting attempt, run after the release, may be
// granted (a release remembers nothing), and then holds for its TTL at
// most: every key expires.
func TestReplicaAckRefusedGrantKeepsWaiting(t *testing.T) {
	lane.ParallelFast(t)
	const unacked = 2
	onFairServers(t, func(t *testing.T, srv fairServer) {
		for _, k := range passKinds {
			for _, blocked := range []bool{false, true} {
				how := "/free"
				if blocked {
					how = "/held first"
				}
				t.Run(k.name+how, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					prefix := "rp:" + k.name + how + ":"
					opts := []Option{WithPrefix(prefix), WithTTL(10 * time.Second)}
					per := 1 // grants per attempt
					acker := &lateAcker{Backend: srv.b, unacked: unacked}
					var b backend.Backend = acker
					if k.cluster {
						per = 2
						acker.unacked = unacked * per
						b = clusterAcker{acker}
					}
					acquire, err := k.open(testClient(t, b), "n", append(opts, WithReplicaAck(1, 50*time.Millisecond))...)
					if err != nil {
						t.Fatal(err)
					}
					var blocker latchkit.Lease
					if blocked {
						block, err := k.block(testClient(t, srv.b), "n", opts...)
						if err != nil {
							t.Fatal(err)
						}
						if blocker, err = block(ctx); err != nil {
							t.Fatalf("blocker: %v", err)
						}
					}
					type result struct {
						l   latchkit.Lease
						err error
					}
					done := make(chan result, 1)
					wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
					defer wcancel()
					start := time.Now()
					go func() {
						l, err := acquire(wctx)
						done <- result{l, err}
					}()
					if blocked {
						time.Sleep(100 * time.Millisecond) // the waiter has found it held
						if err := blocker.Release(ctx); err != nil {
							t.Fatalf("blocker's release: %v", err)
						}
					}
					r := <-done
					grants, calls := acker.counts()
					if r.err != nil {
						t.Fatalf("waiting acquisition after %d grants not acknowledged: %v after %v (%d grants in %d attempts), want granted once a grant is acknowledged",
							unacked*per, r.err, time.Since(start).Round(time.Millisecond), grants, calls)
					}
					if grants != (unacked+1)*per {
						t.Errorf("granted after %d grants, want %d (the first %d not acknowledged)", grants, (unacked+1)*per, unacked*per)
					}
					hs, err := k.holders(ctx, srv.c, prefix, "n")
					if err != nil {
						t.Fatal(err)
					}
					want := []string{r.l.Token()}
					if strings.HasPrefix(k.name, "MultiLock") {
						want = append(want, r.l.Token())
					}
					if !slices.Equal(hs, want) {
						t.Errorf("held in Redis by %q, want by the lease's token %q alone", hs, r.l.Token())
					}
					if err := r.l.Release(ctx); err != nil {
						t.Fatalf("Release of the granted lease: %v", err)
					}
					if hs, err := k.holders(ctx, srv.c, prefix, "n"); err != nil || len(hs) != 0 {
						t.Fatalf("held by %q after the release (%v), want by nobody", hs, err)
					}
					if _, err := srv.b.Eval(ctx, acker.last.s, acker.last.keys, acker.last.args); err != nil {
						t.Fatalf("late copy of the granting attempt: %v", err)
					}
					checkEveryKeyExpires(t, ctx, srv, prefix, "the late copy of the granting attempt")
				})
			}
		}
	})
}

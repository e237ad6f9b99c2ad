// Package kittest checks a primitive written on package kit against the
// rules every built-in keeps (docs/kit.md), on the four drivers: Run is to
// a primitive what contracttest is to a driver. A primitive's run is one
// test: its layout, its limit, and how to make one acquisition of a name
// with the options the harness gives (a prefix of its own per check):
//
//	func TestKitRules(t *testing.T) {
//		kittest.Run(t, kittest.Subject{Layout: &layout, Limit: 3,
//			Acquire: func(ctx context.Context, cl *kit.Client, name string, try bool, opts ...kit.Option) (latchkit.Lease, error) {
//				q, err := New(cl, name, 3, opts...)
//				if err != nil {
//					return nil, err
//				}
//				return q.acquire(ctx, try)
//			}})
//	}
//
// Each check runs against miniredis and, where it is installed,
// redis-server; those that need redis-server (MONITOR, a channel ACL)
// skip on miniredis.
//
// Experimental, as package kit.
package kittest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/drivers"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/kit"
	"github.com/latchkit/latchkit/primitives"
)

// Subject is a primitive under test.
type Subject struct {
	// Layout is the primitive's layout, when it is written on kit: its
	// keys are checked as well as those a grant writes.
	Layout *kit.Layout
	// Acquire makes one acquisition of the primitive named name on cl,
	// opts given to its constructor (they set a prefix per check); try
	// makes a single attempt. It returns the lease, nil where a grant
	// hands out none (a take).
	Acquire func(ctx context.Context, cl *kit.Client, name string, try bool, opts ...kit.Option) (latchkit.Lease, error)
	// Limit is how many acquisitions of a name are granted at once at
	// most (leases held, or takes within a minute): 1 for a lock.
	Limit int
}

// check is one rule, checked on env: nil when the subject keeps it.
type check struct {
	name string
	run  func(ctx context.Context, e *env, s Subject) error
}

var checks = []check{
	{"NeverOverTheLimit", checkLimit},
	{"LostReplyGrantsOnce", checkLostReply},
	{"LateCopyTakesNothing", checkLateCopy},
	{"LostReplyLateCopyTakesNothing", checkLostReplyLateCopy},
	{"GiveBackTwiceHarmless", checkGiveBackTwice},
	{"WrongTypeChangesNothing", checkWrongType},
	{"EveryKeyExpires", checkExpiries},
	{"FencesIncrease", checkFences},
	{"CloseWithdrawsWaiters", checkClose},
	{"FencesFromTheClock", checkFenceClock},
	{"KeysInDeclaredSlots", checkSlot},
	{"PublishRefusedHarmless", checkACL},
}

// Run checks s on every driver against miniredis and, where it is
// installed, redis-server: its grants never exceed the limit, a lost
// reply is retried into one grant, a late copy of a given-up attempt
// (or of a Try whose reply was lost) takes nothing, a give-back applied twice frees what the attempt took
// and nothing more, a key of another type is refused with nothing changed,
// every key it writes expires, fences increase and are never below the
// server's clock (the kit's fence block, not a counter a lost key resets),
// the Client's Close withdraws waiters with latchkit.ErrClosed, and (on
// redis-server) no script touches a key outside the hash slots of the
// keys it was passed, and grants and releases work where an ACL refuses
// every channel.
func Run(t *testing.T, s Subject) {
	if s.Acquire == nil || s.Limit < 1 {
		t.Fatal("kittest: a Subject needs Acquire and a Limit of at least 1")
	}
	m := miniredis.RunT(t)
	type server struct {
		name, addr string
		real       bool
	}
	servers := []server{{"miniredis", m.Addr(), false}}
	if redistest.Available() || redistest.Required() {
		servers = append(servers, server{"redis-server", redistest.Start(t).Addr, true})
	}
	for _, srv := range servers {
		for _, d := range drivers.All {
			t.Run(srv.name+"/"+d.Name, func(t *testing.T) {
				t.Parallel()
				for _, c := range checks {
					t.Run(c.name, func(t *testing.T) {
						e := newEnv(t, srv.addr, srv.real, d.New)
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						if err := c.run(ctx, e, s); err != nil {
							t.Error(err)
						}
					})
				}
			})
		}
	}
}

// env is where a check runs: a server, a driver, a prefix of its own.
type env struct {
	t      testing.TB
	addr   string
	newB   func(t testing.TB, addr string) backend.Backend
	prefix string
	rdb    *redis.Client // the check's own view of the server
	real   bool          // redis-server (else miniredis)
	// commands is the server's COMMAND table, read on first need.
	commands map[string]*redis.CommandInfo
}

func newEnv(t testing.TB, addr string, real bool, newB func(testing.TB, string) backend.Backend) *env {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	p := "kt:" + strings.NewReplacer("/", ":", " ", "_", "{", "(", "}", ")").Replace(t.Name()) + ":"
	return &env{t: t, addr: addr, newB: newB, prefix: p, rdb: rdb, real: real}
}

// client is a new Client on a new backend (wrapped by wrap, when given),
// closed when the check ends.
func (e *env) client(wrap func(backend.Backend) backend.Backend) *kit.Client {
	b := e.newB(e.t, e.addr)
	if wrap != nil {
		b = wrap(b)
	}
	c, err := kit.NewClient(b)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// acquire is s.Acquire of name under the env's prefix.
func (e *env) acquire(ctx context.Context, s Subject, cl *kit.Client, name string, try bool) (latchkit.Lease, error) {
	return s.Acquire(ctx, cl, name, try, primitives.WithPrefix(e.prefix))
}

// keys are the keys under the env's prefix, the Clients' records left out.
func (e *env) keys(ctx context.Context) ([]string, error) {
	var out []string
	iter := e.rdb.Scan(ctx, 0, e.prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	sort.Strings(out)
	return keyspace.WithoutClientRecords(out), iter.Err()
}

// grants makes n Try acquisitions of name, each on a Client of its own,
// at once, and returns how many were granted; an error other than
// ErrNotAcquired is returned.
func (e *env) grants(ctx context.Context, s Subject, name string, n int) (int, error) {
	var (
		granted atomic.Int32
		mu      sync.Mutex
		first   error
		wg      sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		cl := e.client(nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.acquire(ctx, s, cl, name, true)
			switch {
			case err == nil:
				granted.Add(1)
			case !errors.Is(err, latchkit.ErrNotAcquired):
				mu.Lock()
				first = cmp(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return int(granted.Load()), first
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// fill makes Limit Try grants of name, each on a Client of its own (each
// lease extended by a minute and asked its TTL when touch is set), then
// sees a Try beyond the limit refused and a waiting acquisition give up
// after 100 ms; it returns the leases (none for takes).
func fill(ctx context.Context, e *env, s Subject, name string, touch bool) ([]latchkit.Lease, error) {
	var leases []latchkit.Lease
	for i := 0; i < s.Limit; i++ {
		l, err := e.acquire(ctx, s, e.client(nil), name, true)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue
		}
		if touch {
			if err := l.Extend(ctx, time.Minute); err != nil {
				return nil, err
			}
			if _, err := l.TTL(ctx); err != nil {
				return nil, err
			}
		}
		leases = append(leases, l)
	}
	if _, err := e.acquire(ctx, s, e.client(nil), name, true); !errors.Is(err, latchkit.ErrNotAcquired) {
		return nil, fmt.Errorf("a Try beyond the limit: %v, want ErrNotAcquired", err)
	}
	gctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := e.acquire(gctx, s, e.client(nil), name, false)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("a waiting acquisition beyond the limit, given 100ms: %v, want its deadline", err)
	}
	return leases, nil
}

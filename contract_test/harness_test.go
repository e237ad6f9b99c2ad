package contracttest_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	contracttest "github.com/latchkit/latchkit/contract_test"
	"github.com/latchkit/latchkit/internal/redistest"
)

// server is where a harness's clients connect, and what it can do to it.
type server interface {
	addr() string
	advance(d time.Duration) bool
	killSubscribers(t testing.TB) bool
}

// mini is an embedded miniredis whose clock follows real time (so TTLs run
// out as on a real server) and can be moved forward on demand: a ticker sets
// its clock to now+offset every millisecond, with ClockTTL making key expiry
// follow that clock, TIME included.
type mini struct {
	m      *miniredis.Miniredis
	offset atomic.Int64
}

func newMini(t testing.TB) *mini {
	s := &mini{m: miniredis.RunT(t)}
	s.m.SetTime(time.Now())
	s.m.ClockTTL(true)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				s.m.SetTime(time.Now().Add(time.Duration(s.offset.Load())))
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return s
}

func (s *mini) addr() string { return s.m.Addr() }

func (s *mini) advance(d time.Duration) bool {
	s.m.SetTime(time.Now().Add(time.Duration(s.offset.Add(int64(d)))))
	return true
}

// killSubscribers restarts miniredis on the same port, which drops every
// connection (miniredis has no CLIENT KILL); the data stays.
func (s *mini) killSubscribers(t testing.TB) bool {
	s.m.Close()
	if err := s.m.Restart(); err != nil {
		t.Fatalf("restart miniredis: %v", err)
	}
	return true
}

// unreachableAddr is a loopback address nobody listens on.
func unreachableAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// goredisHarness runs the suite through the go-redis adapter.
type goredisHarness struct {
	s server
	// ignoreCtx makes single-server clients without ContextTimeoutEnabled,
	// as most users write them: go-redis then ignores context deadlines,
	// and the adapter bounds each call itself.
	ignoreCtx bool
}

func (h goredisHarness) client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: !h.ignoreCtx,
		DialTimeout:           time.Second,
		DialerRetries:         1, // fail fast on a refused dial; the default is 5 tries
		PoolSize:              64,
	})
}

func (h goredisHarness) NewClient(t testing.TB) contracttest.Client {
	var c redis.UniversalClient
	switch s := h.s.(type) {
	case cluster:
		c = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 s.c.Addrs,
			ContextTimeoutEnabled: true,
			DialTimeout:           time.Second,
			DialerRetries:         1,
			PoolSize:              64,
		})
	case sentinel:
		c = s.goredis()
	default:
		c = h.client(h.s.addr())
	}
	var n atomic.Int64
	c.AddHook(countHook{&n})
	t.Cleanup(func() { c.Close() })
	return contracttest.Client{
		Backend:  goredis.New(c, goredis.WithHealthCheck(time.Second)),
		Close:    c.Close,
		Commands: n.Load,
	}
}

func (h goredisHarness) Unreachable(t testing.TB) backend.Backend {
	c := h.client(unreachableAddr(t))
	t.Cleanup(func() { c.Close() })
	return goredis.New(c)
}

func (h goredisHarness) AdvanceClock(t testing.TB, d time.Duration) bool { return h.s.advance(d) }
func (h goredisHarness) KillSubscribers(t testing.TB) bool               { return h.s.killSubscribers(t) }

// countHook counts the commands a go-redis client sends, pipelined ones
// included.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func TestGoRedisMiniredis(t *testing.T) {
	contracttest.Run(t, goredisHarness{s: newMini(t)})
}

// real is a redis-server started by the test on a free loopback port.
type real struct{ s *redistest.Server }

func newReal(t testing.TB) real { return real{redistest.Start(t)} }

func (r real) addr() string                 { return r.s.Addr }
func (r real) advance(d time.Duration) bool { return false }

func (r real) killSubscribers(t testing.TB) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	return true
}

func TestGoRedisRedisServer(t *testing.T) {
	contracttest.Run(t, goredisHarness{s: newReal(t)})
}

// TestGoRedisIgnoringContexts: the suite through clients without
// ContextTimeoutEnabled, whose every call the adapter runs on a goroutine
// of its own.
func TestGoRedisIgnoringContexts(t *testing.T) {
	contracttest.Run(t, goredisHarness{s: newReal(t), ignoreCtx: true})
}

// rueidisHarness runs the suite through the rueidis adapter.
type rueidisHarness struct {
	s    server
	mini bool // miniredis needs DisableCache and AlwaysRESP2
}

func (h rueidisHarness) option(addr string) rd.ClientOption {
	addrs := []string{addr}
	switch s := h.s.(type) {
	case cluster:
		addrs = s.c.Addrs // rueidis finds out it is a cluster by itself
	case sentinel:
		return s.rueidis()
	}
	return rd.ClientOption{
		InitAddress:  addrs,
		DisableCache: h.mini,
		AlwaysRESP2:  h.mini,
	}
}

func (h rueidisHarness) NewClient(t testing.TB) contracttest.Client {
	var n atomic.Int64
	raw, err := rd.NewClient(h.option(h.s.addr()))
	if err != nil {
		t.Fatal(err)
	}
	c := countRueidis{Client: raw, n: &n}
	var once sync.Once
	closeFn := func() error { once.Do(c.Close); return nil }
	t.Cleanup(func() { closeFn() })
	return contracttest.Client{Backend: lrueidis.New(c), Close: closeFn, Commands: n.Load}
}

// Unreachable connects to a server and then stops it: rueidis refuses to
// create a client for an address that does not answer.
func (h rueidisHarness) Unreachable(t testing.TB) backend.Backend {
	m := miniredis.RunT(t)
	c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, AlwaysRESP2: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	t.Cleanup(c.Close)
	return lrueidis.New(c)
}

func (h rueidisHarness) AdvanceClock(t testing.TB, d time.Duration) bool { return h.s.advance(d) }
func (h rueidisHarness) KillSubscribers(t testing.TB) bool               { return h.s.killSubscribers(t) }

// countRueidis counts the commands a rueidis client sends (EVALSHA and EVAL
// go through Do; the dedicated pub/sub connection is not counted, as with
// go-redis).
type countRueidis struct {
	rd.Client
	n *atomic.Int64
}

func (c countRueidis) Do(ctx context.Context, cmd rd.Completed) rd.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countRueidis) DoMulti(ctx context.Context, multi ...rd.Completed) []rd.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}

func TestRueidisMiniredis(t *testing.T) {
	contracttest.Run(t, rueidisHarness{s: newMini(t), mini: true})
}

func TestRueidisRedisServer(t *testing.T) {
	contracttest.Run(t, rueidisHarness{s: newReal(t)})
}

// cluster is a 3-master Redis Cluster started by the test on loopback.
type cluster struct{ c *redistest.Cluster }

func newCluster(t testing.TB) cluster { return cluster{redistest.StartCluster(t, 3)} }

func (c cluster) addr() string                 { return c.c.Addrs[0] }
func (c cluster) advance(d time.Duration) bool { return false }

func (c cluster) killSubscribers(t testing.TB) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	return true
}

func TestGoRedisCluster(t *testing.T) {
	contracttest.Run(t, goredisHarness{s: newCluster(t)})
}

func TestRueidisCluster(t *testing.T) {
	contracttest.Run(t, rueidisHarness{s: newCluster(t)})
}

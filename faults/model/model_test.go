// Package model_test checks each primitive against a model of it with
// generated sequences (pgregory.net/rapid state machines, issue 28), all
// ten: Mutex, FairMutex, MultiLock and Redlock (mutexkind_test.go: one
// holder at a time, a Redlock over three servers with faults of one
// instance), ReentrantMutex (reentrant_test.go: levels of one owner's
// grant), Semaphore and FairSemaphore (semaphore_test.go), RWLock
// (rwlock_test.go), Latch (latch_test.go) and Election (election_test.go);
// several clients, each on its own driver (go-redis, rueidis, valkey-go, redigo)
// behind its own fault proxy, issue random sequences of every call of a
// primitive (each acquire form, weights, SetLimit, Extend, TTL, Release and
// calls after Release or after expiry) with parameters drawn across their
// range, edges included, while the server's clock moves only when an
// action says "time passes d". Faults are actions too: a reply lost after
// the server ran the call (the proxy runs it and drops the reply; the
// caller gives up, and retries a Release) and whose copy reaches the
// server again after the caller gave up, a client paused while its call
// times out and then resumed (its request reaches the server late, after
// the caller gave up), and a user middleware that panics (before or after
// the attempt) and is recovered by the caller.
//
// After every step the state is checked against the model: who holds and
// how many permits (the holders in Redis are exactly the leases the model
// considers live, so at most the limit, and nothing is held by a token
// nobody has, nor, for a lock, queued for a Lock that gave up), what each call returned (grant or not, wait hints, TTLs,
// the error kinds, fences strictly increasing per name), how many "lease
// lost" records were logged, every key under the test's prefix has an
// expiry, and once no lease is live and the retention and the markers'
// window have passed, nothing remains under the prefix.
//
// The server is a miniredis whose clock is set by the test (SetTime with
// ClockTTL), so expiry happens exactly when the model says; auto-extend is
// off, so nothing renews behind the model's back.
//
// Counts: the fast lane (go test ./faults/model/) runs a small number of
// sequences per primitive (under 35 s for the package); the long lane
// (LATCHKIT_LONG=1) a larger one, sized so that the package takes about 8
// minutes (a 60-step sequence with faults takes about 3 s of real time).
// -rapid.checks=N overrides both, -rapid.steps=N the average length.
//
// Replaying a failure: rapid prints the shrunk sequence and writes a fail
// file under testdata/rapid/; run
//
//	go test ./faults/model/ -run 'TestModel/Mutex' -rapid.failfile=testdata/rapid/...
//
// or -rapid.seed=S with the seed it printed. A failure worth keeping
// becomes a plain regression test (see regress_test.go).
package model_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	rg "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"
	vk "github.com/valkey-io/valkey-go"
	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	lredigo "github.com/latchkit/latchkit/backend/redigo"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	lvalkey "github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/leakcheck"
	"github.com/latchkit/latchkit/primitives"
)

var debug = os.Getenv("MODEL_DEBUG") != ""

// Sequences per primitive in each lane, unless -rapid.checks is given.
const (
	fastChecks = 3
	longChecks = 25
)

func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rapid.checks"] {
		_ = flag.Set("rapid.checks", fmt.Sprint(lane.Pick(fastChecks, longChecks)))
	}
	if !set["rapid.steps"] {
		_ = flag.Set("rapid.steps", fmt.Sprint(lane.Pick(30, 60)))
	}
	if !set["rapid.shrinktime"] {
		// A step with a fault takes up to a few hundred milliseconds of
		// real time: shrinking needs longer than rapid's 30s default.
		_ = flag.Set("rapid.shrinktime", "3m")
	}
	code := m.Run()
	if code == 0 {
		code = leakcheck.Check()
	}
	os.Exit(code)
}

// client is one driver's connection to the server, through its own proxy.
// On a rig of several servers, more are the same driver's connections to
// the others, each through its own proxy too: a fault injected into the
// client is injected into all of them.
type client struct {
	name string
	b    *counting
	px   *faultproxy.Proxy
	more []*client
}

// backends is c's connection to each server.
func (c *client) backends() []backend.Backend {
	out := []backend.Backend{c.b}
	for _, m := range c.more {
		out = append(out, m.b)
	}
	return out
}

// counting is a Backend that counts the scripts it runs, so that a step
// can wait for what a faulted call left running in the background (a
// give-back retried until the server answers) before it checks.
type counting struct {
	backend.Backend
	started, finished atomic.Int64
}

func (c *counting) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	c.started.Add(1)
	defer c.finished.Add(1)
	return c.Backend.Eval(ctx, s, keys, args)
}

// quiesce waits until c (and c.more) has no script in flight and started
// none for a while (at most 3s).
func (c *client) quiesce() {
	deadline := time.Now().Add(3 * time.Second)
	last, since := int64(-1), time.Now()
	for time.Now().Before(deadline) {
		var s, f int64
		for _, cc := range append([]*client{c}, c.more...) {
			s, f = s+cc.b.started.Load(), f+cc.b.finished.Load()
		}
		if s != last || f != s {
			last, since = s, time.Now()
		} else if time.Since(since) > 25*time.Millisecond {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// drivers make a client of addr each.
var drivers = []struct {
	name string
	new  func(t *testing.T, addr string) backend.Backend
}{
	{"go-redis", func(t *testing.T, addr string) backend.Backend {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: time.Second, PoolSize: 4})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c)
	}},
	// rueidis and valkey-go: ForceSingleClient, or they take miniredis's
	// answer to CLUSTER SLOTS for a cluster and connect to the address
	// it names, around the proxy.
	{"rueidis", func(t *testing.T, addr string) backend.Backend {
		c, err := rd.NewClient(rd.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysRESP2: true, ForceSingleClient: true,
			Dialer: net.Dialer{Timeout: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return lrueidis.New(c)
	}},
	{"valkey", func(t *testing.T, addr string) backend.Backend {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysRESP2: true, ForceSingleClient: true,
			Dialer: net.Dialer{Timeout: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return lvalkey.New(c)
	}},
	{"redigo", func(t *testing.T, addr string) backend.Backend {
		p := &rg.Pool{DialContext: func(ctx context.Context) (rg.Conn, error) {
			return rg.DialContext(ctx, "tcp", addr, rg.DialConnectTimeout(time.Second))
		}, MaxIdle: 4}
		t.Cleanup(func() { p.Close() })
		return lredigo.New(p)
	}},
}

// settle waits for every client to quiesce.
func (r *rig) settle() {
	var wg sync.WaitGroup
	for _, c := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.quiesce()
		}()
	}
	wg.Wait()
}

// rig is a server whose clock the test sets and one client per driver
// (or several servers sharing that clock, for a Redlock). One rig serves
// every sequence of a test; each sequence works under its own key prefix.
type rig struct {
	m       *miniredis.Miniredis // the first server
	others  []*miniredis.Miniredis
	now     time.Time // the servers' clock
	clients []*client
	seq     int
}

func newRig(t *testing.T) *rig { return newRigOf(t, 1) }

// newRigOf is a rig of n servers; each client has a connection to each.
func newRigOf(t *testing.T, n int) *rig {
	r := &rig{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range n {
		m := miniredis.RunT(t)
		m.SetTime(r.now)
		m.ClockTTL(true)
		if i == 0 {
			r.m = m
		} else {
			r.others = append(r.others, m)
		}
	}
	for _, d := range drivers {
		var cs []*client
		for _, m := range r.servers() {
			px := faultproxy.Start(t, m.Addr())
			cs = append(cs, &client{name: d.name, b: &counting{Backend: d.new(t, px.Addr)}, px: px})
		}
		cs[0].more = cs[1:]
		r.clients = append(r.clients, cs[0])
	}
	return r
}

// servers is every server of r, the first one first.
func (r *rig) servers() []*miniredis.Miniredis {
	return append([]*miniredis.Miniredis{r.m}, r.others...)
}

// warm runs every call of a primitive once on a scratch name, so that the
// server has each script cached: a lost reply must be that of a script
// that ran, not of the NOSCRIPT answer to its EVALSHA (the resend would
// get NOSCRIPT again, and the script would never run).
func (r *rig) warm(t *testing.T, calls func(ctx context.Context, cl *primitives.Client, opts []primitives.Option) error) {
	r.warmOn(t, 0, calls)
}

// warmOn is warm on the i-th server, through the first client's
// connection to it (a primitives.Client of t's over it).
func (r *rig) warmOn(t *testing.T, i int, calls func(ctx context.Context, cl *primitives.Client, opts []primitives.Option) error) {
	ctx, cancel := ctxFor(callTimeout)
	defer cancel()
	if err := calls(ctx, clienttest.For(t, r.clients[0].backends()[i]), []primitives.Option{primitives.WithPrefix("warm:"), primitives.WithAutoExtend(false)}); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
}

// advance moves the server's clock forward by d.
func (r *rig) advance(d time.Duration) {
	r.now = r.now.Add(d)
	for _, m := range r.servers() {
		m.SetTime(r.now)
	}
}

// begin starts a sequence: a fresh prefix, an hour after the last one.
func (r *rig) begin() string {
	r.seq++
	r.advance(time.Hour)
	return fmt.Sprintf("m%d:", r.seq)
}

// keys returns the keys under prefix (expired ones are gone: miniredis
// expires lazily on access, by the clock the test set).
func (r *rig) keys(prefix string) []string { return keysOn(r.m, prefix) }

// keysOn is keys on the server m.
func keysOn(m *miniredis.Miniredis, prefix string) []string {
	var out []string
	for _, k := range m.Keys() {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// checkExpiries fails t when a key under prefix has no expiry, on any
// server. miniredis reads the key list and each key's TTL separately, and
// reads an absent key's TTL as 0: a key a background give-back deleted
// between the two reads is not one without expiry, so a key counts only
// when it still exists, still without a TTL, on a second look (latchkit
// writes every key with its expiry in one script: a key made again
// meanwhile has one).
func (r *rig) checkExpiries(t *rapid.T, prefix string) {
	for i, m := range r.servers() {
		for _, k := range keysOn(m, prefix) {
			if m.TTL(k) <= 0 && m.Exists(k) && m.TTL(k) <= 0 && m.Exists(k) {
				fail(t, "a key has no expiry", i, k, m.Type(k))
			}
		}
	}
}

// checkEmpty fails t when anything remains under prefix, on any server.
func (r *rig) checkEmpty(t *rapid.T, prefix, why string) {
	var b strings.Builder
	for i, m := range r.servers() {
		for _, k := range keysOn(m, prefix) {
			if keyspace.IsClientRecord(prefix, k) {
				continue // a Client's record: one per Client, not per name, with its own expiry
			}
			fmt.Fprintf(&b, " %d:%s(%s, ttl %v)", i, k, m.Type(k), m.TTL(k))
		}
	}
	if b.Len() > 0 {
		fail(t, why+", yet keys remain", b.String())
	}
}

// eventually polls cond for up to 3s (background give-backs of a faulted
// call run on real time), failing t with what cond last said.
func eventually(t *rapid.T, what string, cond func() string) {
	if msg := await(cond); msg != "" {
		fail(t, what, msg)
	}
}

// await polls cond for up to 3s, returning "" once it holds, else what it
// last said.
func await(cond func() string) string {
	deadline := time.Now().Add(3 * time.Second)
	for {
		msg := cond()
		if msg == "" || time.Now().After(deadline) {
			return msg
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lostLog counts the "lease lost" records of a primitive's logger.
type lostLog struct{ n atomic.Int64 }

func (l *lostLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *lostLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, "lease lost") {
		l.n.Add(1)
	}
	return nil
}
func (l *lostLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lostLog) WithGroup(string) slog.Handler      { return l }

// panicker is a user middleware that panics when told to: before calling
// next, or after next granted (the lease is then dropped on the floor).
type panicker struct {
	mu   sync.Mutex
	when string // "", "before", "after"
}

type panicked struct{}

func (p *panicker) set(when string) {
	p.mu.Lock()
	p.when = when
	p.mu.Unlock()
}

func (p *panicker) mw(next latchkit.Acquire) latchkit.Acquire {
	return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
		p.mu.Lock()
		when := p.when
		p.when = ""
		p.mu.Unlock()
		if when == "before" {
			panic(panicked{})
		}
		l, err := next(ctx, req)
		if when == "after" && err == nil {
			panic(panicked{})
		}
		return l, err
	}
}

// recovered runs f, reporting whether it panicked with panicked{} (any
// other panic goes on).
func recovered(f func()) (did bool) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(panicked); !ok {
				panic(v)
			}
			did = true
		}
	}()
	f()
	return false
}

// ttlDraw draws an Extend's TTL across its range: below MinTTL (refused),
// MinTTL itself, and up to twice the primitive's TTL.
func ttlDraw(t *rapid.T, ttl time.Duration) time.Duration {
	return rapid.SampledFrom([]time.Duration{0, primitives.MinTTL - time.Millisecond, primitives.MinTTL,
		time.Millisecond * time.Duration(rapid.Int64Range(3, int64(2*ttl/time.Millisecond)).Draw(t, "ms")),
		ttl, 2 * ttl}).Draw(t, "extend ttl")
}

// advanceDraw draws how far the clock moves: nothing, a millisecond, up to
// past the TTL, or to just before, at and just after an instant that
// matters (a lease's expiry).
func advanceDraw(t *rapid.T, ttl time.Duration, edges []time.Duration) time.Duration {
	opts := []time.Duration{0, time.Millisecond,
		time.Millisecond * time.Duration(rapid.Int64Range(0, int64(3*ttl/time.Millisecond)).Draw(t, "ms")), ttl + time.Millisecond}
	for _, e := range edges {
		if e > time.Millisecond {
			opts = append(opts, e-time.Millisecond)
		}
		if e > 0 {
			opts = append(opts, e, e+time.Millisecond)
		}
	}
	return rapid.SampledFrom(opts).Draw(t, "d")
}

// errKind names what an error matches, for messages and comparisons.
func errKind(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, latchkit.ErrInvalid):
		return "ErrInvalid"
	case errors.Is(err, latchkit.ErrLeaseLost):
		return "ErrLeaseLost"
	case errors.Is(err, latchkit.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded):
		return "deadline+ErrNotAcquired"
	case errors.Is(err, latchkit.ErrNotAcquired):
		return "ErrNotAcquired"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	default:
		return "other"
	}
}

// want fails t unless err is of kind want. op names the call in the
// failure, detail is logged beside it: the failure's message stays the same
// from run to run (no fence, token or time in it), so that rapid can
// shrink the sequence (it keeps a smaller case only if it fails with the
// same message).
func want(t *rapid.T, op string, err error, want string, detail ...any) {
	if got := errKind(err); got != want {
		fail(t, fmt.Sprintf("%s: got %s, want %s", op, got, want), append([]any{op, "returned", err}, detail...)...)
	}
}

// lateGrant reports whether err says that the machine was too slow for a
// lease of ttl: an attempt's grant came back after the lease's TTL had run
// out by the client's clock, and the wait loop gave it back instead of
// handing it out dead (ErrUnavailable). A single attempt returns that; a
// waiting call tries again, and returns it beside its context's error
// when its deadline came first (every attempt that slow). At the model's
// two short TTLs (MinTTL, 50 ms) a round trip on a loaded machine (the
// race detector, other test binaries beside this one) can take that long;
// at a second or more it would be a failure. A step that meets it checks
// that nothing is left held, and goes on as though it was refused.
func lateGrant(err error, ttl time.Duration) bool {
	return ttl <= 50*time.Millisecond && errors.Is(err, latchkit.ErrUnavailable) &&
		strings.Contains(err.Error(), "the grant's reply came after")
}

// instancesLate reports whether err is a Redlock's refusal because too
// few instances answered within the instance timeout (50 ms at the
// model's 1 s TTL, 100 ms at 10 s): on a loaded machine the reachable ones
// can be that slow. Nothing was granted; the step checks that nothing is
// left held but the model's holder.
func instancesLate(err error) bool {
	return errors.Is(err, latchkit.ErrUnavailable) && strings.Contains(err.Error(), "no answer within the instance timeout")
}

// fail logs detail and fails t with the stable message msg (see want).
//
// The detail goes to standard error as well: when the failure does not
// come back on replay (a timing-dependent one), rapid shows only the
// replay's log, and the first run's detail is the bug report.
func fail(t *rapid.T, msg string, detail ...any) {
	if len(detail) > 0 {
		t.Log(detail...)
		fmt.Fprintln(os.Stderr, append([]any{"model failure:", msg + ":"}, detail...)...)
	}
	t.Fatal(msg)
}

// ctxFor is a context for one call, bounded well above any call's time.
func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// callTimeout bounds a call no fault is injected into; faultTimeout is the
// deadline of a call whose reply is lost or whose client is paused, and
// resendDelay how late the proxy sends its request again.
const (
	callTimeout  = 5 * time.Second
	faultTimeout = 25 * time.Millisecond
	resendDelay  = 60 * time.Millisecond
	// shortWait is the deadline of a waiting call (Lock, Acquire) on a
	// primitive the model says is held: it must give up at it.
	shortWait = 30 * time.Millisecond
)

// scripts matches the commands that run a cached script (see warm).
var scripts = faultproxy.Command("EVALSHA")

// lostReply runs call with the reply of its first script lost: the proxy
// runs the script, drops the reply with the connection, and sends the same
// bytes again resendDelay later on a connection of its own (a late copy,
// faultproxy.LateCopyNext), by which time the call (bounded by
// faultTimeout) has given up and whatever it does on giving up (a
// give-back, a retry in the background) has begun. It returns once the
// copy ran. It reports whether a script ran (a call that made no round
// trip leaves the proxy disarmed).
func (c *client) lostReply(call func(ctx context.Context)) (ran bool) {
	cs := append([]*client{c}, c.more...)
	var rs []*faultproxy.Resend
	for _, cc := range cs {
		rs = append(rs, cc.px.LateCopyNext(scripts, resendDelay))
	}
	ctx, cancel := ctxFor(faultTimeout)
	call(ctx)
	cancel()
	deadline := time.Now().Add(time.Second)
	ranOn := make([]bool, len(rs))
	for i, r := range rs {
		select {
		case <-r.Executed():
			ranOn[i], ran = true, true
		case <-time.After(time.Until(deadline)):
			cs[i].px.ResendNext(func([]string) bool { return false }, 0) // disarm
		}
	}
	if !ran {
		c.quiesce()
		return false
	}
	copied := 0
	for i, r := range rs {
		if !ranOn[i] {
			continue
		}
		select {
		case <-r.Done():
			copied++
		case <-time.After(resendDelay + 2*time.Second):
		}
	}
	c.quiesce()
	if debug {
		fmt.Printf("late copy on %s (%d of %d ran): %q\n", c.name, copied, len(rs), rs[0].Args())
	}
	return true
}

// paused runs call with c's traffic held (a partition): the call gives up
// at faultTimeout; meanwhile runs with c still paused (the clock may move),
// then the held bytes go through, late.
func (c *client) paused(call func(ctx context.Context), meanwhile func()) {
	cs := append([]*client{c}, c.more...)
	for _, cc := range cs {
		cc.px.Blackhole(true)
	}
	ctx, cancel := ctxFor(faultTimeout)
	call(ctx)
	cancel()
	meanwhile()
	for _, cc := range cs {
		cc.px.Blackhole(false)
	}
	c.quiesce()
}

// dump shows what is under prefix, and the model's leases, for a failure's
// message.
func (r *rig) dump(prefix string, ls *leases) string {
	var b strings.Builder
	for _, k := range r.keys(prefix) {
		fmt.Fprintf(&b, "  %s (%s, ttl %v)", k, r.m.Type(k), r.m.TTL(k))
		switch r.m.Type(k) {
		case "string":
			v, _ := r.m.Get(k)
			fmt.Fprintf(&b, " = %q", v)
		case "zset":
			ms, _ := r.m.ZMembers(k)
			for _, m := range ms {
				sc, _ := r.m.ZScore(k, m)
				fmt.Fprintf(&b, " %q:%.0f", m, sc)
			}
		case "hash":
			fs, _ := r.m.HKeys(k)
			for _, f := range fs {
				fmt.Fprintf(&b, " %q=%q", f, r.m.HGet(k, f))
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  now %d ms\n", r.now.UnixMilli())
	fmt.Fprintf(&b, "  actions %s\n", strings.Join(ls.trace, " "))
	for _, l := range ls.all {
		fmt.Fprintf(&b, "  %v token %s state %d exp %d told %v ran %v\n", l, l.l.Token(), l.st, l.exp.UnixMilli(), l.told, l.ran)
	}
	return b.String()
}

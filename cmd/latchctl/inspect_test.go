package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/ratelimit"
)

// traceparent is a holder's W3C trace context, as a tracing middleware
// would store it in a "who" key.
const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceparent = "00-" + traceID + "-00f067aa0ba902b7-01"
)

// holdOpts make leases that stay put for the whole test: no watchdog, a
// TTL far beyond it.
var holdOpts = []primitives.Option{primitives.WithAutoExtend(false), primitives.WithTTL(time.Minute)}

// env is a redis-server of the test's own with a go-redis client on it.
type env struct {
	s  *redistest.Server
	rc *redis.Client
	b  backend.Backend
}

func newEnv(t *testing.T) *env {
	s := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rc.Close() })
	return &env{s: s, rc: rc, b: goredis.New(rc)}
}

// latchctl runs the command line args against the test's server.
func (e *env) latchctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append(args, "-addr", e.s.Addr), &out, &errOut)
	return code, out.String(), errOut.String()
}

// mustRun runs args and fails unless they exit 0.
func (e *env) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := e.latchctl(t, args...)
	if code != 0 {
		t.Fatalf("latchctl %v: exit %d: %s%s", args, code, out, errOut)
	}
	return out
}

func (e *env) do(t *testing.T, args ...any) any {
	t.Helper()
	v, err := e.rc.Do(context.Background(), args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// holderLine finds the output line of the lease with token tok and checks
// that it shows 8 of the token's digits only, its fence, a TTL near a
// minute, its Client (by record, or by id when the Client has written none
// yet) and since when it is held (issue 41, item 1).
func holderLine(t *testing.T, out, role string, l latchkit.Lease) string {
	t.Helper()
	tok := l.Token()
	if strings.Contains(out, tok) {
		t.Fatalf("a whole token is shown:\n%s", out)
	}
	for _, ln := range strings.Split(out, "\n") {
		if !strings.Contains(ln, shortToken(tok)) {
			continue
		}
		if f := strings.Fields(ln); f[0] != role {
			t.Errorf("%s shown as %q, want %s", shortToken(tok), f[0], role)
		}
		if !whoRe.MatchString(ln) {
			t.Errorf("no client: %q", ln)
		}
		since := sinceRe.FindStringSubmatch(ln)
		if since == nil {
			t.Errorf("no since and held: %q", ln)
		} else if at, err := time.Parse("2006-01-02T15:04:05.000Z", since[1]); err != nil || time.Since(at) > time.Minute || time.Until(at) > time.Second {
			t.Errorf("since %s (%v): not the grant's time: %q", since[1], err, ln)
		}
		if !strings.Contains(ln, fmt.Sprintf(" fence=%d ", l.Fence())) {
			t.Errorf("fence %d missing: %q", l.Fence(), ln)
		}
		var ttl time.Duration
		if m := regexp.MustCompile(`  ttl=(\S+)`).FindStringSubmatch(ln); m != nil {
			ttl, _ = time.ParseDuration(m[1])
		}
		if ttl < 50*time.Second || ttl > time.Minute {
			t.Errorf("ttl not near a minute: %q", ln)
		}
		return ln
	}
	t.Fatalf("no line for %s:\n%s", shortToken(tok), out)
	return ""
}

// whoRe matches a holder's or waiter's Client: by its record, or by its id
// when it has none (yet); sinceRe the grant's time and the hold's length.
var (
	whoRe   = regexp.MustCompile(`  client=(\S+ host=\S+ pid=[0-9]+|\? id=[0-9a-f]{12})( |$)`)
	sinceRe = regexp.MustCompile(`  since=(\S+) held=[0-9.]+(ms|s|µs)?`)
)

// listHeads is list's output without the holders and waiters each line
// ends with: kind, state and name.
func listHeads(out string) string {
	var b strings.Builder
	for _, ln := range strings.SplitAfter(out, "\n") {
		if i := strings.Index(ln, "  holders: "); i >= 0 {
			ln = ln[:i] + "\n"
		} else if i := strings.Index(ln, "  waiting: "); i >= 0 {
			ln = ln[:i] + "\n"
		}
		b.WriteString(ln)
	}
	return b.String()
}

// A Mutex's holder: token prefix, fence, TTL and the trace id of its "who"
// key, the kind detected from its keys, through both drivers.
func TestInspectMutex(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), "orders", holdOpts...))
	if err := must[latchkit.Lease](t)(m.Lock(ctx)).Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := must[latchkit.Lease](t)(m.Lock(ctx)) // its fence is in the lock's value
	e.do(t, "SET", keyspace.KeyBase("latch:", "orders")+":who", traceparent, "PX", 60000)
	for _, args := range [][]string{
		{"inspect", "orders"},
		{"inspect", "orders", "-kind", "mutex"},
		{"inspect", "-driver", "rueidis", "orders"},
		{"inspect", "-driver", "redigo", "orders"},
	} {
		out := e.mustRun(t, args...)
		t.Logf("latchctl %v:\n%s", args, out)
		if !strings.HasPrefix(out, fmt.Sprintf("mutex orders: fence %d (the holder's)\n", l.Fence())) || strings.Count(out, "\n") != 2 {
			t.Errorf("%v:\n%s", args, out)
		}
		if ln := holderLine(t, out, "holder", l); !strings.Contains(ln, " trace="+traceID+" ") {
			t.Errorf("%v: no trace id: %q", args, ln)
		}
	}
	// A waiting Lock shows in the queue, after the holder.
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { _, err := m.Lock(wctx); waited <- err }()
	base := keyspace.KeyBase("latch:", "orders")
	deadline := time.Now().Add(10 * time.Second)
	for e.do(t, "ZCARD", base+":q") != int64(1) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not queue")
		}
		time.Sleep(5 * time.Millisecond)
	}
	out := e.mustRun(t, "inspect", "orders")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(strings.TrimSpace(lines[2]), "waiting ") || !strings.Contains(lines[2], "ttl=") {
		t.Errorf("with a queued waiter:\n%s", out)
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Released after the waiter gave its place back: the lock key is a
	// free marker keeping the fence, and the given-back window (the
	// waiter's token is among the given-back ones for a minute); only keys
	// that outlive the leases are left: remembered, as list says (issue
	// 38, finding 10).
	if out := e.mustRun(t, "inspect", "orders"); out != fmt.Sprintf("mutex orders: fence %d (kept by the free lock key until the next grant, or the server's clock passes it)\n  remembered\n", l.Fence()) {
		t.Errorf("released:\n%s", out)
	}
	// Nothing under a name: an error, unless the kind is given.
	if code, _, errOut := e.latchctl(t, "inspect", "nothing"); code != 1 || !strings.Contains(errOut, "no primitive named nothing") {
		t.Errorf("unknown name: exit %d, %s", code, errOut)
	}
	// With a kind, too (issue 38, finding 10): nothing of that kind is
	// under the name.
	if code, out, errOut := e.latchctl(t, "inspect", "nothing", "-kind", "sem"); code != 1 || out != "" ||
		!strings.Contains(errOut, `no semaphore named nothing under prefix "latch:"`) {
		t.Errorf("-kind sem on nothing: exit %d, %q, %s", code, out, errOut)
	}
	// A key of the wrong type is pointed out.
	e.do(t, "HSET", "latch:{broken}", "f", "v")
	if out := e.mustRun(t, "inspect", "broken"); !strings.Contains(out, "warning: latch:{broken} is a hash, not a string") {
		t.Errorf("wrong type:\n%s", out)
	}
}

// An RWLock's readers and a waiting writer's intent, then the writer.
func TestInspectRWLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rw := must[primitives.RWLock](t)(primitives.NewRWLock(clienttest.For(t, e.b), "doc", holdOpts...))
	r1 := must[latchkit.Lease](t)(rw.RLock(ctx))
	r2 := must[latchkit.Lease](t)(rw.RLock(ctx))
	base := keyspace.KeyBase("latch:", "doc") + ":rw"
	e.do(t, "HSET", base+":who", r2.Token(), traceparent)

	got := make(chan latchkit.Lease, 1)
	go func() {
		l, err := rw.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, "the writer's intent", func() bool { return e.do(t, "ZCARD", base+":waiting") == int64(1) })
	intent := e.do(t, "ZRANGE", base+":waiting", 0, 0).([]any)[0].(string)

	out := e.mustRun(t, "inspect", "doc")
	t.Logf("read-held:\n%s", out)
	if ln := holderLine(t, out, "reader", r1); strings.Contains(ln, "trace=") {
		t.Errorf("trace id without a who entry: %q", ln)
	}
	if ln := holderLine(t, out, "reader", r2); !strings.Contains(ln, " trace="+traceID+" ") {
		t.Errorf("no trace id: %q", ln)
	}
	if !regexp.MustCompile(`(?m)^  waiting `+shortToken(intent)+`  ttl=[0-9.]+m?s`+whoRe.String()).MatchString(out) || strings.Contains(out, intent) {
		t.Errorf("writer's intent %s not shown as waiting:\n%s", shortToken(intent), out)
	}
	if !strings.HasPrefix(out, fmt.Sprintf("rwlock doc: fence %d (the highest held)\n", r2.Fence())) || strings.Index(out, shortToken(r1.Token())) > strings.Index(out, shortToken(r2.Token())) {
		t.Errorf("header or order of readers:\n%s", out)
	}

	for _, r := range []latchkit.Lease{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	defer w.Release(ctx)
	out = e.mustRun(t, "inspect", "doc", "-kind", "rw")
	t.Logf("write-held:\n%s", out)
	holderLine(t, out, "writer", w)
	if strings.Count(out, "\n") != 2 {
		t.Errorf("readers or intents left:\n%s", out)
	}
}

// A Semaphore's holders, and a FairSemaphore's holder and queued ticket in
// ticket order; a name with two kinds of primitive shows both.
func TestInspectSemaphores(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sem := must[primitives.Semaphore](t)(primitives.NewSemaphore(clienttest.For(t, e.b), "pool", 3, holdOpts...))
	h1 := must[latchkit.Lease](t)(sem.Acquire(ctx))
	h2 := must[latchkit.Lease](t)(sem.Acquire(ctx))
	defer h1.Release(ctx)
	defer h2.Release(ctx)
	e.do(t, "HSET", keyspace.KeyBase("latch:", "pool")+":sem:who", h1.Token(), traceparent)
	out := e.mustRun(t, "inspect", "pool")
	t.Logf("semaphore:\n%s", out)
	if ln := holderLine(t, out, "holder", h1); !strings.Contains(ln, " trace="+traceID+" ") {
		t.Errorf("no trace id: %q", ln)
	}
	holderLine(t, out, "holder", h2)
	if !strings.HasPrefix(out, fmt.Sprintf("semaphore pool: fence %d (the highest held)\n", h2.Fence())) || strings.Count(out, "\n") != 3 {
		t.Errorf("semaphore:\n%s", out)
	}

	// The same name as a FairSemaphore of one permit, with a waiter.
	fair := must[primitives.Semaphore](t)(primitives.NewFairSemaphore(clienttest.For(t, e.b), "pool", 1, holdOpts...))
	f1 := must[latchkit.Lease](t)(fair.Acquire(ctx))
	defer f1.Release(ctx)
	base := keyspace.KeyBase("latch:", "pool") + ":fair"
	e.do(t, "HSET", base+":who", f1.Token(), traceparent)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := fair.Acquire(wctx)
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("waiter: %v", err)
		}
	}()
	waitFor(t, "a queued ticket", func() bool { return e.do(t, "ZCARD", base+":queue") == int64(2) })
	waiter := e.do(t, "ZRANGE", base+":queue", 1, 1).([]any)[0].(string)

	out = e.mustRun(t, "inspect", "pool", "-kind", "fairsem")
	t.Logf("fair semaphore:\n%s", out)
	if ln := holderLine(t, out, "holder", f1); !strings.Contains(ln, " ticket=1 ") || !strings.Contains(ln, " trace="+traceID+" ") {
		t.Errorf("holder: %q", ln)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || lines[0] != fmt.Sprintf("fair_semaphore pool: fence %d (the highest held)", f1.Fence()) ||
		!regexp.MustCompile(`^  waiting `+shortToken(waiter)+`  ticket=2  ttl=[0-9.]+m?s`+whoRe.String()).MatchString(lines[2]) || strings.Contains(out, waiter) {
		t.Errorf("want the holder, then ticket 2 of %s waiting:\n%s", shortToken(waiter), out)
	}

	// Without -kind both kinds of "pool" show.
	out = e.mustRun(t, "inspect", "pool")
	if !strings.Contains(out, "\nsemaphore pool: ") && !strings.HasPrefix(out, "semaphore pool: ") || !strings.Contains(out, "fair_semaphore pool: ") || strings.Contains(out, "mutex pool") {
		t.Errorf("both kinds:\n%s", out)
	}
}

// list finds every primitive once, names unescaped, over several SCAN
// pages, and never uses KEYS.
func TestList(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	odd := "a{b}%c" // escaped in its keys
	m := must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), odd, holdOpts...))
	l := must[latchkit.Lease](t)(m.Lock(ctx))
	defer l.Release(ctx)
	freed := must[latchkit.Lease](t)(must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), "freed", holdOpts...)).Lock(ctx))
	if err := freed.Release(ctx); err != nil { // it leaves a free marker of a millisecond, then nothing
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	rw := must[primitives.RWLock](t)(primitives.NewRWLock(clienttest.For(t, e.b), "doc", holdOpts...))
	defer must[latchkit.Lease](t)(rw.RLock(ctx)).Release(ctx)
	defer must[latchkit.Lease](t)(rw.RLock(ctx)).Release(ctx)
	sem := must[primitives.Semaphore](t)(primitives.NewSemaphore(clienttest.For(t, e.b), "pool", 5, holdOpts...))
	defer must[latchkit.Lease](t)(sem.Acquire(ctx)).Release(ctx)
	fair := must[primitives.Semaphore](t)(primitives.NewFairSemaphore(clienttest.For(t, e.b), "pool", 5, holdOpts...))
	defer must[latchkit.Lease](t)(fair.Acquire(ctx)).Release(ctx)
	gate := must[primitives.Latch](t)(primitives.NewLatch(clienttest.For(t, e.b), "gate"))
	if ok, err := gate.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	other := must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), "elsewhere", append(holdOpts, primitives.WithPrefix("latch:x:"))...))
	defer must[latchkit.Lease](t)(other.Lock(ctx)).Release(ctx)
	// Filler: 2500 keys under the prefix that no primitive made.
	args := []any{"MSET", "latch:{doc}:unknown", "x", "other:{y}", "x"}
	for i := range 2500 {
		args = append(args, fmt.Sprintf("latch:filler:%d", i), "x")
	}
	e.do(t, args...)

	before := must[map[string]int64](t)(e.s.CommandStats(ctx))
	out := e.mustRun(t, "list")
	after := must[map[string]int64](t)(e.s.CommandStats(ctx))
	held := regexp.MustCompile(`  holders: (\S+@\S+:[0-9]+|\?[0-9a-f]{12}) since \S+ \(held [0-9.]+(ms|s|µs)?\)`)
	for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(ln, " held ") != held.MatchString(ln) {
			t.Errorf("a held primitive's line names its holders, since when and for how long, and no other does: %q", ln)
		}
	}
	out = listHeads(out)
	// "freed" left nothing (a release writes only its lock's marker, for
	// a millisecond); the latch set to 2 is closed.
	want := "mutex           held       a{b}%c\nrwlock          held       doc\nlatch           closed     gate\nfair_semaphore  held       pool\nsemaphore       held       pool\n"
	if out != want {
		t.Errorf("list:\n%s\nwant:\n%s", out, want)
	}
	if scans := after["scan"] - before["scan"]; scans < 3 || after["keys"] != 0 {
		t.Errorf("%d SCAN calls over 2500+ keys at COUNT 1000, %d KEYS", scans, after["keys"])
	}
	if out := listHeads(e.mustRun(t, "list", "-prefix", "latch:x:")); out != "mutex           held       elsewhere\n" {
		t.Errorf("list -prefix latch:x:\n%s", out)
	}
}

// dumps is the DUMP of every key matching pattern, and whether it
// expires, read by SCAN.
func (e *env) dumps(t *testing.T, pattern string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := e.rc.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		out[k] = fmt.Sprintf("%q expires=%v", e.do(t, "DUMP", k), e.do(t, "PTTL", k) != int64(-1))
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// release refuses without -force and a matching -confirm, and then changes
// nothing: no key, and no script, DEL or PUBLISH reaches the server.
func TestReleaseRefuses(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), "stuck", holdOpts...))
	l := must[latchkit.Lease](t)(m.Lock(ctx))
	defer l.Release(ctx)
	before := e.dumps(t, "*")
	stats := must[map[string]int64](t)(e.s.CommandStats(ctx))
	for _, args := range [][]string{
		{"release", "stuck", "-kind", "mutex"},
		{"release", "stuck", "-kind", "mutex", "-confirm", "stuck"},
		{"release", "stuck", "-kind", "mutex", "-force"},
		{"release", "stuck", "-kind", "mutex", "-force", "-confirm", "stuk"},
		{"release", "stuck", "-force", "-confirm", "stuck"},
	} {
		code, out, errOut := e.latchctl(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "-kind") && !strings.Contains(errOut, "nothing was changed") {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	after := must[map[string]int64](t)(e.s.CommandStats(ctx))
	for _, c := range []string{"eval", "evalsha", "del", "publish"} {
		if after[c] != stats[c] {
			t.Errorf("%s ran: %d -> %d", c, stats[c], after[c])
		}
	}
	if got := e.dumps(t, "*"); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("keys changed:\n%v\n->\n%v", before, got)
	}
	if _, err := l.TTL(ctx); err != nil {
		t.Errorf("the holder lost its lease: %v", err)
	}
}

// A forced release of each kind deletes every key but the finished (or
// given-back) tokens, which keep the holder's fence; the holder's lease is
// gone; a waiter blocked on the primitive wakes and gets it, with the next
// fence.
func TestReleaseForce(t *testing.T) {
	type acquirer func(context.Context) (latchkit.Lease, error)
	e := newEnv(t)
	ctx := context.Background()
	for _, c := range []struct {
		kind  string
		build func(name string) acquirer
	}{
		{"mutex", func(name string) acquirer {
			return must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), name, holdOpts...)).Lock
		}},
		{"rwlock", func(name string) acquirer {
			return must[primitives.RWLock](t)(primitives.NewRWLock(clienttest.For(t, e.b), name, holdOpts...)).Lock
		}},
		{"semaphore", func(name string) acquirer {
			return must[primitives.Semaphore](t)(primitives.NewSemaphore(clienttest.For(t, e.b), name, 1, holdOpts...)).Acquire
		}},
		{"fair_semaphore", func(name string) acquirer {
			return must[primitives.Semaphore](t)(primitives.NewFairSemaphore(clienttest.For(t, e.b), name, 1, holdOpts...)).Acquire
		}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			name := "stuck " + c.kind
			acquire := c.build(name)
			k := must[*kind](t)(kindByName(kinds, c.kind))
			base := keyspace.KeyBase("latch:", name)
			release := []string{"release", name, "-kind", c.kind, "-force", "-confirm", name}

			// Without a waiter: only the finished tokens are left, with
			// the fence.
			old := must[latchkit.Lease](t)(acquire(ctx))
			if c.kind == "mutex" {
				e.do(t, "SET", base+":who", traceparent, "PX", 60000)
			} else {
				e.do(t, "HSET", base+k.sub+":who", old.Token(), traceparent)
			}
			out := e.mustRun(t, release...)
			t.Logf("%s", out)
			var left []string
			for key := range e.dumps(t, globEscape(base)+"*") {
				left = append(left, key)
			}
			if k.lockFence {
				// The fence was the lock's: kept in a free marker of the
				// lock key (see keyspace.ParseLock).
				lock := base + k.sub
				if !strings.Contains(out, fmt.Sprintf("kept the fence (%d) in the free lock key %s", old.Fence(), strconv.Quote(lock))) {
					t.Errorf("output:\n%s", out)
				}
				kept := keyspace.ParseLock(fmt.Sprint(e.do(t, "GET", lock)))
				if len(left) != 1 || left[0] != lock || kept.Owner != "" || kept.Fence != old.Fence() {
					t.Errorf("keys left: %v, lock key %+v; want only %s, a free marker keeping %d", left, kept, lock, old.Fence())
				}
			} else {
				// The fence was the holder's: kept beside the given-back
				// tokens.
				gone := base + k.sub + k.givenBack
				if !strings.Contains(out, fmt.Sprintf("kept the fence (%d) beside the given-back tokens %s", old.Fence(), strconv.Quote(gone))) {
					t.Errorf("output:\n%s", out)
				}
				kept, _ := strconv.ParseFloat(fmt.Sprint(e.do(t, "ZSCORE", gone, "#")), 64)
				if len(left) != 1 || left[0] != gone || int64(kept) != old.Fence() {
					t.Errorf("keys left: %v, fence kept %v; want only %s keeping %d", left, kept, gone, old.Fence())
				}
			}
			if _, err := old.TTL(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
				t.Errorf("old holder's TTL: %v, want ErrLeaseLost", err)
			}

			// With a waiter blocked on the holder: it wakes and gets the
			// next fence long before the holder's minute is up.
			held := must[latchkit.Lease](t)(acquire(ctx))
			if held.Fence() <= old.Fence() {
				t.Errorf("fence after release %d, want above %d", held.Fence(), old.Fence())
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			got := make(chan latchkit.Lease, 1)
			go func() {
				l, err := acquire(wctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			channel := k.channel(base)
			waitFor(t, "the waiter to subscribe", func() bool {
				return e.do(t, "PUBSUB", "NUMSUB", channel).([]any)[1] == int64(1)
			})
			start := time.Now()
			e.mustRun(t, release...)
			l := <-got
			if l == nil {
				t.FailNow()
			}
			defer l.Release(ctx)
			if l.Fence() <= held.Fence() || time.Since(start) > 10*time.Second {
				t.Errorf("waiter got fence %d after %v; want above %d", l.Fence(), time.Since(start), held.Fence())
			}
		})
	}
}

// Bad input is refused before anything connects: exit status 2 and a
// message that says what is wrong.
func TestInspectBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect"}, "missing NAME"},
		{[]string{"inspect", ""}, "empty NAME"},
		{[]string{"inspect", "x", "-kind", "lock"}, `-kind "lock": want mutex, rwlock, semaphore, fair_semaphore, election or latch`},
		{[]string{"inspect", "x", "y"}, `unexpected argument "y"`},
		{[]string{"inspect", "x", "-prefix", "a{"}, `-prefix "a{"`},
		{[]string{"inspect", "x", "-addr", ""}, "-addr is empty"},
		{[]string{"inspect", "x", "-driver", "nosuchdriver"}, `-driver "nosuchdriver"`},
		{[]string{"inspect", "x", "-bogus"}, "flag provided but not defined"},
		{[]string{"list", "x"}, `unexpected argument "x"`},
		{[]string{"release"}, "missing NAME"},
		{[]string{"release", "", "-kind", "mutex", "-force", "-confirm", ""}, "empty NAME"},
		{[]string{"release", "x", "-kind", "lock", "-force", "-confirm", "x"}, `-kind "lock"`},
		{[]string{"release", "x", "-force", "-confirm", "x"}, "release needs -kind"},
		{[]string{"release", "x", "-kind", "mutex", "-force"}, "refusing to release mutex x"},
	} {
		var out, errOut bytes.Buffer
		// An address nothing listens on: these must fail before dialing.
		args := append([]string{c.args[0], "-addr", "127.0.0.1:1"}, c.args[1:]...)
		code := run(context.Background(), args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("latchctl %q: exit %d, %q; want exit 2 mentioning %q", c.args, code, errOut.String(), c.want)
		}
	}
	// "--" ends the flags: a name may start with "-".
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"release", "-kind", "mutex", "--", "-x"}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "refusing to release mutex -x") {
		t.Errorf("--: exit %d, %s", code, errOut.String())
	}
	if code := run(context.Background(), []string{"inspect", "-h"}, &out, &errOut); code != 0 ||
		!strings.Contains(errOut.String(), "usage: latchctl inspect NAME") {
		t.Errorf("-h: exit %d, %s", code, errOut.String())
	}
}

// A latch: its count and the count set, open or closed, the time its key
// has left and the calls it recorded; detected from its key, with -kind,
// through every driver; a latch never set is open; a key of the wrong
// type is pointed out.
func TestInspectLatch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l := must[primitives.Latch](t)(primitives.NewLatch(clienttest.For(t, e.b), "shards"))
	if ok, err := l.TrySetCount(ctx, 8); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	for i := 0; i < 5; i++ {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	closed := regexp.MustCompile(`^latch shards: count 3 of 8\n  closed  ttl=(23h59m[0-9.]+s|24h0m0s)  count-downs=5  sets=1\n$`)
	for _, args := range [][]string{
		{"inspect", "shards"},
		{"inspect", "shards", "-kind", "latch"},
		{"inspect", "-driver", "rueidis", "shards"},
		{"inspect", "-driver", "redigo", "shards"},
	} {
		out := e.mustRun(t, args...)
		t.Logf("latchctl %v:\n%s", args, out)
		if !closed.MatchString(out) {
			t.Errorf("%v:\n%s", args, out)
		}
	}
	for i := 0; i < 4; i++ { // the fourth at zero: a no-op, not recorded
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	out := e.mustRun(t, "inspect", "shards")
	t.Logf("at zero:\n%s", out)
	if !regexp.MustCompile(`^latch shards: count 0 of 8\n  open  ttl=(59\.|1m0s)[0-9.]*s?  count-downs=8  sets=1\n$`).MatchString(out) {
		t.Errorf("at zero:\n%s", out)
	}
	// A latch never set has no key: inspect says there is no latch (and
	// that such a latch is open), and fails (issue 38, finding 10).
	if code, out, errOut := e.latchctl(t, "inspect", "never", "-kind", "latch"); code != 1 || out != "" ||
		!strings.Contains(errOut, `no latch named never under prefix "latch:"`) || !strings.Contains(errOut, "open") {
		t.Errorf("-kind latch on a latch never set: exit %d, %q, %s", code, out, errOut)
	}
	if code, _, errOut := e.latchctl(t, "inspect", "never"); code != 1 || !strings.Contains(errOut, "no primitive named never") {
		t.Errorf("a latch never set, without -kind: exit %d, %s", code, errOut)
	}
	e.do(t, "SET", "latch:{bad}:latch", "x")
	if out := e.mustRun(t, "inspect", "bad"); !strings.Contains(out, "warning: latch:{bad}:latch is a string, not a hash") {
		t.Errorf("wrong type:\n%s", out)
	}
}

// A forced release of a latch deletes its key and wakes its waiters,
// which return: the latch is open.
func TestReleaseForceLatch(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := must[primitives.Latch](t)(primitives.NewLatch(clienttest.For(t, e.b), "stuck"))
	if ok, err := l.TrySetCount(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	channel := keyspace.LatchLayout.Channel("latch:", "stuck")
	waitFor(t, "the waiter to subscribe", func() bool {
		return e.do(t, "PUBSUB", "NUMSUB", channel).([]any)[1] == int64(1)
	})
	start := time.Now()
	out := e.mustRun(t, "release", "stuck", "-kind", "latch", "-force", "-confirm", "stuck")
	t.Logf("%s", out)
	if out != "released latch stuck: deleted 1 keys, woke waiters on latch:{stuck}:latch:rel\nthe latch is open: its waiters return\n" {
		t.Errorf("output:\n%s", out)
	}
	if err := <-done; err != nil || time.Since(start) > 5*time.Second {
		t.Errorf("the waiter returned %v after the release: %v", time.Since(start), err)
	}
	if left := e.dumps(t, "latch:{stuck}*"); len(left) != 0 {
		t.Errorf("keys left: %v", left)
	}
}

// TestInspectKindNotThere (issue 38, finding 10): inspect -kind K on a name
// that holds no K says so, and what the name does hold, and exits 1, for
// every kind; it printed "count 0 / open" for -kind latch on a mutex, and
// exited 0.
func TestInspectKindNotThere(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), "orders", holdOpts...))
	defer must[latchkit.Lease](t)(m.Lock(ctx)).Release(ctx)
	for _, k := range kinds {
		if k.name == "mutex" {
			continue
		}
		code, out, errOut := e.latchctl(t, "inspect", "orders", "-kind", k.name)
		if code != 1 || out != "" || !strings.Contains(errOut, fmt.Sprintf("no %s named orders under prefix \"latch:\"", k.name)) ||
			!strings.Contains(errOut, "it holds a mutex") {
			t.Errorf("-kind %s on a mutex: exit %d, stdout %q, stderr %s", k.name, code, out, errOut)
		}
	}
}

// TestListStateIsInspects (issue 38, finding 10): list and inspect say
// the same state of a name: list called an open latch "held" where
// inspect said "open". For each line of list, inspect of that name and
// kind shows a holder when list says held, else a line with list's word.
func TestListStateIsInspects(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cl := clienttest.For(t, e.b)
	open := must[primitives.Latch](t)(primitives.NewLatch(cl, "gate-open"))
	closed := must[primitives.Latch](t)(primitives.NewLatch(cl, "gate-closed"))
	for _, l := range []primitives.Latch{open, closed} {
		if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
			t.Fatalf("TrySetCount: %v, %v", ok, err)
		}
	}
	for range 2 {
		if err := open.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m := must[primitives.Mutex](t)(primitives.NewMutex(cl, "held", holdOpts...))
	defer must[latchkit.Lease](t)(m.Lock(ctx)).Release(ctx)
	freed := must[primitives.Mutex](t)(primitives.NewMutex(cl, "freed", holdOpts...))
	if err := must[latchkit.Lease](t)(freed.Lock(ctx)).Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // its free marker lives a millisecond
	sem := must[primitives.Semaphore](t)(primitives.NewSemaphore(cl, "pool", 2, holdOpts...))
	if err := must[latchkit.Lease](t)(sem.Acquire(ctx)).Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sem.SetLimit(ctx, 3); err != nil { // a stored limit: what keeps "pool" remembered
		t.Fatal(err)
	}

	out := listHeads(e.mustRun(t, "list"))
	want := "latch           closed     gate-closed\nlatch           open       gate-open\nmutex           held       held\nsemaphore       remembered pool\n"
	if out != want {
		t.Errorf("list:\n%s\nwant:\n%s", out, want)
	}
	holder := regexp.MustCompile(`(?m)^  (holder|writer|reader|leader) `)
	for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(ln)
		kind, state, name := f[0], f[1], f[2]
		in := e.mustRun(t, "inspect", name, "-kind", kind)
		if state == "held" && !holder.MatchString(in) ||
			state != "held" && !regexp.MustCompile(`(?m)^  `+state+`\b`).MatchString(in) {
			t.Errorf("list says %s %s is %s; inspect says:\n%s", kind, name, state, in)
		}
	}
}

// inspect and list show a primitive written on package kit, given its
// layout (-layout): its keys, and the Client of each member that is a
// token, by name.
func TestInspectKitLayout(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cl, err := primitives.NewClient(e.b, primitives.WithClientName("limiter-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	l, err := ratelimit.New(cl, "api", 2, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // the third waits for room: a Client busy for a second writes its record
		if err := l.Take(ctx); err != nil {
			t.Fatal(err)
		}
	}
	id := cl.Identity().ID
	waitFor(t, "the Client's record", func() bool { return e.do(t, "EXISTS", keyspace.ClientRecordKey("latch:", id)) == int64(1) })
	const layout = "rate_limiter:log=:rl/zset,gone=:rl:gone/zset"
	out := e.mustRun(t, "inspect", "api", "-layout", layout)
	t.Logf("inspect:\n%s", out)
	if !strings.HasPrefix(out, "rate_limiter api: \n  key log (:rl): zset 1 members ttl=") || !strings.Contains(out, "  member  ") || !strings.Contains(out, "client=limiter-test") {
		t.Errorf("inspect of a rate limiter:\n%s", out)
	}
	if code, _, stderr := e.latchctl(t, "inspect", "api"); code == 0 || !strings.Contains(stderr, "no primitive named api") {
		t.Errorf("inspect without -layout: exit %d, %s", code, stderr)
	}
	list := e.mustRun(t, "list", "-layout", layout)
	if !strings.Contains(list, "rate_limiter") || !strings.Contains(list, "in use") || !strings.Contains(list, " api") {
		t.Errorf("list:\n%s", list)
	}
	for _, bad := range []string{"nokind", "k:log", "k:log=:rl/stream", "k:a=:x/zset,b=:x/hash", "mutex:a=:q/zset", "x:a=/string"} {
		if code, _, stderr := e.latchctl(t, "inspect", "api", "-layout", bad); code != 2 || !strings.Contains(stderr, "-layout") {
			t.Errorf("-layout %q: exit %d, %s", bad, code, stderr)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/primitives"
)

var update = flag.Bool("update", false, "rewrite testdata/top.golden")

// topState writes, in the key layouts, a fixed state of primitives and
// Client records, at the server time now: held locks of every kind, live
// and dead waiters, an expired semaphore holder, a latch, a remembered
// name and a key no primitive made.
func topState(t *testing.T, m *miniredis.Miniredis, now time.Time) {
	t.Helper()
	us := func(ago time.Duration) string { return strconv.FormatInt(now.Add(-ago).UnixMicro(), 10) }
	ms := func(in time.Duration) float64 { return float64(now.Add(in).UnixMilli()) }
	tok := func(id string, n int) string { return fmt.Sprintf("%s%08x%012x", id, uint32(n)*2654435761, n) }
	const billing, api, gone = "a1a1a1a1a1a1", "b2b2b2b2b2b2", "c3c3c3c3c3c3"
	for id, r := range map[string]keyspace.ClientRecord{
		billing: {Name: "billing-worker", Host: "web-1", PID: 4121, Started: now.Add(-3 * time.Hour)},
		api:     {Name: "api", Host: "web-2", PID: 77, Started: now.Add(-time.Hour)},
	} {
		m.Set(keyspace.ClientRecordKey("latch:", id), r.Encode())
	}
	base := func(name string) string { return keyspace.KeyBase("latch:", name) }
	set := func(k, v string) { m.Set(k, v); m.SetTTL(k, 10*time.Second) }
	set(base("invoice:42"), tok(billing, 1)+" "+us(7*time.Minute+12*time.Second))
	for i, in := range []time.Duration{3 * time.Second, 2 * time.Second, time.Second, -time.Second} { // the last one dead
		m.ZAdd(base("invoice:42")+":qlive", ms(in), tok(api, 100+i)+" inbox")
		m.ZAdd(base("invoice:42")+":q", float64(i+1), tok(api, 100+i)+" inbox")
	}
	set(base("report:daily"), tok(gone, 2)+" "+us(2*time.Hour))
	for i, h := range []struct {
		ago, in time.Duration
	}{{30 * time.Second, 5 * time.Second}, {2 * time.Second, 5 * time.Second}, {time.Minute, -100 * time.Millisecond}} {
		m.ZAdd(base("pool")+":sem", ms(h.in), tok(api, 200+i))
		f, _ := strconv.ParseFloat(us(h.ago), 64)
		m.ZAdd(base("pool")+":sem", f, "#"+tok(api, 200+i)) // its fence (see holdersOf)
	}
	m.HSet(base("exports")+":fair:holders", tok(billing, 5), us(10*time.Minute))
	for i := range 3 {
		m.ZAdd(base("exports")+":fair:queue", float64(i+1), tok(billing, 5+i))
	}
	set(base("doc")+":rw:writer", tok(api, 9)+" "+us(time.Second))
	m.ZAdd(base("doc")+":rw:waiting", ms(2*time.Second), tok(billing, 10))
	set(base("scheduler")+":el", tok(billing, 11)+" "+us(6*time.Minute))
	m.ZAdd(base("scheduler")+":el:qlive", ms(time.Second), tok(api, 12)+" inbox")
	m.HSet(base("gate")+":latch", "count", "2")
	m.ZAdd(base("old")+":gone", ms(0), tok(api, 13))
	m.Set("latch:filler", "x")
}

// TestTopGolden (issue 41, item 2): top -once on a fixed state (a
// miniredis whose clock stands still) prints testdata/top.golden: the
// names with the most waiters (live ones only), the longest-held leases
// with their holders' Clients (an expired semaphore holder left out, a
// Client without a record shown by id), and those held over -held-over.
func TestTopGolden(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	m.SetTime(now)
	topState(t, m, now)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"top", "-once", "-interval", "1ms", "-held-over", "5m", "-addr", m.Addr()}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	got := strings.ReplaceAll(out.String(), m.Addr(), "ADDR")
	if *update {
		if err := os.WriteFile("testdata/top.golden", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/top.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("top -once:\n%s\nwant (testdata/top.golden):\n%s", got, want)
	}
	if !regexp.MustCompile(`^latchctl top: scanned \d+ keys, read 6 names in \d+ scripts, in \S+; hand-overs counted over \S+s\n$`).MatchString(errOut.String()) {
		t.Errorf("stderr: %q", errOut.String())
	}
}

// TestTopEmpty: top -once on a server without primitives says so, at the
// server's time.
func TestTopEmpty(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"top", "-once", "-interval", "1ms", "-addr", m.Addr()}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "server time 2026-11-29T12:00:00Z\n0 primitives: 0 held, 0 waiters\n") {
		t.Errorf("exit %d:\n%s%s", code, out.String(), errOut.String())
	}
}

// TestTopProcess (issue 41, item 2): top -once, run as a process on a
// redis-server, reads a keyspace larger than its per-refresh budget over
// several refreshes (SCAN, never KEYS), finds every held name, ranks the
// name with waiters first, and counts the hand-overs of a contended lock.
func TestTopProcess(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cl, err := primitives.NewClient(e.b, primitives.WithClientName("top-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	for i := range 300 {
		mu := must[primitives.Mutex](t)(primitives.NewMutex(cl, "job:"+strconv.Itoa(i), holdOpts...))
		defer must[primitives.Lease](t)(mu.Lock(ctx)).Release(ctx)
	}
	hot := must[primitives.Mutex](t)(primitives.NewMutex(cl, "hot", primitives.WithTTL(10*time.Second)))
	held := must[primitives.Lease](t)(hot.Lock(ctx))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // waiters that pass the lock on as soon as they get it
		for range 3 {
			go func() {
				for wctx.Err() == nil {
					if l, err := hot.Lock(wctx); err == nil {
						l.Release(ctx)
					}
				}
			}()
		}
	}()
	waitFor(t, "3 queued waiters", func() bool { return e.do(t, "ZCARD", keyspace.KeyBase("latch:", "hot")+":q") == int64(3) })

	before := must[map[string]int64](t)(e.s.CommandStats(ctx))
	code, out, errOut := latchctlProcess(t, "top", "-once", "-budget", "50", "-rows", "3", "-addr", e.s.Addr)
	after := must[map[string]int64](t)(e.s.CommandStats(ctx))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	t.Logf("top -once:\n%s%s", out, errOut)
	if !strings.Contains(out, "301 primitives: 301 held, 3 waiters\n") || !regexp.MustCompile(`(?m)^MOST WAITERS\n +3  mutex +hot  \(held by top-test@\S+:\d+\)$`).MatchString(out) {
		t.Errorf("top does not find every held name, or the waiters of hot")
	}
	if n := after["scan"] - before["scan"]; n < 6 || after["keys"] != before["keys"] {
		t.Errorf("%d SCANs for 600+ keys at a budget of 50, %d KEYS", n, after["keys"]-before["keys"])
	}
	cancel()
	held.Release(ctx)

	// Hand-overs: the lock passes from waiter to waiter while top counts.
	var waiters [3]chan struct{}
	for i := range waiters {
		waiters[i] = make(chan struct{})
	}
	pass, pcancel := context.WithCancel(ctx)
	defer pcancel()
	for i := range waiters {
		go func() {
			defer close(waiters[i])
			for pass.Err() == nil {
				if l, err := hot.Lock(pass); err == nil {
					time.Sleep(2 * time.Millisecond)
					l.Release(ctx)
				}
			}
		}()
	}
	code, out, errOut = latchctlProcess(t, "top", "-once", "-interval", "500ms", "-addr", e.s.Addr)
	pcancel()
	for _, w := range waiters {
		<-w
	}
	if code != 0 || !regexp.MustCompile(`(?m)^MOST HAND-OVERS/S\n +[0-9]+\.[0-9]  hot$`).MatchString(out) {
		t.Errorf("hand-overs of hot not counted: exit %d:\n%s%s", code, out, errOut)
	}
}

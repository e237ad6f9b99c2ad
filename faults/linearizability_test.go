package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/cpuhog"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// The sequential model of a semaphore of limit permits (a mutex: 1): the
// state is the set of clients holding, as a bit mask.
//
// An acquisition that returned an error (a waiting Lock given up at its
// deadline, a TryLock whose reply was lost) is two operations over the same
// interval: giveUpTake, which may have taken a permit (a grant made while
// the call was in flight, or a hand-over), and giveUpEnd, which gives back
// whatever the call held. The model orders the first before the second, so
// the call may have held a permit for a while inside its interval, but
// holds nothing once it returned (give or take giveUpGrace, see there): a
// grant that outlives a failed call (a "ghost" nobody holds and nobody
// renews) makes the history illegal. What a failed call may hold is its
// own token's, not its client's: within the grace it can hold beside the
// same client's next grant, and beside the client's next failed calls.
type semInput struct {
	client int
	kind   opKind
	seq    uint32 // giveUpTake and giveUpEnd: the call's number, the same for both
	note   string // what the call returned (fence and token of a grant, the error of a failed call), for the record
}

type opKind uint8

const (
	opAcquire  opKind = iota // Lock/TryLock/Acquire/TryAcquire: granted or ErrNotAcquired
	opRelease                // Release: true, or ErrLeaseLost (false)
	giveUpTake               // a failed call may have taken a permit...
	giveUpEnd                // ...and has given it back when it returns
	// releaseUnknown is a Release that failed with its outcome unknown
	// (Redis did not answer): the permit was freed at some instant from
	// its call until the lease's TTL ran out (renewals stop at a failed
	// Release), which the harness records as its return.
	releaseUnknown
)

// semOutput is an operation's outcome: for an acquire, granted or not
// (the primitive was full); for a release, whether the client held.
type semOutput struct{ ok bool }

// semState is the model's state: who holds, what failed calls hold, and,
// per client, the number of the last failed call that ended (its
// giveUpTake may no longer take).
type semState struct {
	held   uint64     // bit c: client c holds
	ghosts uint64     // bit ghostBit(c, seq): failed call seq of client c holds
	ended  [16]uint32 // client ids are below 16
}

// ghostBit is the bit of failed call seq of client c in semState.ghosts:
// four per client, so that up to four of a client's failed calls can hold
// at once (one every 20 ms at most, within a grace of 100 ms: a fifth
// would reuse the first's bit, which has ended by then).
func ghostBit(c int, seq uint32) uint64 { return 1 << (4*c + int(seq%4)) }

func semModel(limit int) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{semState{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(semState), input.(semInput), output.(semOutput)
			me := uint64(1) << in.client
			n := bits.OnesCount64(s.held) + bits.OnesCount64(s.ghosts)
			switch in.kind {
			case opAcquire:
				if out.ok && s.held&me == 0 && n < limit {
					s.held |= me
					return []any{s}
				}
				if !out.ok && n >= limit {
					return []any{s}
				}
			case opRelease:
				if out.ok == (s.held&me != 0) {
					s.held &^= me
					return []any{s}
				}
			case releaseUnknown:
				s.held &^= me
				return []any{s}
			case giveUpTake:
				next := []any{s} // took nothing
				if g := ghostBit(in.client, in.seq); s.ended[in.client] != in.seq && s.ghosts&g == 0 && n < limit {
					s.ghosts |= g
					next = append(next, s)
				}
				return next
			case giveUpEnd:
				s.ghosts &^= ghostBit(in.client, in.seq)
				s.ended[in.client] = in.seq
				return []any{s}
			}
			return nil
		},
		Hash: func(state any) uint64 {
			s := state.(semState)
			h := s.held*1000003 + s.ghosts
			for _, x := range s.ended {
				h = h*1000003 + uint64(x)
			}
			return h
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(semInput), output.(semOutput)
			switch in.kind {
			case opAcquire:
				return fmt.Sprintf("%d acquire -> %v", in.client, out.ok)
			case opRelease:
				return fmt.Sprintf("%d release -> %v", in.client, out.ok)
			case releaseUnknown:
				return fmt.Sprintf("%d release -> unknown (freed by its TTL at the latest)", in.client)
			case giveUpTake:
				return fmt.Sprintf("%d failed call #%d: may take", in.client, in.seq)
			default:
				return fmt.Sprintf("%d failed call #%d: holds nothing at return", in.client, in.seq)
			}
		},
	}
	return nm.ToModel()
}

// tryLocker is one client's acquisition: a waiting Lock given up at a
// deadline, or a single attempt.
type tryLocker func(ctx context.Context) (release func(context.Context) error, err error)

// linClient is one client of a recorded history.
type linClient struct {
	acquire tryLocker
	// waits: acquire is a waiting Lock, whose every error is a failed call
	// (ctx's error matches ErrNotAcquired too, from its last attempt).
	waits bool
	// note, when set, describes the grant acquire just made (its fence
	// and token), for the record of an illegal history.
	note func() string
	// lossy, when set, is the proxy this client's connections go
	// through: one single attempt in lossEvery has its reply dropped (and
	// its connection reset) after the server ran it.
	lossy     *faultproxy.Proxy
	lossEvery int
}

// recorded is a history and what went into it.
type recorded struct {
	ops             []porcupine.Operation
	failed          int // failed calls
	lost, lostTried int // attempts whose reply was dropped that failed, and all
}

// giveUpGrace is how long after a failed call returned what it may have
// held can still be held. Its give-back gets 100 ms of waiting on Redis
// before the call returns, then goes on in the background (README,
// "Unknown outcomes are safe"): when a stall of the process used up that
// budget before the give-back was even sent (a 570 ms stall on a loaded
// machine; 2 histories in 400), the call returns and the give-back runs a
// few milliseconds later. A grant left behind for good (a "ghost": nobody
// holds it, nothing renews it) lasts its TTL, 30 s here, and is caught.
const giveUpGrace = 100 * time.Millisecond

// linTTL is the TTL of the clients' leases in the linearizability runs.
const linTTL = 30 * time.Second

// record runs clients concurrently, each taking and giving back the
// primitive through its own acquisition for d, and returns the history.
// An acquisition that fails with ErrNotAcquired is a single attempt that
// found the primitive full; one that fails otherwise (a waiting Lock's
// deadline, a lost reply) is recorded as a failed call: it may have held
// the primitive during its interval, and for giveUpGrace after it, but not
// later.
func record(t *testing.T, clients []linClient, d time.Duration) recorded {
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var mu sync.Mutex
	var rec recorded
	add := func(c int, in semInput, call int64, out semOutput) {
		mu.Lock()
		ret := now()
		switch in.kind {
		case giveUpEnd:
			ret += int64(giveUpGrace)
		case releaseUnknown:
			ret += int64(linTTL)
		}
		rec.ops = append(rec.ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			var seq uint32
			for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
				lose := cl.lossy != nil && i%cl.lossEvery == cl.lossEvery-1
				if lose {
					cl.lossy.DropNextReplies(1)
				}
				call := now()
				release, err := cl.acquire(ctx)
				if lose {
					cl.lossy.DropNextReplies(0)
					mu.Lock()
					rec.lostTried++
					mu.Unlock()
				}
				switch {
				case errors.Is(err, latchkit.ErrNotAcquired) && !cl.waits:
					add(c, semInput{client: c}, call, semOutput{false})
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					continue
				case err != nil:
					seq++
					add(c, semInput{client: c, kind: giveUpTake, seq: seq, note: err.Error()}, call, semOutput{})
					add(c, semInput{client: c, kind: giveUpEnd, seq: seq}, call, semOutput{})
					mu.Lock()
					rec.failed++
					if lose {
						rec.lost++
					}
					mu.Unlock()
					// A pause, so that failed calls back to back, each of
					// which may have held for a while, do not cover the
					// whole history: a grant left behind shows in the gaps.
					time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Microsecond)
					continue
				}
				in := semInput{client: c, kind: opAcquire}
				if cl.note != nil {
					in.note = cl.note()
				}
				add(c, in, call, semOutput{true})
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
				call = now()
				err = release(ctx)
				if err != nil && !errors.Is(err, latchkit.ErrLeaseLost) {
					add(c, semInput{client: c, kind: releaseUnknown, note: err.Error()}, call, semOutput{})
					t.Errorf("client %d release: %v", c, err)
					return
				}
				add(c, semInput{client: c, kind: opRelease}, call, semOutput{err == nil})
			}
		}()
	}
	wg.Wait()
	return rec
}

// linPrims are the primitives the linearizability tests cover.
func linPrims() []prim {
	var out []prim
	for _, p := range prims {
		switch p.name {
		case "Mutex", "FairMutex", "Semaphore(2)", "FairSemaphore(2)", "Semaphore(4) by 2s", "FairSemaphore(4) by 2s":
			out = append(out, p)
		}
	}
	return out
}

// linearizable records a history of p on a fresh redis-server (5 clients,
// each with its own connections: two single attempts, three waiting Locks
// given up after 20 ms), checks it with porcupine, checks that nothing is
// left held once every client returned, and adds a row for RELIABILITY.md.
// Client c connects through ds[c%len(ds)]: one driver, or several
// contending for the same keys. With lossEvery > 0, client 0 reaches Redis
// through a proxy that drops the reply of one of its single attempts in
// lossEvery.
func linearizable(t *testing.T, ds []driver, p prim, scenario, faults string, waiting, lossEvery int) {
	srv := redistest.Start(t)
	d := ds[0]
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.name
	}
	driverName := strings.Join(names, " + ")
	var clients []linClient
	for c := 0; c < 5; c++ {
		addr := srv.Addr
		var px *faultproxy.Proxy
		if c == 0 && lossEvery > 0 {
			px = faultproxy.Start(t, srv.Addr)
			addr = px.Addr
		}
		lock, try, _, err := p.open(clienttest.For(t, ds[c%len(ds)].new(t, addr)), c, primitives.WithTTL(linTTL))
		if err != nil {
			t.Fatal(err)
		}
		if c >= 5-waiting {
			// Waiting Locks (given up after 20 ms): a release hands the
			// primitive over to them, inside the release's and the
			// Lock's intervals.
			try = func(ctx context.Context) (latchkit.Lease, error) {
				ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				defer cancel()
				return lock(ctx)
			}
		}
		var last latchkit.Lease // of this client's last grant (its goroutine's only)
		clients = append(clients, linClient{waits: c >= 5-waiting, lossy: px, lossEvery: lossEvery, acquire: func(ctx context.Context) (func(context.Context) error, error) {
			l, err := try(ctx)
			if err != nil {
				return nil, err
			}
			last = l
			return l.Release, nil
		}, note: func() string { return fmt.Sprintf("fence %d token %.8s", last.Fence(), last.Token()) }})
	}
	rec := record(t, clients, 700*time.Millisecond)
	violations := 0
	res, info := porcupine.CheckOperationsVerbose(semModel(p.limit), rec.ops, 30*time.Second)
	if res != porcupine.Ok {
		violations++
		t.Errorf("%d operations: porcupine says %s", len(rec.ops), res)
		if res == porcupine.Illegal {
			explainIllegal(t, semModel(p.limit), rec.ops, info)
			t.Logf("what kind of violation: %s", classifyIllegal(rec.ops, p.limit))
		}
	}
	// Every client returned and released: every permit is free now.
	time.Sleep(giveUpGrace) // a give-back finishing in the background
	if left := heldAfter(t, d, srv.Addr, p); left > 0 {
		violations++
		t.Errorf("%d of %d permits still held after every client returned and released: a failed call left a grant behind", left, p.limit)
	}
	waited := 0
	for _, op := range rec.ops {
		if in := op.Input.(semInput); in.kind == opAcquire && in.client >= 5-waiting && op.Output.(semOutput).ok {
			waited++
		}
	}
	if waited == 0 {
		t.Error("no waiting Lock was granted: the history has no hand-over")
	}
	if lossEvery > 0 && rec.lostTried == 0 {
		t.Error("no reply was dropped")
	}
	t.Logf("%d operations (%d grants to waiting Locks, %d failed calls; %d of %d attempts whose reply was dropped failed), linearizable: %s",
		len(rec.ops), waited, rec.failed, rec.lost, rec.lostTried, res)
	table.mu.Lock()
	table.rows = append(table.rows, row{scenario, driverName, p.name, len(rec.ops), faults, violations})
	table.mu.Unlock()
}

// heldAfter reports how many of p's permits a fresh client cannot take.
func heldAfter(t *testing.T, d driver, addr string, p prim) int {
	_, try, _, err := p.open(clienttest.For(t, d.new(t, addr)), 9, primitives.WithTTL(time.Second), primitives.WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	left := p.limit
	for i := 0; i < p.limit; i++ {
		l, err := try(ctx)
		if err != nil {
			if !errors.Is(err, latchkit.ErrNotAcquired) {
				t.Errorf("checking the primitive is free: %v", err)
			}
			break
		}
		defer l.Release(ctx)
		left--
	}
	return left
}

// explainIllegal logs the longest partial linearization porcupine found
// and the operations around its end, in the order they were called, and,
// when LATCHKIT_PORCUPINE_DIR is set, writes porcupine's visualization of
// the history there (one HTML file per illegal history).
func explainIllegal(t *testing.T, m porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) {
	for _, part := range info.PartialLinearizationsOperations() {
		longest := []porcupine.Operation{}
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
		if len(longest) == 0 {
			continue
		}
		last := longest[len(longest)-1]
		t.Logf("longest legal prefix: %d of %d operations, ending with %s [%v, %v]",
			len(longest), len(ops), m.DescribeOperation(last.Input, last.Output), time.Duration(last.Call), time.Duration(last.Return))
		from, to := last.Return-int64(25*time.Millisecond), last.Return+int64(25*time.Millisecond)
		var around []porcupine.Operation
		for _, op := range ops {
			if op.Call <= to && op.Return >= from {
				around = append(around, op)
			}
		}
		sort.Slice(around, func(i, j int) bool { return around[i].Call < around[j].Call })
		for i, op := range around {
			if i == 60 {
				t.Logf("  ... and %d more", len(around)-i)
				break
			}
			t.Logf("  around it: %s [%v, %v]", m.DescribeOperation(op.Input, op.Output), time.Duration(op.Call), time.Duration(op.Return))
		}
	}
	if dir := os.Getenv("LATCHKIT_PORCUPINE_DIR"); dir != "" {
		// The whole history in call order, with each grant's fence and
		// token and each failed call's error, as text.
		if f, err := os.CreateTemp(dir, "illegal-*.txt"); err == nil {
			sorted := slices.Clone(ops)
			sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
			for _, op := range sorted {
				fmt.Fprintf(f, "[%v, %v] %s %s\n", time.Duration(op.Call), time.Duration(op.Return),
					m.DescribeOperation(op.Input, op.Output), op.Input.(semInput).note)
			}
			f.Close()
			t.Logf("history: %s", f.Name())
		}
		f, err := os.CreateTemp(dir, "illegal-*.html")
		if err != nil {
			t.Logf("visualization: %v", err)
			return
		}
		defer f.Close()
		if err := porcupine.Visualize(m, info, f); err != nil {
			t.Logf("visualization: %v", err)
			return
		}
		t.Logf("visualization: %s", f.Name())
	}
}

// TestLinearizable records concurrent histories of acquisitions and
// releases from 5 clients (each with its own connections) on a real
// redis-server, for each driver, beside two CPU-busy processes (on a
// starved machine a 20 ms deadline fires while a script is in flight), and
// checks them with porcupine against the sequential model of a semaphore
// (a mutex: limit 1). Two clients make single attempts (TryLock/
// TryAcquire); three wait (Lock/Acquire, given up after 20 ms), so
// hand-overs on release are in the history too, and so are Locks given up
// while their attempt was in flight: such a Lock may have held the
// primitive for a while, but holds nothing once it returned.
//
// The fast lane runs each primitive through one driver, rotating, without
// the busy processes (they would starve the packages tested beside it);
// the long lane every driver and primitive beside them.
func TestLinearizable(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	if lane.Long() {
		cpuhog.Start(t, 2)
	}
	for i, p := range linPrims() {
		for _, d := range lane.Subset(drivers, i, 1) {
			t.Run(d.name+"/"+p.name, func(t *testing.T) {
				linearizable(t, []driver{d}, p, "linearizability", "two CPU-busy processes beside the test: 5 clients, concurrent TryLock, waiting Lock given up after 20 ms (hand-overs) and Release checked by porcupine", 3, 0)
			})
		}
	}
}

// TestLinearizableMixedDrivers is TestLinearizable's workload (without the
// busy processes) with the clients spread over every driver: client c
// connects through drivers[c%len(drivers)], so every driver's client takes,
// waits for and gives back the same keys at once. Drivers differ in how
// they send scripts, resend and pipeline; the keys and scripts are one, so
// exclusion must hold across them.
func TestLinearizableMixedDrivers(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	if len(drivers) > 5 {
		t.Fatalf("%d drivers for 5 clients: some would not take part", len(drivers))
	}
	// The fast lane: two of the primitives (the semaphores of 2; TestLinearizable
	// runs the others there too).
	for _, p := range lane.Subset(linPrims(), 1, 2) {
		t.Run(p.name, func(t *testing.T) {
			linearizable(t, drivers, p, "linearizability, mixed drivers", "the 5 clients spread over every driver, on the same keys: concurrent TryLock, waiting Lock given up after 20 ms (hand-overs) and Release checked by porcupine", 3, 0)
		})
	}
}

// TestLinearizableLostReplies is TestLinearizable's workload with every
// 8th single attempt of client 0 losing its reply after the server ran it
// (the connection is reset): the attempt either succeeds (a driver that
// resends it finds its own grant) or fails, and then leaves nothing held.
//
// The fast lane runs each primitive through one driver, rotating (another
// than TestLinearizable's).
func TestLinearizableLostReplies(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	for i, p := range linPrims() {
		for _, d := range lane.Subset(drivers, i+1, 1) {
			t.Run(d.name+"/"+p.name, func(t *testing.T) {
				linearizable(t, []driver{d}, p, "linearizability, lost replies", "as linearizability (no busy processes), and one TryLock reply in 8 of one client dropped after the server ran it (connection reset)", 1, 8)
			})
		}
	}
}

// brokenMutex is a deliberately wrong lock: it checks, then sets (GET, a
// pause, SET; not atomic), and releases without checking the owner.
type brokenMutex struct {
	c   *redis.Client
	key string
}

func (m brokenMutex) tryLock(ctx context.Context) (func(context.Context) error, error) {
	if err := m.c.Get(ctx, m.key).Err(); err == nil {
		return nil, latchkit.ErrNotAcquired
	} else if !errors.Is(err, redis.Nil) {
		return nil, err
	}
	time.Sleep(200 * time.Microsecond) // the window of the race
	if err := m.c.Set(ctx, m.key, "x", 30*time.Second).Err(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return m.c.Del(ctx, m.key).Err() }, nil
}

// TestLinearizabilityCatchesBrokenMutex shows the checker is not a rubber
// stamp: the same workload over a check-then-set lock produces a history
// porcupine rejects.
func TestLinearizabilityCatchesBrokenMutex(t *testing.T) {
	srv := redistest.Start(t)
	var clients []linClient
	for c := 0; c < 5; c++ {
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { rc.Close() })
		clients = append(clients, linClient{acquire: brokenMutex{rc, "broken"}.tryLock})
	}
	for try := 1; ; try++ {
		ops := record(t, clients, 500*time.Millisecond).ops
		res := porcupine.CheckOperationsTimeout(semModel(1), ops, 30*time.Second)
		if res == porcupine.Illegal {
			t.Logf("run %d: %d operations, porcupine: %s (as it must)", try, len(ops), res)
			table.mu.Lock()
			table.rows = append(table.rows, row{"linearizability (broken lock)", "go-redis", "check-then-set mutex", len(ops), "none; the lock itself is wrong", 1})
			table.mu.Unlock()
			return
		}
		if try == 5 {
			t.Fatalf("5 runs of a broken lock and porcupine found nothing (last: %s)", res)
		}
	}
}

// span is a stretch of a history during which a client held, for sure or
// perhaps.
type span struct {
	client   int
	from, to int64
}

// maxOverlap is the most spans of ss that overlap at one instant within
// [from, to], leaving out client skip's.
func maxOverlap(ss []span, from, to int64, skip int) int {
	type edge struct {
		at int64
		d  int
	}
	var es []edge
	for _, s := range ss {
		if s.client == skip || s.to < from || s.from > to {
			continue
		}
		es = append(es, edge{max(s.from, from), 1}, edge{min(s.to, to), -1})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].at < es[j].at || es[i].at == es[j].at && es[i].d > es[j].d })
	n, most := 0, 0
	for _, e := range es {
		n += e.d
		most = max(most, n)
	}
	return most
}

// classifyIllegal says which way an illegal semaphore history breaks the
// model, from the intervals alone, so that a rare failure tells at once
// whether safety is at stake: more than limit clients held for sure at one
// instant (each grant from its return to its release's call: an
// over-grant), or a refusal during which fewer than limit clients can have
// held at any instant (each grant from its call to its release's return,
// each failed call to its return plus giveUpGrace: a permit held by
// nobody the history knows of), or neither (an interleaving the intervals
// alone do not show).
func classifyIllegal(ops []porcupine.Operation, limit int) string {
	sorted := slices.Clone(ops)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	var sure, maybe []span
	open := map[int]porcupine.Operation{} // a client's grant whose release has not been seen yet
	end := int64(0)
	for _, op := range sorted {
		end = max(end, op.Return)
	}
	for _, op := range sorted {
		in, out := op.Input.(semInput), op.Output.(semOutput)
		switch {
		case in.kind == opAcquire && out.ok:
			open[in.client] = op
		case in.kind == opRelease || in.kind == releaseUnknown:
			if g, ok := open[in.client]; ok {
				if out.ok { // a release that found the lease gone proves nothing about how long it held
					sure = append(sure, span{in.client, g.Return, op.Call})
				}
				maybe = append(maybe, span{in.client, g.Call, op.Return})
				delete(open, in.client)
			}
		case in.kind == giveUpEnd:
			maybe = append(maybe, span{in.client, op.Call, op.Return}) // the return already has the grace
		}
	}
	for c, g := range open {
		sure = append(sure, span{c, g.Return, end})
		maybe = append(maybe, span{c, g.Call, end})
	}
	var found []string
	if n := maxOverlap(sure, 0, end, -1); n > limit {
		found = append(found, fmt.Sprintf("over-grant: %d clients held for sure at one instant, limit %d", n, limit))
	}
	for _, op := range sorted {
		in, out := op.Input.(semInput), op.Output.(semOutput)
		if in.kind != opAcquire || out.ok {
			continue
		}
		if n := maxOverlap(maybe, op.Call, op.Return, in.client); n < limit {
			found = append(found, fmt.Sprintf("refusal of client %d [%v, %v] while at most %d others can have held (limit %d)",
				in.client, time.Duration(op.Call), time.Duration(op.Return), n, limit))
		}
	}
	if len(found) == 0 {
		return "neither an over-grant nor a refusal the intervals alone rule out"
	}
	if len(found) > 5 {
		found = append(found[:5], fmt.Sprintf("and %d more", len(found)-5))
	}
	return strings.Join(found, "; ")
}

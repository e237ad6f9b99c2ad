package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// The names of the mixed-use tests and what excludes what: a Mutex, a
// ReentrantMutex and a MultiLock of a name share that name's Mutex keys
// and exclude each other; a FairMutex has keys of its own
// (prefix{name}:fair...) and excludes only FairMutexes of its name. The
// model's resources are therefore the names a, b, c (Mutex keys) and fair
// a (FairMutex keys).
const (
	resA = 1 << iota
	resB
	resC
	resFairA
	numRes = 4
)

var resNames = [numRes]string{"a", "b", "c", "fair a"}

func describeRes(set uint8) string {
	var s []string
	for i, n := range resNames {
		if set&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	return "{" + strings.Join(s, ",") + "}"
}

type mixInput struct {
	client int
	kind   opKind
	res    uint8  // the resources the call takes, all at once (or this step's one)
	seq    uint32 // giveUpTake and giveUpEnd: the call's number
	// step, when set, makes this acquire (or giveUpTake) one step of a
	// waiting MultiLock: it takes its names one at a time, in canonical
	// order, inside its interval (step 1 first), like a thread locking
	// mutexes in a fixed order; last marks the final step.
	step uint8
	last bool
}

// mixState is who holds each resource (client+1; 0: free), and, per
// client, the number of its last failed call that ended, and how many
// steps of an ordered acquisition it has taken.
type mixState struct {
	holder [numRes]int8
	ended  [32]uint32
	steps  [32]uint8
}

// mixModel is the sequential model of several named locks taken by
// callers of several kinds: a single attempt takes all its resources at
// once (a MultiLock's TryLock) or none, and when it fails found one of
// them held; a waiting MultiLock takes its names one at a time in
// canonical order (ordered holding: it holds the names before the one it
// waits for); a failed waiting call may have held its resources (a
// MultiLock: a prefix of them) for a while inside its interval but holds
// nothing once it returned (as in semModel).
func mixModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			var fair, rest []porcupine.Operation
			for _, op := range history {
				if op.Input.(mixInput).res == resFairA {
					fair = append(fair, op)
				} else {
					rest = append(rest, op)
				}
			}
			return [][]porcupine.Operation{fair, rest}
		},
		Init: func() []any { return []any{mixState{}} },
		Step: func(state, input, output any) []any {
			s, in, ok := state.(mixState), input.(mixInput), output.(semOutput).ok
			me := int8(in.client + 1)
			all := func(want func(h int8) bool) bool {
				for i := range s.holder {
					if in.res&(1<<i) != 0 && !want(s.holder[i]) {
						return false
					}
				}
				return true
			}
			set := func(from, to int8) {
				for i := range s.holder {
					if in.res&(1<<i) != 0 && s.holder[i] == from {
						s.holder[i] = to
					}
				}
			}
			free := func(h int8) bool { return h == 0 }
			if in.step > 0 && (in.kind == opAcquire || in.kind == giveUpTake) {
				// One step of an ordered acquisition.
				next := []any{}
				if in.kind == giveUpTake {
					if s.ended[in.client] == in.seq {
						return []any{s}
					}
					next = append(next, s)
				}
				if s.steps[in.client] == in.step-1 && all(free) && (in.kind == giveUpTake || ok) {
					set(0, me)
					s.steps[in.client] = in.step
					if in.last {
						s.steps[in.client] = 0
					}
					next = append(next, s)
				}
				return next
			}
			switch in.kind {
			case opAcquire:
				if ok && all(free) {
					set(0, me)
					return []any{s}
				}
				if !ok && !all(free) {
					return []any{s}
				}
			case opRelease:
				if ok && all(func(h int8) bool { return h == me }) {
					set(me, 0)
					return []any{s}
				}
				if !ok && all(func(h int8) bool { return h != me }) {
					return []any{s}
				}
			case giveUpTake:
				next := []any{s}
				if s.ended[in.client] != in.seq && all(free) {
					set(0, me)
					next = append(next, s)
				}
				return next
			case giveUpEnd:
				set(me, 0)
				s.ended[in.client] = in.seq
				s.steps[in.client] = 0
				return []any{s}
			}
			return nil
		},
		Hash: func(state any) uint64 {
			s := state.(mixState)
			var h uint64
			for _, x := range s.holder {
				h = h*31 + uint64(x)
			}
			for _, x := range s.ended {
				h = h*1000003 + uint64(x)
			}
			for _, x := range s.steps {
				h = h*131 + uint64(x)
			}
			return h
		},
		DescribeOperation: func(input, output any) string {
			in, ok := input.(mixInput), output.(semOutput).ok
			switch in.kind {
			case opAcquire:
				return fmt.Sprintf("%d acquire %s -> %v", in.client, describeRes(in.res), ok)
			case opRelease:
				return fmt.Sprintf("%d release %s -> %v", in.client, describeRes(in.res), ok)
			case giveUpTake:
				return fmt.Sprintf("%d failed call #%d on %s: may take", in.client, in.seq, describeRes(in.res))
			default:
				return fmt.Sprintf("%d failed call #%d on %s: holds nothing at return", in.client, in.seq, describeRes(in.res))
			}
		},
	}
	return nm.ToModel()
}

// mixCaller is one client of the mixed-use test: a primitive of some
// kind over some names, through its own connections.
type mixCaller struct {
	what string
	res  uint8
	wait bool // Lock (else TryLock)
	// order, for a waiting MultiLock: its names' resources in canonical
	// order, taken one at a time.
	order []uint8
	// owner, for a ReentrantMutex: the caller re-enters once while it
	// holds.
	owner string
	m     primitives.Mutex
}

// waitBound is how long any waiting Lock may wait while every holder
// holds for about a millisecond: the guarantee that no waiter starves.
const waitBound = 2 * time.Second

// TestMixedUse runs Mutex, ReentrantMutex, MultiLock and FairMutex
// callers on overlapping names at once, each client with its own
// connections, on a real redis-server, for about 1.5 s, each holding for
// about a millisecond: waiting Locks (deadline 5 s) and single attempts.
// The history is checked with porcupine against a model where each kind
// excludes what it shares keys with (a MultiLock taking all its names at
// once), and every waiting Lock must be granted within 2 s. Once every
// client returned, every name is free.
func TestMixedUse(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	for _, d := range lane.Subset(drivers, 3, 1) {
		t.Run(d.name, func(t *testing.T) {
			srv := redistest.Start(t)
			opts := []primitives.Option{primitives.WithPrefix("m:")}
			mk := func(what string, res uint8, wait bool, owner string, ctor func() (primitives.Mutex, error)) mixCaller {
				m, err := ctor()
				if err != nil {
					t.Fatal(err)
				}
				return mixCaller{what: what, res: res, wait: wait, owner: owner, m: m}
			}
			mutex := func(name string) func() (primitives.Mutex, error) {
				return func() (primitives.Mutex, error) {
					return primitives.NewMutex(clienttest.For(t, d.new(t, srv.Addr)), name, opts...)
				}
			}
			reentrant := func(name string) func() (primitives.Mutex, error) {
				return func() (primitives.Mutex, error) {
					return primitives.NewReentrantMutex(clienttest.For(t, d.new(t, srv.Addr)), name, opts...)
				}
			}
			multi := func(names ...string) func() (primitives.Mutex, error) {
				return func() (primitives.Mutex, error) {
					return primitives.NewMultiLock(clienttest.For(t, d.new(t, srv.Addr)), names, opts...)
				}
			}
			fair := func(name string) func() (primitives.Mutex, error) {
				return func() (primitives.Mutex, error) {
					return primitives.NewFairMutex(clienttest.For(t, d.new(t, srv.Addr)), name, opts...)
				}
			}
			ordered := func(c mixCaller, order ...uint8) mixCaller { c.order = order; return c }
			callers := []mixCaller{
				mk("Mutex(a).Lock", resA, true, "", mutex("a")),
				mk("Mutex(a).Lock", resA, true, "", mutex("a")),
				mk("Mutex(a).TryLock", resA, false, "", mutex("a")),
				mk("ReentrantMutex(b).Lock", resB, true, "rb", reentrant("b")),
				mk("ReentrantMutex(a).Lock", resA, true, "ra", reentrant("a")),
				ordered(mk("MultiLock(a,b).Lock", resA|resB, true, "", multi("a", "b")), resA, resB),
				ordered(mk("MultiLock(b,c).Lock", resB|resC, true, "", multi("c", "b")), resB, resC),
				mk("MultiLock(a,c).TryLock", resA|resC, false, "", multi("a", "c")),
				mk("Mutex(c).Lock", resC, true, "", mutex("c")),
				mk("FairMutex(a).Lock", resFairA, true, "", fair("a")),
				mk("FairMutex(a).Lock", resFairA, true, "", fair("a")),
				mk("FairMutex(a).TryLock", resFairA, false, "", fair("a")),
			}
			h := runMixed(t, callers, 1500*time.Millisecond)

			violations := 0
			fail := func(format string, a ...any) { violations++; t.Errorf(format, a...) }
			res, info := porcupine.CheckOperationsVerbose(mixModel(), h.ops, 60*time.Second)
			if res != porcupine.Ok {
				fail("%d operations: porcupine says %s", len(h.ops), res)
				if res == porcupine.Illegal {
					explainMixed(t, h.ops, info)
				}
			}
			if len(h.late) > 0 {
				fail("%d of %d waiting Locks not granted within %v (holds of ~1ms), e.g.:\n  %s",
					len(h.late), h.waits, waitBound, strings.Join(h.late[:min(len(h.late), 8)], "\n  "))
			}
			for _, e := range h.errs {
				fail("%s", e)
			}
			// Every name is free again.
			for _, c := range []mixCaller{
				mk("Mutex(a)", resA, false, "", mutex("a")), mk("Mutex(b)", resB, false, "", mutex("b")),
				mk("Mutex(c)", resC, false, "", mutex("c")), mk("FairMutex(a)", resFairA, false, "", fair("a")),
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				l, err := c.m.TryLock(ctx)
				if err != nil {
					fail("%s after every client returned: %v", c.what, err)
				} else {
					l.Release(ctx)
				}
				cancel()
			}
			var kinds []string
			for k, n := range h.granted {
				kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			}
			sort.Strings(kinds)
			t.Logf("%d operations, %d waiting Locks (longest wait %v), linearizable: %s; grants: %s",
				len(h.ops), h.waits, h.longest.Round(time.Millisecond), res, strings.Join(kinds, ", "))
			table.mu.Lock()
			table.rows = append(table.rows, row{"mixed use", d.name, "Mutex, ReentrantMutex, MultiLock, FairMutex", len(h.ops),
				"none: 12 clients on names a, b, c (Lock, TryLock, re-entry, MultiLocks over two names) checked by porcupine; every waiting Lock granted within 2 s", violations})
			table.mu.Unlock()
		})
	}
}

// mixHistory is what runMixed recorded.
type mixHistory struct {
	ops     []porcupine.Operation
	waits   int
	longest time.Duration
	late    []string // waiting Locks past waitBound, or failed
	errs    []string // unexpected errors
	granted map[string]int
}

// runMixed runs every caller in a loop for d and records the history.
func runMixed(t *testing.T, callers []mixCaller, d time.Duration) *mixHistory {
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	h := &mixHistory{granted: map[string]int{}}
	var mu sync.Mutex
	add := func(c int, in mixInput, call int64, ok bool) {
		mu.Lock()
		h.ops = append(h.ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: semOutput{ok}, Return: now()})
		mu.Unlock()
	}
	hold := func() { time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Microsecond) }
	var wg sync.WaitGroup
	for c, cl := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := context.Background()
			if cl.owner != "" {
				base = primitives.WithOwner(base, cl.owner)
			}
			var seq uint32
			for end := time.Now().Add(d); time.Now().Before(end); {
				in := mixInput{client: c, res: cl.res}
				ctx, cancel := context.WithTimeout(base, 5*time.Second)
				call, t0 := now(), time.Now()
				var l latchkit.Lease
				var err error
				if cl.wait {
					l, err = cl.m.Lock(ctx)
				} else {
					l, err = cl.m.TryLock(ctx)
				}
				took := time.Since(t0)
				cancel()
				if cl.wait {
					mu.Lock()
					h.waits++
					h.longest = max(h.longest, took)
					if err != nil || took > waitBound {
						h.late = append(h.late, fmt.Sprintf("%s (client %d) at %v: waited %v: %v",
							cl.what, c, time.Duration(call).Round(time.Millisecond), took.Round(time.Millisecond), err))
					}
					mu.Unlock()
				}
				switch {
				case err == nil:
				case !cl.wait && errors.Is(err, latchkit.ErrNotAcquired):
					in.kind = opAcquire
					add(c, in, call, false)
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					continue
				default:
					seq++
					in.seq = seq
					in.kind = giveUpTake
					if len(cl.order) > 0 {
						for i, r := range cl.order {
							add(c, mixInput{client: c, kind: giveUpTake, res: r, seq: seq, step: uint8(i + 1), last: i == len(cl.order)-1}, call, false)
						}
					} else {
						add(c, in, call, false)
					}
					in.kind = giveUpEnd
					add(c, in, call, false)
					time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Microsecond)
					continue
				}
				in.kind = opAcquire
				if len(cl.order) > 0 {
					for i, r := range cl.order {
						add(c, mixInput{client: c, kind: opAcquire, res: r, step: uint8(i + 1), last: i == len(cl.order)-1}, call, true)
					}
				} else {
					add(c, in, call, true)
				}
				mu.Lock()
				h.granted[cl.what]++
				mu.Unlock()
				hold()
				if cl.owner != "" {
					// Re-entry: granted at once by the owner that holds.
					ictx, icancel := context.WithTimeout(base, 100*time.Millisecond)
					inner, err := cl.m.Lock(ictx)
					icancel()
					if err != nil {
						mu.Lock()
						h.errs = append(h.errs, fmt.Sprintf("%s: re-entry by the owner that holds: %v", cl.what, err))
						mu.Unlock()
					} else {
						hold()
						if err := inner.Release(context.Background()); err != nil {
							mu.Lock()
							h.errs = append(h.errs, fmt.Sprintf("%s: inner release: %v", cl.what, err))
							mu.Unlock()
						}
					}
				}
				call = now()
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				err = l.Release(rctx)
				rcancel()
				in.kind = opRelease
				add(c, in, call, err == nil)
				if err != nil {
					mu.Lock()
					h.errs = append(h.errs, fmt.Sprintf("%s release: %v", cl.what, err))
					mu.Unlock()
				}
				if !cl.wait {
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	return h
}

// explainMixed logs where porcupine's longest legal prefix stops.
func explainMixed(t *testing.T, ops []porcupine.Operation, info porcupine.LinearizationInfo) {
	m := mixModel()
	for _, part := range info.PartialLinearizationsOperations() {
		var longest []porcupine.Operation
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
		if len(longest) == 0 {
			continue
		}
		last := longest[len(longest)-1]
		t.Logf("longest legal prefix: %d operations, ending with %s at %v", len(longest), m.DescribeOperation(last.Input, last.Output), time.Duration(last.Return))
	}
}

// TestMultiLockAmongMutexWaiters: two clients loop on Mutex("a") (Lock,
// hold ~1 ms, Release) while a MultiLock{a,b} waits (deadline 5 s). A
// Mutex release hands "a" to the next queued Mutex waiter; the MultiLock,
// which does not queue, must still get its turn: granted within 2 s.
func TestMultiLockAmongMutexWaiters(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	for _, d := range lane.Subset(drivers, 0, 1) {
		t.Run(d.name, func(t *testing.T) {
			srv := redistest.Start(t)
			opts := []primitives.Option{primitives.WithPrefix("s:")}
			stop := make(chan struct{})
			var grants atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < 2; i++ {
				m, err := primitives.NewMutex(clienttest.For(t, d.new(t, srv.Addr)), "a", opts...)
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						l, err := m.Lock(ctx)
						cancel()
						if err != nil {
							continue
						}
						grants.Add(1)
						time.Sleep(time.Millisecond)
						l.Release(context.Background())
					}
				}()
			}
			ml, err := primitives.NewMultiLock(clienttest.For(t, d.new(t, srv.Addr)), []string{"a", "b"}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // the loops are running
			before := grants.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			l, err := ml.Lock(ctx)
			took := time.Since(start)
			cancel()
			during := grants.Load() - before
			if err == nil {
				l.Release(context.Background())
			}
			close(stop)
			wg.Wait()
			violations := 0
			switch {
			case err != nil:
				violations++
				t.Errorf("MultiLock{a,b} not granted in %v (%v) while the looping Mutex(a) clients were granted %d times", took.Round(time.Millisecond), err, during)
			case took > waitBound:
				violations++
				t.Errorf("MultiLock{a,b} granted after %v, want within %v (Mutex(a) granted %d times meanwhile)", took.Round(time.Millisecond), waitBound, during)
			default:
				t.Logf("MultiLock{a,b} granted after %v (Mutex(a) granted %d times meanwhile)", took.Round(time.Millisecond), during)
			}
			table.mu.Lock()
			table.rows = append(table.rows, row{"MultiLock among Mutex waiters", d.name, "MultiLock, Mutex", int(grants.Load()) + 1,
				"none: 2 clients loop on Mutex(a) (hold 1 ms) while a MultiLock{a,b} waits; granted within 2 s", violations})
			table.mu.Unlock()
		})
	}
}

// TestWokenAcrossKinds: a waiting Lock of one kind behind a holder of
// another kind that shares the name's keys (Mutex, MultiLock) is granted
// soon after the holder releases, not when the holder's lease would have
// run out (10 s, the default TTL): within 500 ms (a release message and
// an attempt; slack for a loaded machine).
func TestWokenAcrossKinds(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	const slack = 500 * time.Millisecond
	kinds := []struct {
		name string
		new  func(cl *primitives.Client, opts []primitives.Option) (primitives.Mutex, error)
	}{
		{"Mutex(a)", func(cl *primitives.Client, opts []primitives.Option) (primitives.Mutex, error) {
			return primitives.NewMutex(cl, "a", opts...)
		}},
		{"MultiLock{a,b}", func(cl *primitives.Client, opts []primitives.Option) (primitives.Mutex, error) {
			return primitives.NewMultiLock(cl, []string{"a", "b"}, opts...)
		}},
	}
	for _, d := range lane.Subset(drivers, 1, 1) {
		for _, holder := range kinds {
			for _, waiter := range kinds {
				t.Run(d.name+"/"+holder.name+"_then_"+waiter.name, func(t *testing.T) {
					srv := redistest.Start(t)
					opts := []primitives.Option{primitives.WithPrefix("w:")}
					hm, err := holder.new(clienttest.For(t, d.new(t, srv.Addr)), opts)
					if err != nil {
						t.Fatal(err)
					}
					wm, err := waiter.new(clienttest.For(t, d.new(t, srv.Addr)), opts)
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					hl, err := hm.Lock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					type result struct {
						l  latchkit.Lease
						at time.Time
						er error
					}
					got := make(chan result, 1)
					go func() {
						c, cancel := context.WithTimeout(ctx, 3*time.Second)
						defer cancel()
						l, err := wm.Lock(c)
						got <- result{l, time.Now(), err}
					}()
					time.Sleep(300 * time.Millisecond)
					released := time.Now()
					if err := hl.Release(ctx); err != nil {
						t.Fatal(err)
					}
					r := <-got
					violations := 0
					switch {
					case r.er != nil:
						violations++
						t.Errorf("%s waiting behind %s: not granted %v after the release (%v)", waiter.name, holder.name, time.Since(released).Round(time.Millisecond), r.er)
					case r.at.Sub(released) > slack:
						violations++
						t.Errorf("%s waiting behind %s: granted %v after the release, want within %v", waiter.name, holder.name, r.at.Sub(released).Round(time.Millisecond), slack)
					default:
						t.Logf("granted %v after the release", r.at.Sub(released).Round(time.Millisecond))
					}
					if r.l != nil {
						r.l.Release(ctx)
					}
					table.mu.Lock()
					table.rows = append(table.rows, row{"woken across kinds", d.name, waiter.name + " behind " + holder.name, 3,
						"none: a waiting Lock behind a holder of another kind on a shared name (TTL 10 s) that releases after 300 ms; granted within 500 ms", violations})
					table.mu.Unlock()
				})
			}
		}
	}
}

package faults_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// TestMigratingRenewal is issue 28's finding 10: a healthy lease must
// outlive its Cluster slot held MIGRATING for longer than its TTL. On a
// 3-master Cluster, every primitive (an RWLock both as writer and as
// reader; a semaphore filled) is held with TTL 2 s and auto-extend, all
// names in one slot ("res", the hash tag, under a prefix per case), half
// of them annotated (as by tracing), each primitive both ways across the
// drivers. The
// slot is held MIGRATING for 3 s, its keys left on its master, and the
// migration cancelled (CLUSTER SETSLOT STABLE); 1 s later it is held
// MIGRATING again for 3 s, then its keys move and the slot is handed over.
// While it migrates, Redis serves a script on the slot's master only if
// it has every key the script declares (TRYAGAIN when it has some). At
// the end of each migration, and 2.5 s after the slot moved (each longer
// than the TTL since the check before, so renewals must have succeeded
// meanwhile), through each Cluster client:
//   - every lease's Context is live;
//   - Lease.TTL answers (during the migrations too);
//   - another client's single attempt is refused (held, or Redis
//     unavailable for now), never granted; when held, it is told the
//     holder's annotation, which lived on beside the lease.
//
// Then every lease is released.
//
// Before, the extend and TTL scripts declared every key of the primitive
// (the release marker, the annotations, the tokens given back, ...), most
// of them absent: every renewal got TRYAGAIN and the leases ended at
// their TTL, 2 s into the migration, although no key had moved.
func TestMigratingRenewal(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // a Cluster of its own
	const migrateFor, ttl = 3 * time.Second, 2 * time.Second
	cl := redistest.StartCluster(t, 3)
	ctx := reshardCtx(t, time.Minute)
	type held struct {
		label   string
		leases  []latchkit.Lease
		lost    []bool      // by check
		note    string      // the holder's annotation, "" for none
		contend acquireFunc // another client's single attempt
	}
	type migCase struct {
		name            string
		p               prim
		holder, contend int // the workers: an RWLock's even one writes, its odd one reads
	}
	var cases []migCase
	for _, p := range prims {
		cases = append(cases, migCase{p.name, p, 0, 1})
		if p.name == "RWLock" {
			cases[len(cases)-1].name = "RWLock writer"
			cases = append(cases, migCase{"RWLock reader", p, 1, 0})
		}
	}
	var all []*held
	for di, cd := range lane.Pick(clusterDrivers[:2], clusterDrivers) {
		// The holding process and the contending one: a Client each.
		hc, cc := clienttest.For(t, cd.new(t, cl.Addrs)), clienttest.For(t, cd.new(t, cl.Addrs))
		for ci, c := range cases {
			opts := []primitives.Option{primitives.WithPrefix(fmt.Sprintf("mr%d.%d:", di, ci)), primitives.WithTTL(ttl)}
			h := &held{label: cd.name + "/" + c.name}
			hopts := opts
			if (di+ci)%2 == 0 { // every primitive with and without, across the drivers
				h.note = "holder of " + h.label
				h.label += " (annotated)"
				hopts = append(hopts[:len(hopts):len(hopts)], primitives.WithMiddleware(annotate(h.note)))
			}
			_, try, _, err := c.p.open(hc, c.holder, hopts...)
			if err != nil {
				t.Fatal(err)
			}
			_, contend, _, err := c.p.open(cc, c.contend, opts...)
			if err != nil {
				t.Fatal(err)
			}
			h.contend = contend
			for range min(c.p.limit, 2) { // a semaphore is filled
				l, err := try(ctx)
				if err != nil {
					t.Fatalf("%s: holder's TryLock: %v", h.label, err)
				}
				h.leases = append(h.leases, l)
				if c.p.limit != 2 {
					break
				}
			}
			h.lost = make([]bool, len(h.leases))
			all = append(all, h)
		}
	}
	slot, from := slotOf(t, cl, "mr0.0:", "res")
	to := (from + 1) % len(cl.Nodes)

	// check checks every holder's leases and contender, at once (a
	// contender's attempt may be retried by its driver for a while), what
	// saying when: since since. A lost lease is told once.
	check := func(what string, since time.Time) {
		t.Helper()
		var wg sync.WaitGroup
		for _, h := range all {
			wg.Go(func() {
				for i, l := range h.leases {
					if h.lost[i] {
						continue
					}
					if err := l.Context().Err(); err != nil {
						h.lost[i] = true
						t.Errorf("%s: lease %d (TTL %v, auto-extend) lost %s (%v after): %v", h.label, i+1, ttl, what, time.Since(since).Round(time.Millisecond), context.Cause(l.Context()))
						continue
					}
					if d, err := l.TTL(ctx); err != nil || d <= 0 {
						t.Errorf("%s: lease %d's TTL %s: %v, %v; want its time left", h.label, i+1, what, d, err)
					}
				}
				if slices.Contains(h.lost, true) {
					return // a grant would be no overlap
				}
				var he *latchkit.HeldError
				if l, err := h.contend(ctx); err == nil {
					t.Errorf("%s: another client's single attempt %s: granted (fence %d) while held", h.label, what, l.Fence())
					l.Release(ctx)
				} else if !errors.Is(err, latchkit.ErrNotAcquired) && !transient(err) {
					t.Errorf("%s: another client's single attempt %s: %v, want ErrNotAcquired or ErrUnavailable", h.label, what, err)
				} else if errors.As(err, &he) && he.Holder != h.note {
					t.Errorf("%s: another client's single attempt %s was told the holder's annotation is %q, want %q", h.label, what, he.Holder, h.note)
				}
			})
		}
		wg.Wait()
	}
	// migrating holds slot MIGRATING for migrateFor, checking the leases
	// on the way and at its end.
	migrating := func(round string) {
		t.Helper()
		if err := cl.BeginMigration(ctx, slot, from, to); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		check(fmt.Sprintf("as slot %d began migrating (%s)", slot, round), began)
		time.Sleep(migrateFor - time.Since(began))
		check(fmt.Sprintf("at the end of slot %d's migration (%s), no key moved", slot, round), began)
	}

	start := time.Now()
	migrating("to be cancelled")
	for _, i := range []int{to, from} {
		if _, err := cl.Nodes[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE"); err != nil {
			t.Fatalf("SETSLOT STABLE on %s: %v", cl.Addrs[i], err)
		}
	}
	time.Sleep(time.Second)
	migrating("to be finished")
	moved, err := cl.MoveKeys(ctx, slot, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.EndMigration(ctx, slot, from, to); err != nil {
		t.Fatal(err)
	}
	t.Logf("slot %d migrated, %d keys moved, %v after the first migration began", slot, moved, time.Since(start).Round(time.Millisecond))
	ended := time.Now()
	time.Sleep(ttl + ttl/4)
	check(fmt.Sprintf("after slot %d moved to %s", slot, cl.Addrs[to]), ended)
	for _, h := range all {
		for i, l := range h.leases {
			if err := l.Release(ctx); err != nil && !h.lost[i] {
				t.Errorf("%s: lease %d's Release after the migration: %v", h.label, i+1, err)
			}
		}
	}
}

// annotate is a middleware storing note beside each grant (a tracing
// middleware's holder link).
func annotate(note string) latchkit.Middleware {
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			req.Annotation = note
			return next(ctx, req)
		}
	}
}

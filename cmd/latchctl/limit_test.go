package main

import (
	"context"
	"errors"
	"github.com/latchkit/latchkit/internal/keyspace"
	"strings"
	"testing"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// TestLimit: latchctl limit stores a semaphore's limit, which clients made
// with another limit then grant by, and inspect shows it with the permits
// each holder holds; bad arguments exit 2 and change nothing; a forced
// release keeps the stored limit.
func TestLimit(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, kind := range []string{"semaphore", "fair_semaphore"} {
		t.Run(kind, func(t *testing.T) {
			newSem := primitives.NewSemaphore
			if kind == "fair_semaphore" {
				newSem = primitives.NewFairSemaphore
			}
			name := "pool-" + kind
			s := must[primitives.Semaphore](t)(newSem(clienttest.For(t, e.b), name, 2, holdOpts...))
			l := must[latchkit.Lease](t)(s.TryAcquireN(ctx, 2))
			defer l.Release(ctx)
			if _, err := s.TryAcquire(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
				t.Fatalf("a third permit of 2: %v", err)
			}
			before := e.do(t, "KEYS", "*")
			for _, bad := range [][]string{{"limit", name}, {"limit", name, "0"}, {"limit", name, "-3"}, {"limit", name, "many"},
				{"limit", name, "3", "-kind", "mutex"}, {"limit", "nobody", "3"}} {
				if code, _, _ := e.latchctl(t, bad...); code != 2 {
					t.Errorf("latchctl %v: exit %d, want 2", bad, code)
				}
			}
			if after := e.do(t, "KEYS", "*"); len(nameKeys(after)) != len(nameKeys(before)) {
				t.Errorf("a refused latchctl limit wrote keys: %v, then %v", before, after)
			}
			out := e.mustRun(t, "limit", name, "3")
			if !strings.HasPrefix(out, kind+" "+name+": limit 3 stored") {
				t.Errorf("limit output: %q", out)
			}
			l3 := must[latchkit.Lease](t)(s.TryAcquire(ctx)) // the third permit, by a client made with 2
			defer l3.Release(ctx)
			out = e.mustRun(t, "inspect", name, "-kind", kind)
			if !strings.Contains(out, "limit 3 (stored by SetLimit)") {
				t.Errorf("inspect does not show the stored limit:\n%s", out)
			}
			if ln := holderLine(t, out, "holder", l); !strings.Contains(ln, "permits=2") {
				t.Errorf("the holder of 2 permits: %q", ln)
			}
			if ln := holderLine(t, out, "holder", l3); strings.Contains(ln, "permits=") {
				t.Errorf("the holder of 1 permit: %q", ln)
			}
			e.mustRun(t, "release", name, "-kind", kind, "-force", "-confirm", name)
			limitKey := keyspace.KeyBase(keyspace.DefaultPrefix, name) + map[string]string{"semaphore": ":sem", "fair_semaphore": ":fair"}[kind] + ":limit"
			if v := e.do(t, "GET", limitKey); v != "3" {
				t.Errorf("after a forced release the stored limit is %v, want 3 kept", v)
			}
		})
	}
}

// TestInspectElection: inspect shows an Election's leader with its value
// and fence, and its waiting campaigners with theirs, in arrival order.
func TestInspectElection(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	el := must[primitives.Election](t)(primitives.NewElection(clienttest.For(t, e.b), "scheduler", holdOpts...))
	lead := must[latchkit.Lease](t)(el.Campaign(ctx, "pod-7"))
	defer lead.Release(context.Background())
	go el.Campaign(ctx, "pod-3") //nolint:errcheck // ends with ctx
	waitFor(t, "pod-3 queued", func() bool {
		return e.do(t, "ZCARD", keyspace.ElectionLayout.KeysOf(keyspace.DefaultPrefix, "scheduler")[5]) == int64(1)
	})
	out := e.mustRun(t, "inspect", "scheduler")
	if !strings.HasPrefix(out, "election scheduler:") {
		t.Errorf("inspect without -kind does not find the election:\n%s", out)
	}
	if ln := holderLine(t, out, "leader", lead); !strings.Contains(ln, "value=pod-7") {
		t.Errorf("leader line: %q", ln)
	}
	if !strings.Contains(out, "waiting") || !strings.Contains(out, "value=pod-3") {
		t.Errorf("the waiting campaigner is not shown:\n%s", out)
	}
}

// nameKeys is a KEYS reply without the Clients' records (see
// keyspace.WithoutClientRecords): the keys of names.
func nameKeys(reply any) []string {
	var keys []string
	for _, k := range reply.([]any) {
		s, _ := k.(string)
		keys = append(keys, s)
	}
	return keyspace.WithoutClientRecords(keys)
}

package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/faultproxy"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// TestElectionObservers: three campaigners take turns leading an Election
// (short terms, each resigning to the next in the queue) while four
// observers watch it, two directly and two through proxies that reset
// their connections and add latency now and then. Every leadership is
// recorded by its campaigner (value and fence). Checked, per driver:
//   - every observer reports only real leaderships and empty seats, in
//     order (fences strictly increase), never one twice in a row;
//   - the direct observers report every leadership, with none skipped;
//   - once the campaigners stop, every observer, faulty or not, ends on
//     the empty seat: none is left on a stale leader.
func TestElectionObservers(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	for _, d := range lane.Subset(drivers, 0, 1) {
		t.Run(d.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			opts := []primitives.Option{primitives.WithTTL(2 * time.Second), primitives.WithPrefix("obs:")}
			type term struct {
				value string
				fence int64
			}
			var mu sync.Mutex
			var terms []term
			var proxies []*faultproxy.Proxy
			type watch struct {
				name   string
				direct bool
				mu     sync.Mutex
				got    []primitives.LeaderInfo
			}
			var watches []*watch
			octx, stopObs := context.WithCancel(ctx)
			defer stopObs()
			var owg sync.WaitGroup
			for i := 0; i < 4; i++ {
				addr, direct := srv.Addr, i < 2
				if !direct {
					px := faultproxy.Start(t, srv.Addr)
					proxies = append(proxies, px)
					addr = px.Addr
				}
				e, err := primitives.NewElection(clienttest.For(t, d.new(t, addr)), "seat", opts...)
				if err != nil {
					t.Fatal(err)
				}
				w := &watch{name: fmt.Sprintf("observer %d (direct: %v)", i, direct), direct: direct}
				watches = append(watches, w)
				ch := e.Observe(octx)
				owg.Add(1)
				go func() {
					defer owg.Done()
					for info := range ch {
						w.mu.Lock()
						w.got = append(w.got, info)
						w.mu.Unlock()
					}
				}()
			}
			time.Sleep(200 * time.Millisecond) // the observers are subscribed
			// The faults: every 150-400 ms one faulty observer's
			// connections are reset, or its latency changes.
			fctx, stopFaults := context.WithCancel(ctx)
			var fwg sync.WaitGroup
			fwg.Add(1)
			go func() {
				defer fwg.Done()
				rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
				for fctx.Err() == nil {
					select {
					case <-fctx.Done():
					case <-time.After(time.Duration(150+rng.IntN(250)) * time.Millisecond):
					}
					px := proxies[rng.IntN(len(proxies))]
					if rng.IntN(2) == 0 {
						px.ResetAll()
					} else {
						px.SetLatency(time.Duration(rng.IntN(30)) * time.Millisecond)
					}
				}
				for _, px := range proxies {
					px.SetLatency(0)
				}
			}()
			var cwg sync.WaitGroup
			for c := 0; c < 3; c++ {
				e, err := primitives.NewElection(clienttest.For(t, d.new(t, srv.Addr)), "seat", opts...)
				if err != nil {
					t.Fatal(err)
				}
				me := fmt.Sprintf("pod-%d", c)
				cwg.Add(1)
				go func() {
					defer cwg.Done()
					for i := 0; i < 12; i++ {
						lead, err := e.Campaign(ctx, me)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						terms = append(terms, term{me, lead.Fence()})
						mu.Unlock()
						time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
						if err := lead.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			cwg.Wait()
			stopFaults()
			fwg.Wait()
			real := map[int64]string{}
			for _, tm := range terms {
				real[tm.fence] = tm.value
			}
			// Every observer settles on the empty seat: the last resignation
			// had nobody waiting.
			violations := 0
			deadline := time.Now().Add(10 * time.Second)
			for _, w := range watches {
				for {
					w.mu.Lock()
					n := len(w.got)
					last := primitives.LeaderInfo{Value: "?"}
					if n > 0 {
						last = w.got[n-1]
					}
					w.mu.Unlock()
					if last == (primitives.LeaderInfo{}) {
						break
					}
					if time.Now().After(deadline) {
						violations++
						t.Errorf("%s: still reports %+v after every campaigner resigned", w.name, last)
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			stopObs()
			owg.Wait()
			for _, w := range watches {
				var lastFence int64
				seen := 0
				for i, info := range w.got {
					if i > 0 && info == w.got[i-1] {
						violations++
						t.Errorf("%s: %+v reported twice in a row", w.name, info)
					}
					if info == (primitives.LeaderInfo{}) {
						continue
					}
					if v, ok := real[info.Fence]; !ok || v != info.Value {
						violations++
						t.Errorf("%s: reported %+v, no such leadership", w.name, info)
					}
					if info.Fence <= lastFence {
						violations++
						t.Errorf("%s: fence %d after %d", w.name, info.Fence, lastFence)
					}
					lastFence = info.Fence
					seen++
				}
				if w.direct && seen != len(terms) {
					violations++
					t.Errorf("%s: reported %d of %d leaderships", w.name, seen, len(terms))
				}
				t.Logf("%s: %d reports, %d of %d leaderships", w.name, len(w.got), seen, len(terms))
			}
			table.mu.Lock()
			table.rows = append(table.rows, row{"election observers", d.name, "Election", len(terms),
				"3 campaigners taking 36 short terms; 4 observers, 2 of them behind proxies that reset their connections and vary latency every 150-400 ms: every report a real leadership in fence order, none skipped by the direct observers, every observer on the empty seat at the end", violations})
			table.mu.Unlock()
		})
	}
}

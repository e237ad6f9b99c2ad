package faults_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// TestMixedDrivers: clients of every driver (drivers: the recommended
// options of each) contend for one name of every primitive on one
// redis-server, two clients a driver, each taking and giving back the
// primitive for a second. The scripts and keys are the driver's business
// no more than the server's: no grant may overlap another beyond what the
// primitive allows (an exclusive holder alone), and every driver's
// clients must be granted it.
func TestMixedDrivers(t *testing.T) {
	redistest.Require(t)
	lane.ParallelFast(t) // servers of its own
	const perDriver = 2
	for _, p := range lane.Subset(prims, 0, 3) {
		t.Run(p.name, func(t *testing.T) {
			srv := redistest.Start(t)
			var (
				mu        sync.Mutex
				holders   int
				exclusive bool
				grants    = make(map[string]int)
			)
			enter := func(driver string, excl bool) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case exclusive:
					t.Errorf("%s granted %s while an exclusive holder held it", driver, p.name)
				case excl && holders > 0:
					t.Errorf("%s granted %s exclusively beside %d holders", driver, p.name, holders)
				case holders >= p.limit:
					t.Errorf("%s granted %s beyond its %d holders", driver, p.name, p.limit)
				}
				holders++
				exclusive = exclusive || excl
				grants[driver]++
			}
			leave := func(excl bool) {
				mu.Lock()
				defer mu.Unlock()
				holders--
				if excl {
					exclusive = false
				}
			}
			until := time.Now().Add(time.Second)
			var wg sync.WaitGroup
			w := 0
			for _, d := range drivers {
				for range perDriver {
					lock, _, excl, err := p.open(clienttest.For(t, d.new(t, srv.Addr)), w, primitives.WithPrefix("mixed:"))
					if err != nil {
						t.Fatal(err)
					}
					w++
					wg.Go(func() { contend(t, d.name, lock, excl, until, enter, leave) })
				}
			}
			wg.Wait()
			for _, d := range drivers {
				if grants[d.name] == 0 {
					t.Errorf("%s: no grant to %s's clients", p.name, d.name)
				}
			}
			t.Logf("grants by driver: %v", grants)
		})
	}
}

// contend takes and gives back a primitive through lock until the time
// is up, telling enter and leave of each hold (a hold ends when Release
// is called, or earlier when the lease is lost).
func contend(t *testing.T, driver string, lock acquireFunc, excl bool, until time.Time, enter func(string, bool), leave func(bool)) {
	for time.Now().Before(until) {
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		l, err := lock(ctx)
		cancel()
		if err != nil {
			continue // a deadline under contention: try again
		}
		enter(driver, excl)
		time.Sleep(2 * time.Millisecond)
		if l.Context().Err() != nil {
			t.Errorf("%s: lease lost without a fault", driver)
		}
		leave(excl)
		ctx, cancel = context.WithTimeout(context.Background(), callDeadline)
		if err := l.Release(ctx); err != nil {
			t.Errorf("%s: Release: %v", driver, err)
		}
		cancel()
	}
}

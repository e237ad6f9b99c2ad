package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkit/latchkit/internal/handoff"
)

// uncontendedResult is one run of S1, S2 or S4.
type uncontendedResult struct {
	opsPerSec   float64 // lock+unlock pairs per second
	sentPerOp   float64 // commands sent per pair, by the client hook
	callsPerOp  float64 // commandstats calls per pair, scripts' commands included
	cpuPerOp    float64 // Redis CPU seconds per pair, all servers
	scriptPerOp float64 // seconds Redis spent in scripts per pair, all servers
	errors      int64   // failed operations (timeouts): counted, not fatal
}

// maxErrors is how many failed operations a run tolerates before it is
// abandoned: a stray timeout on a busy machine should not end a long run.
const maxErrors = 100

// runUncontended runs lock+unlock on fresh keys from g goroutines sharing
// one client, for d.
func runUncontended(ctx context.Context, c contender, servers []*server, g int, d time.Duration, prefix string) (uncontendedResult, error) {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	var sent atomic.Int64
	lc, err := c.open(ctx, addrs, &sent)
	if err != nil {
		return uncontendedResult{}, err
	}
	defer lc.close()
	var seq atomic.Int64
	op := func(ctx context.Context) error {
		key := prefix + strconv.FormatInt(seq.Add(1), 10)
		unlock, err := lc.try(ctx, key)
		if err != nil {
			return err
		}
		return unlock(ctx)
	}
	// Warm up: connections open, scripts loaded.
	for range 3 * g {
		if err := op(ctx); err != nil {
			return uncontendedResult{}, fmt.Errorf("%s: warm-up: %w", c.name, err)
		}
	}
	before, err := sumStats(ctx, servers)
	if err != nil {
		return uncontendedResult{}, err
	}
	sent.Store(0)
	var ops, errs atomic.Int64
	var firstErr error
	var once sync.Once
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && runCtx.Err() == nil {
				if err := op(runCtx); err != nil {
					if errs.Add(1) > maxErrors {
						once.Do(func() { firstErr = fmt.Errorf("more than %d errors, the last: %w", maxErrors, err); cancel() })
						return
					}
					continue
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return uncontendedResult{}, fmt.Errorf("%s: %w", c.name, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return uncontendedResult{}, err
	}
	after, err := sumStats(ctx, servers)
	if err != nil {
		return uncontendedResult{}, err
	}
	st := after.sub(before)
	n := float64(max(ops.Load(), 1))
	return uncontendedResult{
		opsPerSec:   float64(ops.Load()) / elapsed.Seconds(),
		sentPerOp:   float64(sent.Load()+st.subscribe) / n,
		callsPerOp:  float64(st.calls) / n,
		cpuPerOp:    st.cpu / n,
		scriptPerOp: float64(st.scriptUsec) / 1e6 / n,
		errors:      errs.Load(),
	}, nil
}

// sumStats adds up the servers' stats.
func sumStats(ctx context.Context, servers []*server) (serverStats, error) {
	sum := serverStats{byCommand: map[string]int64{}}
	for _, s := range servers {
		st, err := s.stats(ctx)
		if err != nil {
			return sum, err
		}
		sum.calls += st.calls
		sum.subscribe += st.subscribe
		sum.cpu += st.cpu
		sum.scriptUsec += st.scriptUsec
	}
	return sum, nil
}

// contendedResult is one run of S3: what the recorder saw, with the
// run's length and its commands.
type contendedResult struct {
	handoff.Result
	elapsed time.Duration
	sent    int64       // commands sent (client hooks + SUBSCRIBE family)
	server  serverStats // commandstats and CPU deltas
}

// runContended has n clients, each with its own driver client, loop on
// one key for d: wait for it, hold it for hold, release, and wait again.
func runContended(ctx context.Context, c contender, srv *server, n int, hold, d time.Duration, key string) (contendedResult, error) {
	var sent atomic.Int64
	clients := make([]*lockClient, 0, n)
	defer func() {
		for _, lc := range clients {
			lc.close()
		}
	}()
	for range n {
		lc, err := c.open(ctx, []string{srv.Addr}, &sent)
		if err != nil {
			return contendedResult{}, err
		}
		clients = append(clients, lc)
		// Warm up this client: a connection, the scripts loaded.
		unlock, err := lc.try(ctx, key+":warm")
		if err != nil {
			return contendedResult{}, fmt.Errorf("%s: warm-up: %w", c.name, err)
		}
		if err := unlock(ctx); err != nil {
			return contendedResult{}, fmt.Errorf("%s: warm-up: %w", c.name, err)
		}
	}
	before, err := srv.stats(ctx)
	if err != nil {
		return contendedResult{}, err
	}
	sent.Store(0)
	rc := handoff.NewRecorder()
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	deadline, _ := runCtx.Deadline()
	var wg sync.WaitGroup
	for id, lc := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				waitStart := time.Now()
				gaveUp := 0
				unlock, err := lc.lock(runCtx, key)
				// The run is over when runCtx says so or its deadline has
				// passed (a library may see that first, and give up).
				over := func() bool { return runCtx.Err() != nil || !time.Now().Before(deadline) }
				for err != nil && !over() {
					gaveUp++ // the library gave up by itself: a user would try again
					unlock, err = lc.lock(runCtx, key)
				}
				if err != nil {
					rc.Pending(waitStart, gaveUp)
					return
				}
				rc.Granted(id, waitStart, gaveUp)
				time.Sleep(hold)
				rc.Releasing(id)
				if err := unlock(context.Background()); err != nil {
					rc.Failed()
				}
			}
		}()
	}
	wg.Wait()
	res := contendedResult{Result: rc.Result(), elapsed: time.Since(start)}
	if err := ctx.Err(); err != nil {
		return contendedResult{}, err
	}
	after, err := srv.stats(ctx)
	if err != nil {
		return contendedResult{}, err
	}
	res.server = after.sub(before)
	res.sent = sent.Load() + res.server.subscribe
	if res.Acquisitions == 0 {
		return contendedResult{}, errors.New(c.name + ": no acquisition in the whole run")
	}
	return res, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
)

// S5 is issue 17's scale scenario: many waiters over many names across
// several processes on one Redis. Each process is stood in for by a
// go-redis client and a latchkit Client of its own (so a pub/sub Hub and a
// renewer of its own, as a process has), named so that CLIENT LIST tells
// its connections apart. Every name is first held by a holder; then every
// waiter calls Lock on its name and queues; then the holders release, and
// each name is handed from waiter to waiter (each holding for hold) until
// every waiter has been served. Waiter i waits on name i mod names in
// process (i / names) mod procs, so that a name's waiters are spread over
// the processes and hand-overs cross them.
type scaleConfig struct {
	waiters, names, procs int
	hold                  time.Duration
	timeout               time.Duration // for the whole run
}

// scaleResult is what one S5 run measured.
type scaleResult struct {
	cfg          scaleConfig
	queued       time.Duration // until every waiter had queued
	served       int64         // waiters granted the lock
	drain        time.Duration // from the holders' release to the last waiter served
	pubsubByProc []int         // pub/sub connections of each process while all wait
	handovers    int64         // grants by hand-over (every waiter's)
	server       serverStats   // from the first waiter's Lock to the last waiter served
	errors       int64
}

// runScale runs S5 on srv.
func runScale(ctx context.Context, srv *server, cfg scaleConfig, progress func(string, ...any)) (scaleResult, error) {
	res := scaleResult{cfg: cfg, pubsubByProc: make([]int, cfg.procs)}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	// The waiters wait for minutes: a waiter timeout of that order keeps
	// their heartbeats (an attempt every third of it) out of the figures.
	opts := []primitives.Option{primitives.WithTTL(time.Minute), primitives.WithWaiterTimeout(5 * time.Minute)}
	var clients []*redis.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	client := func(name string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: name, ContextTimeoutEnabled: true, PoolSize: 64})
		clients = append(clients, c)
		return c
	}
	bs := []backend.Backend{goredis.New(client("s5-holders"))}
	for p := range cfg.procs {
		bs = append(bs, goredis.New(client(fmt.Sprintf("s5-proc-%d", p))))
	}
	cls, closeAll, err := latchkitClients(bs)
	if err != nil {
		return res, err
	}
	// Before the go-redis clients close: a waiter still queued (the run
	// gave up) is withdrawn, what is held is released.
	defer closeAll()
	holders, procs := cls[0], cls[1:]
	names := make([]string, cfg.names)
	for i := range names {
		names[i] = "s5:" + strconv.Itoa(i)
	}

	// The holders take every name.
	held := make([]latchkit.Lease, cfg.names)
	for i, n := range names {
		m, err := primitives.NewMutex(holders, n, opts...)
		if err != nil {
			return res, err
		}
		if held[i], err = m.TryLock(ctx); err != nil {
			return res, fmt.Errorf("holder of %s: %w", n, err)
		}
	}

	// The waiters queue. Redis's work is counted from here to the last
	// waiter served: every waiter's queueing attempts, subscriptions,
	// hand-overs and releases, as the 16-client S3 figure counts them.
	before, err := srv.stats(ctx)
	if err != nil {
		return res, err
	}
	var queued, served, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	var drainStart atomic.Int64
	var lastServed atomic.Int64
	for i := range cfg.waiters {
		cl := procs[(i/cfg.names)%cfg.procs]
		m, err := primitives.NewMutex(cl, names[i%cfg.names], append(opts, primitives.WithMiddleware(countFirstAttempt(&queued)))...)
		if err != nil {
			return res, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Lock(ctx)
			if err != nil {
				errs.Add(1)
				return
			}
			served.Add(1)
			time.Sleep(cfg.hold)
			if err := l.Release(context.Background()); err != nil {
				errs.Add(1)
			}
			lastServed.Store(time.Now().UnixNano())
		}()
	}
	for queued.Load() < int64(cfg.waiters) {
		if ctx.Err() != nil {
			return res, fmt.Errorf("only %d of %d waiters queued: %w", queued.Load(), cfg.waiters, ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.queued = time.Since(start)
	progress("S5: %d waiters queued in %v", cfg.waiters, res.queued.Round(time.Millisecond))

	// Every waiter waits: count each process's pub/sub connections.
	list, err := srv.admin.ClientList(ctx).Result() // (CLIENT LIST is counted too: one command)
	if err != nil {
		return res, err
	}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		var name, flags string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "name="); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(f, "flags="); ok {
				flags = v
			}
		}
		if p, ok := strings.CutPrefix(name, "s5-proc-"); ok && strings.Contains(flags, "P") {
			if i, err := strconv.Atoi(p); err == nil && i < cfg.procs {
				res.pubsubByProc[i]++
			}
		}
	}

	// The holders release; the names are handed from waiter to waiter.
	drainStart.Store(time.Now().UnixNano())
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			return res, fmt.Errorf("holder's release: %w", err)
		}
	}
	wg.Wait()
	res.drain = time.Duration(lastServed.Load() - drainStart.Load())
	after, err := srv.stats(ctx)
	if err != nil {
		return res, err
	}
	res.server = after.sub(before)
	res.served, res.errors = served.Load(), errs.Load()
	res.handovers = res.served // every waiter is granted by a hand-over
	if res.served == 0 {
		return res, errors.New("S5: no waiter was served")
	}
	return res, nil
}

// countFirstAttempt counts acquisitions whose first attempt has returned
// (a waiter has queued once its first attempt found the name held).
func countFirstAttempt(n *atomic.Int64) latchkit.Middleware {
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			req.OnAttempt = func(attempt int, _ error) {
				if attempt == 1 {
					n.Add(1)
				}
			}
			return next(ctx, req)
		}
	}
}

// writeScale prints S5 beside the 16-client S3 figure of Redis CPU per
// cross-client hand-over (when S3 ran in the same run).
func (r *report) writeScale(w io.Writer) {
	s := r.s5
	fmt.Fprintf(w, "## S5: %d waiters over %d names across %d processes (clients standing in for them), holding %v\n\n",
		s.cfg.waiters, s.cfg.names, s.cfg.procs, s.cfg.hold)
	fmt.Fprintln(w, "Every name is held first; the waiters queue (a waiting `Lock` each, latchkit `Mutex`, go-redis, waiter timeout 5 min so that heartbeats stay out of the figures); then the holders release and every name passes from waiter to waiter. Redis CPU and commands are counted from the first waiter's `Lock` to the last waiter served (queueing attempts, subscriptions, hand-overs, releases), as S3 counts them; hand-overs/s over the drain, from the holders' release to the last waiter served.")
	fmt.Fprintln(w)
	maxConns := 0
	for _, n := range s.pubsubByProc {
		maxConns = max(maxConns, n)
	}
	perHandover := s.server.cpu / float64(s.handovers)
	fmt.Fprintln(w, "| waiters served | queued in | drained in | hand-overs/s | pub/sub connections per process | Redis CPU per hand-over | in scripts per hand-over | commandstats per hand-over | errors |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---|---:|---:|---:|---:|")
	fmt.Fprintf(w, "| %d of %d | %v | %v | %.0f | %v | %s | %s | %.2f | %d |\n\n", s.served, s.cfg.waiters,
		s.queued.Round(time.Millisecond), s.drain.Round(time.Millisecond), float64(s.handovers)/s.drain.Seconds(),
		s.pubsubByProc, fmtMicros(perHandover), fmtMicros(float64(s.server.scriptUsec)/1e6/float64(s.handovers)),
		float64(s.server.calls)/float64(s.handovers), s.errors)
	r.check("S5 every waiter served", "latchkit Mutex, go-redis", fmt.Sprintf("%d of %d", s.served, s.cfg.waiters), s.served == int64(s.cfg.waiters) && s.errors == 0)
	r.check("S5 pub/sub connections per process ≤ 2", "latchkit Mutex, go-redis", strconv.Itoa(maxConns), maxConns <= 2)
	if ref, ok := r.s3HandoverCPU("latchkit Mutex, go-redis"); ok {
		r.check("S5 Redis CPU per hand-over within 20% of the 16-client S3 figure", "latchkit Mutex, go-redis",
			fmt.Sprintf("%s vs %s (%.2fx)", fmtMicros(perHandover), fmtMicros(ref), perHandover/ref), perHandover <= 1.2*ref)
	}
}

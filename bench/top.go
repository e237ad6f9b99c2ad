package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
)

// T1 measures `latchctl top` on a large keyspace (docs/operations.md,
// "latchctl top"): n Mutex names held by 20 Clients with records (named
// worker-0 .. worker-19, each its own go-redis client), with an hour's
// TTL and no renewal, 50 of them with 1 to 7 queued waiters; then
// `latchctl top -once` (a whole pass) several times, and the live view
// for a number of refreshes, each timed from outside, with Redis CPU read
// from INFO cpu before and after.

// topConfig is T1's shape.
type topConfig struct {
	names     int // held names
	onces     int // runs of top -once
	refreshes int // refreshes of the live view (1 s apart)
}

// topResult is what T1 measured.
type topResult struct {
	cfg         topConfig
	keys        int64           // DBSIZE after the set-up
	setUp       time.Duration   // locking the names
	onceWall    []time.Duration // each top -once, the process included
	onceCPU     []float64       // Redis CPU of each, s
	liveWall    time.Duration   // the live view, start to stop
	liveCPU     float64         // Redis CPU over the live view, s
	liveRefresh int             // refreshes it printed
	liveLast    string          // the last refresh's own summary line
}

const (
	topClients = 20
	topWaited  = 50 // names with waiters
)

// measureTop runs T1 on srv, with latchctl built from the repository.
func measureTop(ctx context.Context, srv *server, cfg topConfig, progress func(string, ...any)) (topResult, error) {
	r := topResult{cfg: cfg}
	dir, err := os.MkdirTemp("", "latchkit-top")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "latchctl")
	progress("T1: building latchctl")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/latchctl")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		return r, fmt.Errorf("go build ./cmd/latchctl: %w\n%s", err, out)
	}

	progress("T1: %d names held by %d Clients", cfg.names, topClients)
	start := time.Now()
	clients := make([]*primitives.Client, topClients)
	for i := range clients {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 8})
		defer c.Close()
		cl, err := primitives.NewClient(goredis.New(c), primitives.WithClientName("worker-"+strconv.Itoa(i)))
		if err != nil {
			return r, err
		}
		clients[i] = cl
	}
	defer closeLatchkit(clients)
	opts := []primitives.Option{primitives.WithTTL(time.Hour), primitives.WithAutoExtend(false)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for g := range topClients * 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[g%topClients]
			for i := g; i < cfg.names; i += topClients * 4 {
				m, err := primitives.NewMutex(cl, "job:"+strconv.Itoa(i), opts...)
				if err == nil {
					_, err = m.TryLock(ctx)
				}
				if err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return r, first
	}
	// Waiters: name i of the first topWaited gets 1 + i%7 of them, each a
	// Lock that waits until the end of the run.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	waiting := 0
	for i := range topWaited {
		for w := range 1 + i%7 {
			m, err := primitives.NewMutex(clients[(i+w+1)%topClients], "job:"+strconv.Itoa(i), opts...)
			if err != nil {
				return r, err
			}
			waiting++
			go m.Lock(wctx) // ends with wctx
		}
	}
	for {
		n, err := srv.admin.ZCard(ctx, "latch:{job:0}:q").Result()
		if err != nil {
			return r, err
		}
		if n >= 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // the Clients' records are written a second into their busy spell
	r.setUp = time.Since(start)
	if r.keys, err = srv.admin.DBSize(ctx).Result(); err != nil {
		return r, err
	}

	cpu := func() (float64, error) {
		st, err := srv.stats(ctx)
		return st.cpu, err
	}
	for i := range cfg.onces {
		progress("T1: top -once, run %d", i+1)
		before, err := cpu()
		if err != nil {
			return r, err
		}
		t0 := time.Now()
		out, err := exec.CommandContext(ctx, bin, "top", "-once", "-addr", srv.Addr).CombinedOutput()
		wall := time.Since(t0)
		if err != nil {
			return r, fmt.Errorf("latchctl top -once: %w\n%s", err, out)
		}
		after, err := cpu()
		if err != nil {
			return r, err
		}
		r.onceWall, r.onceCPU = append(r.onceWall, wall), append(r.onceCPU, after-before)
	}

	progress("T1: the live view, %d refreshes", cfg.refreshes)
	before, err := cpu()
	if err != nil {
		return r, err
	}
	live := exec.CommandContext(ctx, bin, "top", "-addr", srv.Addr)
	pr, pw := io.Pipe()
	live.Stdout, live.Stderr = pw, pw
	t0 := time.Now()
	if err := live.Start(); err != nil {
		return r, err
	}
	counted := make(chan struct{})
	go func() { // counts the refreshes by their last line
		defer close(counted)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "this refresh: ") {
				r.liveRefresh++
				r.liveLast = line
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	time.Sleep(time.Duration(cfg.refreshes)*time.Second + 500*time.Millisecond)
	_ = live.Process.Signal(syscall.SIGINT)
	_ = live.Wait()
	r.liveWall = time.Since(t0)
	pw.Close()
	<-counted
	after, err := cpu()
	if err != nil {
		return r, err
	}
	r.liveCPU = after - before
	return r, nil
}

func (r topResult) write(w io.Writer) {
	fmt.Fprintf(w, "## T1: latchctl top on %d held Mutex names (%d Clients with records, %d names with 1-7 waiters)\n\n", r.cfg.names, topClients, topWaited)
	fmt.Fprintf(w, "Set-up %v; %d keys (DBSIZE).\n\n", r.setUp.Round(time.Millisecond), r.keys)
	fmt.Fprintln(w, "| | wall time | Redis CPU |")
	fmt.Fprintln(w, "|---|---:|---:|")
	walls := append([]time.Duration(nil), r.onceWall...)
	sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
	cpus := append([]float64(nil), r.onceCPU...)
	sort.Float64s(cpus)
	if len(walls) > 0 {
		fmt.Fprintf(w, "| `top -once` (a whole pass, the process included), %d runs | %v–%v | %.2f–%.2f s |\n",
			len(walls), walls[0].Round(10*time.Millisecond), walls[len(walls)-1].Round(10*time.Millisecond), cpus[0], cpus[len(cpus)-1])
	}
	if r.liveRefresh > 0 {
		fmt.Fprintf(w, "| the live view (default budget), %d refreshes in %v | | %.0f ms a refresh (%.1f %% of a core) |\n",
			r.liveRefresh, r.liveWall.Round(100*time.Millisecond), 1000*r.liveCPU/float64(r.liveRefresh), 100*r.liveCPU/r.liveWall.Seconds())
	}
	if r.liveLast != "" {
		fmt.Fprintf(w, "\nThe live view's last refresh: %s\n", r.liveLast)
	}
	fmt.Fprintln(w)
}

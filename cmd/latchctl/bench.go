package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
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
	"github.com/latchkit/latchkit/internal/floor"
	"github.com/latchkit/latchkit/internal/handoff"
	"github.com/latchkit/latchkit/primitives"
)

// benchConfig is `latchctl bench`'s flags.
type benchConfig struct {
	target
	duration   time.Duration // per row
	clients    int           // S3: separate clients on one key
	goroutines int           // S2: goroutines on one client
	hold       time.Duration // S3: how long each grant is held
	prefix     string        // every key of the run starts with it
}

// runBench is `latchctl bench`: latchkit's own figures on a given Redis
// (or the embedded one), for users to check their setup. S1 and S2 run an
// uncontended TryLock+Release on fresh keys (from 1 goroutine, then many
// on one client) beside the floor: SET NX PX, then an EVALSHA
// compare-and-delete, the two round trips any safe lock costs. S3 has
// separate clients, as separate processes would, contend for one key.
// The side-by-side comparison with other libraries is the bench module
// in the repository (cd bench && go run .).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := benchConfig{goroutines: 64, hold: time.Millisecond}
	fs := newFlagSet("bench", "[flags]", stderr)
	fs.StringVar(&c.addr, "addr", "", "Redis address host:port (default: an embedded miniredis)")
	fs.StringVar(&c.driver, "driver", "goredis", "driver: goredis, rueidis, valkey or redigo")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "how long each row runs")
	fs.IntVar(&c.clients, "clients", 16, "S3: separate clients contending for one key")
	c.verboseFlag(fs, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case c.duration <= 0:
		return fmt.Errorf("%w: -duration must be positive", errUsage)
	case c.clients < 2:
		return fmt.Errorf("%w: -clients must be at least 2", errUsage)
	}
	if err := c.open(); err != nil {
		return err
	}
	defer c.close()
	c.prefix = "latchctl-bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	fmt.Fprintf(stdout, "latchctl bench: latchkit on %s, driver %s, %v per row\n\n", c.describe(), c.driver, c.duration)
	return bench(ctx, c, stdout)
}

// bench runs S1 to S3 and prints their rows as Markdown tables.
func bench(ctx context.Context, c benchConfig, w io.Writer) (err error) {
	b, do, closeFn, err := c.client(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	defer func() {
		// With a background context: the keys go even after Ctrl-C.
		if _, cerr := cleanup(context.WithoutCancel(ctx), do, c.prefix); cerr != nil && err == nil {
			err = fmt.Errorf("remove the benchmark's keys: %w", cerr)
		}
	}()
	cl, err := primitives.NewClient(b)
	if err != nil {
		return err
	}
	defer func() { // before the keys go and the connections close
		if cerr := closeClients(ctx, cl); cerr != nil && err == nil {
			err = cerr
		}
	}()
	sent := countSent(b)

	fmt.Fprintln(w, "| scenario | what | lock+unlock/s | × floor | commands sent/op |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for _, s := range []struct {
		name string
		g    int
	}{{"S1", 1}, {"S2", c.goroutines}} {
		floor, err := uncontended(ctx, c.duration, s.g, sent, floorOp(b, do, c.prefix+s.name+":floor:"))
		if err != nil {
			return fmt.Errorf("%s floor: %w", s.name, err)
		}
		mutex, err := uncontended(ctx, c.duration, s.g, sent, mutexOp(cl, c.prefix, s.name+":mutex:"))
		if err != nil {
			return fmt.Errorf("%s Mutex: %w", s.name, err)
		}
		what := fmt.Sprintf("%d goroutine(s), fresh keys", s.g)
		fmt.Fprintf(w, "| %s | floor (SET NX PX + EVALSHA del), %s | %.0f | 1.00 | %s |\n", s.name, what, floor.perSec, floor.sent)
		fmt.Fprintf(w, "| %s | Mutex TryLock+Release, %s | %.0f | %.2f | %s |\n", s.name, what, mutex.perSec, mutex.perSec/floor.perSec, mutex.sent)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | what | acquisitions/s | handoffs/s | handoff p50 | handoff p99 | self-reacquire | max wait | commands sent/acq | commandstats/acq | Redis CPU/acq | violations |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, m := range []struct {
		name string
		mk   func(*primitives.Client, string, ...primitives.Option) (primitives.Mutex, error)
	}{{"Mutex", primitives.NewMutex}, {"FairMutex", primitives.NewFairMutex}} {
		r, err := contended(ctx, c, m.mk, do, "S3:"+m.name)
		if err != nil {
			return fmt.Errorf("S3 %s: %w", m.name, err)
		}
		sec := r.elapsed.Seconds()
		n := float64(r.Acquisitions)
		fmt.Fprintf(w, "| S3 | %s, %d clients, hold %v | %.0f | %.0f | %s | %s | %.1f%% | %s | %s | %s | %s | %d |\n",
			m.name, c.clients, c.hold, n/sec, float64(r.Handoffs)/sec,
			millis(handoff.Quantile(r.Handoff, 0.5)), millis(handoff.Quantile(r.Handoff, 0.99)),
			100*float64(r.SelfReacq)/max(n-1, 1), millis(r.MaxWait), r.sent, r.calls, r.cpu, r.Violations)
	}
	return nil
}

// countSent installs a hook counting the commands a go-redis client sends;
// nil for drivers without one (rueidis takes hooks only at construction).
func countSent(b backend.Backend) *atomic.Int64 {
	var c *redis.Client
	if u, ok := b.(interface{ As(any) bool }); !ok || !u.As(&c) {
		return nil
	}
	n := new(atomic.Int64)
	c.AddHook(sentHook{n})
	return n
}

// sentHook counts go-redis commands.
type sentHook struct{ n *atomic.Int64 }

func (h sentHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}

func (h sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// perOp formats count per op, or n/a when the count is unknown.
func perOp(count *atomic.Int64, before int64, ops int64) string {
	if count == nil || ops == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(count.Load()-before)/float64(ops))
}

// benchCasDel is the floor's release: compare-and-delete.
var benchCasDel = backend.NewScript(floor.CasDelSource)

// floorOp is the floor: SET NX PX, then compare-and-delete by EVALSHA.
func floorOp(b backend.Backend, do func(context.Context, ...string) (any, error), prefix string) func(context.Context, int64) error {
	return func(ctx context.Context, i int64) error {
		key, tok := prefix+strconv.FormatInt(i, 10), rand.Text() // 128 random bits, as latchkit's tokens
		v, err := do(ctx, "SET", key, tok, "NX", "PX", "10000")
		if err != nil {
			return fmt.Errorf("SET NX %s: %w", key, err)
		}
		if v == nil {
			return fmt.Errorf("SET NX %s: %w", key, latchkit.ErrNotAcquired)
		}
		if _, err := b.Eval(ctx, benchCasDel, []string{key}, []string{tok}); err != nil {
			return fmt.Errorf("compare-and-delete %s: %w", key, err)
		}
		return nil
	}
}

// mutexOp is a latchkit Mutex of cl, default options, TryLock+Release.
func mutexOp(cl *primitives.Client, prefix, name string) func(context.Context, int64) error {
	return func(ctx context.Context, i int64) error {
		m, err := primitives.NewMutex(cl, name+strconv.FormatInt(i, 10), primitives.WithPrefix(prefix))
		if err != nil {
			return err
		}
		l, err := m.TryLock(ctx)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

// rate is an uncontended row's result.
type rate struct {
	perSec float64
	sent   string // commands sent per op, or n/a
}

// uncontended runs op from g goroutines for d.
func uncontended(ctx context.Context, d time.Duration, g int, sent *atomic.Int64, op func(context.Context, int64) error) (rate, error) {
	var seq atomic.Int64
	for range g { // warm up: connections open, scripts loaded
		if err := op(ctx, seq.Add(1)); err != nil {
			return rate{}, err
		}
	}
	var before int64
	if sent != nil {
		before = sent.Load()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		ops      atomic.Int64
		once     sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := op(ctx, seq.Add(1)); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return rate{}, firstErr
	}
	return rate{perSec: float64(ops.Load()) / time.Since(start).Seconds(), sent: perOp(sent, before, ops.Load())}, nil
}

// contention is an S3 row's result: what the recorder saw, and the
// counts per acquisition (or n/a).
type contention struct {
	handoff.Result
	elapsed          time.Duration
	sent, calls, cpu string
}

// contended has c.clients separate clients loop on one key for
// c.duration: wait for it, hold it for c.hold, release, wait again. Each
// client has its own connections and its own latchkit Client.
func contended(ctx context.Context, c benchConfig, newMutex func(*primitives.Client, string, ...primitives.Option) (primitives.Mutex, error),
	do func(context.Context, ...string) (any, error), name string) (_ *contention, err error) {
	type member struct {
		m    primitives.Mutex
		sent *atomic.Int64 // nil: not countable on this driver
	}
	var (
		cls     []*primitives.Client
		closers []func()
	)
	defer func() {
		// The latchkit Clients first, while their connections are open.
		if cerr := closeClients(ctx, cls...); cerr != nil && err == nil {
			err = cerr
		}
		for _, closeFn := range closers {
			closeFn()
		}
	}()
	members := make([]member, c.clients)
	for i := range members {
		b, _, closeFn, err := c.client(ctx)
		if err != nil {
			return nil, err
		}
		closers = append(closers, closeFn)
		cl, err := primitives.NewClient(b)
		if err != nil {
			return nil, err
		}
		cls = append(cls, cl)
		sent := countSent(b)
		// Warm up: a connection open, the scripts loaded.
		if err := mutexOp(cl, c.prefix, name+":warm:")(ctx, int64(i)); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		m, err := newMutex(cl, name, primitives.WithPrefix(c.prefix))
		if err != nil {
			return nil, err
		}
		members[i] = member{m, sent}
	}
	sentTotal := func() (int64, bool) {
		var n int64
		for _, m := range members {
			if m.sent == nil {
				return 0, false
			}
			n += m.sent.Load()
		}
		return n, true
	}
	sent0, _ := sentTotal()
	calls0, cpu0, _ := serverCounts(ctx, do)

	rec := handoff.NewRecorder()
	runCtx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	var (
		once     sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for id, mem := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				waitStart := time.Now()
				l, err := mem.m.Lock(runCtx)
				if err != nil {
					rec.Pending(waitStart, 0)
					// A driver may see the deadline pass before runCtx
					// reports it.
					if runCtx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
						once.Do(func() { firstErr = fmt.Errorf("Lock: %w", err); cancel() })
					}
					return
				}
				rec.Granted(id, waitStart, 0)
				time.Sleep(c.hold)
				rec.Releasing(id)
				if err := l.Release(context.Background()); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("Release: %w", err); cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	r := &contention{Result: rec.Result(), elapsed: time.Since(start)}
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.Acquisitions == 0 {
		return nil, errors.New("no acquisition in the whole run")
	}
	n := float64(r.Acquisitions)
	r.sent, r.calls, r.cpu = "n/a", "n/a", "n/a"
	if sent1, ok := sentTotal(); ok {
		r.sent = fmt.Sprintf("%.2f", float64(sent1-sent0)/n)
	}
	if calls1, cpu1, ok := serverCounts(ctx, do); ok {
		r.calls = fmt.Sprintf("%.2f", float64(calls1-calls0)/n)
		r.cpu = fmt.Sprintf("%.0f µs", (cpu1-cpu0)/n*1e6)
	}
	return r, nil
}

// cleanup deletes every key under prefix (SCAN, never KEYS): latchkit keeps
// given-back tokens, fences kept while ahead and stored limits for a while,
// and a benchmark must not leave its keys behind.
func cleanup(ctx context.Context, do func(context.Context, ...string) (any, error), prefix string) (int, error) {
	deleted, cursor := 0, "0"
	for {
		v, err := do(ctx, "SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
		if err != nil {
			return deleted, fmt.Errorf("SCAN: %w", err)
		}
		reply, ok := v.([]any)
		if !ok || len(reply) != 2 {
			return deleted, fmt.Errorf("SCAN: unexpected reply %T", v)
		}
		cursor = fmt.Sprint(reply[0])
		keys, _ := reply[1].([]any)
		if len(keys) > 0 {
			args := []string{"DEL"}
			for _, k := range keys {
				args = append(args, fmt.Sprint(k))
			}
			if _, err := do(ctx, args...); err != nil {
				return deleted, fmt.Errorf("DEL: %w", err)
			}
			deleted += len(keys)
		}
		if cursor == "0" {
			return deleted, nil
		}
	}
}

// serverCounts reads INFO commandstats (calls, INFO itself excluded) and
// INFO cpu (seconds); ok is false when the server has no such sections
// (miniredis).
func serverCounts(ctx context.Context, do func(context.Context, ...string) (any, error)) (calls int64, cpu float64, ok bool) {
	cs, err := do(ctx, "INFO", "commandstats")
	if err != nil {
		return 0, 0, false
	}
	cpuInfo, err := do(ctx, "INFO", "cpu")
	if err != nil {
		return 0, 0, false
	}
	csText, _ := cs.(string)
	cpuText, _ := cpuInfo.(string)
	for _, line := range strings.Split(csText, "\n") {
		name, rest, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		field, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(strings.TrimPrefix(field, "calls="), 10, 64)
		if err == nil {
			calls += n
		}
	}
	cpuFields := 0
	for _, line := range strings.Split(cpuText, "\n") {
		k, v, found := strings.Cut(strings.TrimSpace(line), ":")
		if found && (k == "used_cpu_sys" || k == "used_cpu_user") {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				cpu += f
				cpuFields++
			}
		}
	}
	return calls, cpu, calls > 0 && cpuFields == 2
}

// millis formats d in milliseconds.
func millis(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

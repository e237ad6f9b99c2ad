package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/primitives"
)

// demoConfig is the demo's flags.
type demoConfig struct {
	target
	traders, clients, items int
	checkout                int
	duration                time.Duration
	seed                    uint64
	json                    bool
	metricsAddr             string // -metrics-addr: serve Prometheus metrics (demo_telemetry.go)
	otlp                    string // -otlp: send traces over OTLP/HTTP
	linger                  time.Duration

	// tracing, when set, is put outermost in every primitive's middleware.
	tracing *demoTelemetry

	// unlocked is a fault for tests: buy without the item's and the
	// accounts' locks, to show that the checks catch what the locks
	// prevent.
	unlocked bool
}

// runDemo is `latchctl demo`: the seeds' marketplace. Traders buy and list
// items concurrently; every purchase takes the item's lock and both
// accounts' locks (in sorted order), a permit of the checkout semaphore,
// and a read lease on the price list, which a repricer rewrites under the
// write lease. Money and items move by separate plain commands (GET then
// SET, no MULTI), so only the locks keep the books straight; at the end the
// books are checked and any violation is an error.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c demoConfig
	fs := newFlagSet("demo", "[flags]", stderr)
	fs.StringVar(&c.addr, "addr", "", "Redis address host:port (default: an embedded miniredis)")
	fs.StringVar(&c.driver, "driver", "goredis", "driver: goredis, rueidis, valkey or redigo")
	fs.IntVar(&c.traders, "traders", 32, "concurrent traders")
	fs.IntVar(&c.clients, "clients", 8, "Redis clients the traders are spread over, as separate processes would be")
	fs.IntVar(&c.items, "items", 200, "items on the market")
	fs.IntVar(&c.checkout, "checkout", 4, "concurrent checkouts allowed (a Semaphore)")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "how long to trade")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve the latchkit.* metrics (middleware.Tracing, OpenTelemetry Prometheus exporter) at http://ADDR/metrics, e.g. localhost:9464")
	fs.StringVar(&c.otlp, "otlp", "", "send traces over OTLP/HTTP to this URL, e.g. http://localhost:4318")
	fs.DurationVar(&c.linger, "linger", 0, "with -metrics-addr: keep serving metrics this long after trading ends (for a last scrape)")
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
	case c.traders < 2 || c.clients < 1 || c.items < 1 || c.checkout < 1 || c.duration <= 0 || c.linger < 0:
		return fmt.Errorf("%w: -traders must be at least 2, -clients, -items and -checkout at least 1, -duration positive, -linger not negative", errUsage)
	}
	tel, err := startTelemetry(ctx, c, stderr)
	if err != nil {
		return err
	}
	c.tracing = tel
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if terr := tel.close(sctx); terr != nil {
			fmt.Fprintln(stderr, "latchctl demo: telemetry:", terr)
		}
	}()
	rep, err := demo(ctx, c)
	if err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.print(stdout)
	}
	if tel != nil && c.metricsAddr != "" && c.linger > 0 {
		_ = sleepCtx(ctx, c.linger) // Ctrl-C ends it
	}
	if len(rep.Violations) > 0 {
		return fmt.Errorf("%d invariant violations", len(rep.Violations))
	}
	return nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// report is what the demo found.
type report struct {
	Server        string   `json:"server"`
	Driver        string   `json:"driver"`
	Traders       int      `json:"traders"`
	Clients       int      `json:"clients"`
	Items         int      `json:"items"`
	Seconds       float64  `json:"seconds"`
	Purchases     int64    `json:"purchases"`
	SoldMeanwhile int64    `json:"failed_sold_meanwhile"`
	ShortOfFunds  int64    `json:"failed_short_of_funds"`
	Listings      int64    `json:"listings"`
	Repricings    int64    `json:"repricings"`
	Acquisitions  int      `json:"lock_acquisitions"`
	WaitP50ms     float64  `json:"lock_wait_p50_ms"`
	WaitP90ms     float64  `json:"lock_wait_p90_ms"`
	WaitP99ms     float64  `json:"lock_wait_p99_ms"`
	WaitMaxms     float64  `json:"lock_wait_max_ms"`
	CheckoutPeak  int32    `json:"checkout_peak"`
	CheckoutLimit int      `json:"checkout_limit"`
	Money         int64    `json:"money"`
	FencedNames   int      `json:"fenced_names"`
	Violations    []string `json:"violations"`
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "latchkit demo: marketplace on %s (driver %s)\n", r.Server, r.Driver)
	fmt.Fprintf(w, "  %d traders over %d clients, %d items, %.1fs\n", r.Traders, r.Clients, r.Items, r.Seconds)
	fmt.Fprintf(w, "  purchases   %7d  (failed: %d sold meanwhile, %d short of funds)\n", r.Purchases, r.SoldMeanwhile, r.ShortOfFunds)
	fmt.Fprintf(w, "  listings    %7d\n", r.Listings)
	fmt.Fprintf(w, "  repricings  %7d  (write lease on the prices; purchases hold read leases)\n", r.Repricings)
	fmt.Fprintf(w, "  checkout    peak %d of %d concurrent (a Semaphore)\n", r.CheckoutPeak, r.CheckoutLimit)
	fmt.Fprintf(w, "  lock waits  %d acquisitions: p50 %.2fms  p90 %.2fms  p99 %.2fms  max %.2fms\n",
		r.Acquisitions, r.WaitP50ms, r.WaitP90ms, r.WaitP99ms, r.WaitMaxms)
	if len(r.Violations) == 0 {
		fmt.Fprintf(w, "  invariants  OK: money conserved (%d), every item in exactly one place, fences increasing on %d names\n", r.Money, r.FencedNames)
		return
	}
	fmt.Fprintf(w, "  invariants  VIOLATED (%d):\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == 10 {
			fmt.Fprintf(w, "    ... and %d more\n", len(r.Violations)-10)
			break
		}
		fmt.Fprintf(w, "    - %s\n", v)
	}
}

// client is one client of the market, as one process would be: its own
// connections, and the latchkit Client its traders' primitives share.
type client struct {
	cl *primitives.Client
	do func(context.Context, ...string) (any, error)
}

type market struct {
	cfg     demoConfig
	p       string // key prefix of this run
	clients []client
	users   int

	purchases, sold, short, listings, repricings atomic.Int64
	inCheckout, checkoutPeak                     atomic.Int32

	mu     sync.Mutex
	waits  []time.Duration
	fences map[string][]int64 // per lock name, in grant order
	faults []string           // violations seen while trading
}

const startFunds = 1000

func demo(ctx context.Context, cfg demoConfig) (rep *report, err error) {
	if err := cfg.target.open(); err != nil {
		return nil, err
	}
	defer cfg.target.close()
	var id [4]byte
	_, _ = rand.Read(id[:])
	m := &market{cfg: cfg, p: "demo:" + hex.EncodeToString(id[:]) + ":", users: cfg.traders, fences: map[string][]int64{}}
	var (
		cls     []*primitives.Client
		closers []func()
	)
	defer func() {
		// The latchkit Clients first: they release what they still hold
		// and end their goroutines while their connections are open.
		if cerr := closeClients(ctx, cls...); cerr != nil && err == nil {
			rep, err = nil, cerr
		}
		if len(m.clients) > 0 {
			m.cleanup()
		}
		for _, closeFn := range closers {
			closeFn()
		}
	}()
	for i := 0; i < cfg.clients; i++ {
		b, do, closeFn, err := cfg.target.client(ctx)
		if err != nil {
			return nil, err
		}
		closers = append(closers, closeFn)
		cl, err := primitives.NewClient(b, primitives.WithClientName(fmt.Sprintf("demo-client-%d", i)))
		if err != nil {
			return nil, err
		}
		cls = append(cls, cl)
		m.clients = append(m.clients, client{cl, do})
	}
	if err := m.setup(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.traders+1)
	for i := 0; i < cfg.traders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.trade(runCtx, i); err != nil {
				errs <- fmt.Errorf("trader %d: %w", i, err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := m.reprice(runCtx); err != nil {
			errs <- fmt.Errorf("repricer: %w", err)
		}
	}()
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // interrupted: no report
	}
	return m.report(ctx, time.Since(start))
}

func collect(c chan error) []error {
	var out []error
	for err := range c {
		out = append(out, err)
	}
	return out
}

func (m *market) key(parts ...string) string { return m.p + strings.Join(parts, ":") }

func (m *market) opts() []primitives.Option {
	opts := []primitives.Option{primitives.WithPrefix(m.p + "lock:"), primitives.WithTTL(5 * time.Second)}
	if m.cfg.tracing != nil {
		opts = append(opts, primitives.WithMiddleware(m.cfg.tracing.mw))
	}
	return opts
}

// setup gives every user funds and deals the items out, half of them
// listed on the market by their owner.
func (m *market) setup(ctx context.Context) error {
	c := m.clients[0]
	rng := mrand.New(mrand.NewPCG(m.cfg.seed, 0))
	for u := 0; u < m.users; u++ {
		if _, err := c.do(ctx, "SET", m.key("funds", strconv.Itoa(u)), strconv.Itoa(startFunds)); err != nil {
			return err
		}
	}
	for it := 0; it < m.cfg.items; it++ {
		owner := strconv.Itoa(it % m.users)
		item := strconv.Itoa(it)
		var err error
		if it%2 == 0 {
			_, err = c.do(ctx, "ZADD", m.key("market"), strconv.Itoa(10+rng.IntN(90)), item+"."+owner)
		} else {
			_, err = c.do(ctx, "SADD", m.key("inv", owner), item)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// cleanup deletes this run's keys (SCAN, never KEYS).
func (m *market) cleanup() {
	if m.cfg.mini != nil {
		return // the embedded server goes away with its data
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := m.clients[0]
	cursor := "0"
	for {
		v, err := c.do(ctx, "SCAN", cursor, "MATCH", m.p+"*", "COUNT", "500")
		if err != nil {
			return
		}
		a, _ := v.([]any)
		if len(a) != 2 {
			return
		}
		cursor = fmt.Sprint(a[0])
		keys, _ := a[1].([]any)
		for _, k := range keys {
			_, _ = c.do(ctx, "DEL", fmt.Sprint(k))
		}
		if cursor == "0" {
			return
		}
	}
}

// lock takes a lease, timing the wait.
func (m *market) lock(ctx context.Context, acquire func(context.Context) (latchkit.Lease, error)) (latchkit.Lease, error) {
	start := time.Now()
	l, err := acquire(ctx)
	if err == nil {
		m.mu.Lock()
		m.waits = append(m.waits, time.Since(start))
		m.mu.Unlock()
	}
	return l, err
}

// fenced records a grant's fence, in grant order: it is called while the
// lease is held.
func (m *market) fenced(name string, l latchkit.Lease) {
	m.mu.Lock()
	m.fences[name] = append(m.fences[name], l.Fence())
	m.mu.Unlock()
}

func (m *market) fault(format string, a ...any) {
	m.mu.Lock()
	m.faults = append(m.faults, fmt.Sprintf(format, a...))
	m.mu.Unlock()
}

// trade buys (mostly) and lists until ctx ends.
func (m *market) trade(ctx context.Context, me int) error {
	c := m.clients[me%len(m.clients)]
	rng := mrand.New(mrand.NewPCG(m.cfg.seed, uint64(me)+1))
	prices, err := primitives.NewRWLock(c.cl, "prices", m.opts()...)
	if err != nil {
		return err
	}
	checkout, err := primitives.NewSemaphore(c.cl, "checkout", m.cfg.checkout, m.opts()...)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		var err error
		if rng.IntN(10) < 7 {
			err = m.buy(ctx, c, rng, me, prices, checkout)
		} else {
			err = m.list(ctx, c, rng, me)
		}
		if err != nil && !over(ctx) {
			return err
		}
	}
	return nil
}

// over reports whether the run's time is up: its context ended, or its
// deadline has passed and the context's timer has yet to run (a call that
// gave up at the deadline can return first, on a busy machine).
func over(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// release gives leases back, the last taken first.
func release(leases []latchkit.Lease) error {
	var errs []error
	for i := len(leases) - 1; i >= 0; i-- {
		errs = append(errs, leases[i].Release(context.Background()))
	}
	return errors.Join(errs...)
}

func (m *market) buy(ctx context.Context, c client, rng *mrand.Rand, me int, prices primitives.RWLock, checkout primitives.Semaphore) (err error) {
	var leases []latchkit.Lease
	defer func() {
		if rerr := release(leases); err == nil && !over(ctx) {
			err = rerr
		}
	}()
	read, err := m.lock(ctx, prices.RLock)
	if err != nil {
		return err
	}
	leases = append(leases, read)
	// Pick a listing: half the time one of the five cheapest (hot items).
	n, err := c.do(ctx, "ZCARD", m.key("market"))
	if err != nil || n.(int64) == 0 {
		return err
	}
	idx := rng.Int64N(n.(int64))
	if rng.IntN(2) == 0 {
		idx = rng.Int64N(min(n.(int64), 5))
	}
	v, err := c.do(ctx, "ZRANGE", m.key("market"), strconv.FormatInt(idx, 10), strconv.FormatInt(idx, 10), "WITHSCORES")
	if err != nil {
		return err
	}
	pair := toStrings(v)
	if len(pair) != 2 {
		return nil // it just went
	}
	listing, price := pair[0], atoi(pair[1])
	item, seller, _ := strings.Cut(listing, ".")
	if seller == strconv.Itoa(me) {
		return nil
	}
	buyer := strconv.Itoa(me)

	accounts := []string{"user:" + buyer, "user:" + seller}
	slices.Sort(accounts) // a canonical order: no deadlock between two purchases
	names := append([]string{"item:" + item}, accounts...)
	if m.cfg.unlocked {
		names = nil
	}
	for _, name := range names {
		mu, err := primitives.NewMutex(c.cl, name, m.opts()...)
		if err != nil {
			return err
		}
		l, err := m.lock(ctx, mu.Lock)
		if err != nil {
			return err
		}
		leases = append(leases, l)
		m.fenced(name, l)
	}
	permit, err := m.lock(ctx, checkout.Acquire)
	if err != nil {
		return err
	}
	leases = append(leases, permit)
	if k := m.inCheckout.Add(1); k > int32(m.cfg.checkout) {
		m.fault("%d concurrent checkouts, limit %d", k, m.cfg.checkout)
	} else {
		for p := m.checkoutPeak.Load(); k > p && !m.checkoutPeak.CompareAndSwap(p, k); p = m.checkoutPeak.Load() {
		}
	}
	defer m.inCheckout.Add(-1)

	// Under the locks: is it still listed at that price, can we pay? From
	// here on a purchase runs to its end even when the run's time is up:
	// stopping half-way would leave the books half-written.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	score, err := c.do(ctx, "ZSCORE", m.key("market"), listing)
	if err != nil {
		return err
	}
	if score == nil {
		m.sold.Add(1)
		return nil
	}
	if atoi(fmt.Sprint(score)) != price {
		m.fault("listing %s repriced from %d to %v during a purchase holding the price read lease", listing, price, score)
		return nil
	}
	funds, err := c.do(ctx, "GET", m.key("funds", buyer))
	if err != nil {
		return err
	}
	have := atoi(fmt.Sprint(funds))
	if have < price {
		m.short.Add(1)
		return nil
	}
	// Move money and the item by separate commands: read, then write.
	steps := [][]string{
		{"ZREM", m.key("market"), listing},
		{"SET", m.key("funds", buyer), strconv.FormatInt(have-price, 10)},
	}
	for _, s := range steps {
		if _, err := c.do(ctx, s...); err != nil {
			return err
		}
	}
	sf, err := c.do(ctx, "GET", m.key("funds", seller))
	if err != nil {
		return err
	}
	if _, err := c.do(ctx, "SET", m.key("funds", seller), strconv.FormatInt(atoi(fmt.Sprint(sf))+price, 10)); err != nil {
		return err
	}
	if _, err := c.do(ctx, "SADD", m.key("inv", buyer), item); err != nil {
		return err
	}
	m.purchases.Add(1)
	return nil
}

// list puts one of my items on the market.
func (m *market) list(ctx context.Context, c client, rng *mrand.Rand, me int) (err error) {
	owner := strconv.Itoa(me)
	v, err := c.do(ctx, "SRANDMEMBER", m.key("inv", owner))
	if err != nil || v == nil {
		return err
	}
	item := fmt.Sprint(v)
	mu, err := primitives.NewMutex(c.cl, "item:"+item, m.opts()...)
	if err != nil {
		return err
	}
	l, err := m.lock(ctx, mu.Lock)
	if err != nil {
		return err
	}
	defer func() {
		if rerr := l.Release(context.Background()); err == nil && !over(ctx) {
			err = rerr
		}
	}()
	m.fenced("item:"+item, l)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	still, err := c.do(ctx, "SISMEMBER", m.key("inv", owner), item)
	if err != nil || still != int64(1) {
		return err
	}
	if _, err := c.do(ctx, "SREM", m.key("inv", owner), item); err != nil {
		return err
	}
	if _, err := c.do(ctx, "ZADD", m.key("market"), strconv.Itoa(10+rng.IntN(90)), item+"."+owner); err != nil {
		return err
	}
	m.listings.Add(1)
	return nil
}

// reprice rewrites every price under the write lease, now and then.
func (m *market) reprice(ctx context.Context) error {
	c := m.clients[0]
	rw, err := primitives.NewRWLock(c.cl, "prices", m.opts()...)
	if err != nil {
		return err
	}
	rng := mrand.New(mrand.NewPCG(m.cfg.seed, 1<<32))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
		w, err := m.lock(ctx, rw.Lock)
		if err != nil {
			if over(ctx) {
				return nil
			}
			return err
		}
		v, err := c.do(ctx, "ZRANGE", m.key("market"), "0", "-1", "WITHSCORES")
		if err == nil {
			kv := toStrings(v)
			for i := 0; i+1 < len(kv) && err == nil; i += 2 {
				p := max(1, atoi(kv[i+1])+int64(rng.IntN(11))-5)
				_, err = c.do(ctx, "ZADD", m.key("market"), "XX", strconv.FormatInt(p, 10), kv[i])
			}
		}
		if rerr := w.Release(context.Background()); err == nil {
			err = rerr
		}
		if err != nil {
			if over(ctx) {
				return nil
			}
			return err
		}
		m.repricings.Add(1)
	}
}

// report checks the books and summarizes the run.
func (m *market) report(ctx context.Context, took time.Duration) (*report, error) {
	c := m.clients[0]
	r := &report{Server: m.cfg.target.describe(), Driver: m.cfg.driver, Traders: m.cfg.traders, Clients: m.cfg.clients,
		Items: m.cfg.items, Seconds: took.Seconds(), Purchases: m.purchases.Load(), SoldMeanwhile: m.sold.Load(),
		ShortOfFunds: m.short.Load(), Listings: m.listings.Load(), Repricings: m.repricings.Load(),
		CheckoutPeak: m.checkoutPeak.Load(), CheckoutLimit: m.cfg.checkout, Violations: m.faults}
	if r.Violations == nil {
		r.Violations = []string{}
	}
	fail := func(format string, a ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, a...)) }

	// Money is conserved.
	for u := 0; u < m.users; u++ {
		v, err := c.do(ctx, "GET", m.key("funds", strconv.Itoa(u)))
		if err != nil {
			return nil, err
		}
		f := atoi(fmt.Sprint(v))
		if f < 0 {
			fail("user %d has %d, below zero", u, f)
		}
		r.Money += f
	}
	if want := int64(startFunds * m.users); r.Money != want {
		fail("money not conserved: %d in the accounts, %d at the start", r.Money, want)
	}
	// Every item is in exactly one place: one inventory or one listing.
	seen := map[string]string{}
	place := func(item, where string) {
		if prev, dup := seen[item]; dup {
			fail("item %s is in two places: %s and %s (sold twice)", item, prev, where)
		}
		seen[item] = where
	}
	for u := 0; u < m.users; u++ {
		v, err := c.do(ctx, "SMEMBERS", m.key("inv", strconv.Itoa(u)))
		if err != nil {
			return nil, err
		}
		for _, it := range toStrings(v) {
			place(it, "inventory of user "+strconv.Itoa(u))
		}
	}
	v, err := c.do(ctx, "ZRANGE", m.key("market"), "0", "-1")
	if err != nil {
		return nil, err
	}
	for _, l := range toStrings(v) {
		it, owner, _ := strings.Cut(l, ".")
		place(it, "listed by user "+owner)
	}
	if r.Purchases == 0 {
		fail("no purchase completed: the run exercised nothing")
	}
	if len(seen) != m.cfg.items {
		fail("%d items accounted for, %d at the start", len(seen), m.cfg.items)
	}
	// Fences of each lock strictly increase in grant order.
	for name, fs := range m.fences {
		for i := 1; i < len(fs); i++ {
			if fs[i] <= fs[i-1] {
				fail("fence of %s went from %d to %d", name, fs[i-1], fs[i])
				break
			}
		}
	}
	r.FencedNames = len(m.fences)
	r.Acquisitions = len(m.waits)
	if len(m.waits) > 0 {
		sort.Slice(m.waits, func(i, j int) bool { return m.waits[i] < m.waits[j] })
		q := func(p float64) float64 {
			return float64(m.waits[min(len(m.waits)-1, int(p*float64(len(m.waits))))].Microseconds()) / 1000
		}
		r.WaitP50ms, r.WaitP90ms, r.WaitP99ms = q(0.50), q(0.90), q(0.99)
		r.WaitMaxms = float64(m.waits[len(m.waits)-1].Microseconds()) / 1000
	}
	return r, nil
}

// toStrings flattens a reply into strings: RESP3 nests WITHSCORES replies
// as [member, score] pairs where RESP2 gives a flat list.
func toStrings(v any) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case nil:
		default:
			out = append(out, fmt.Sprint(x))
		}
	}
	walk(v)
	return out
}

func atoi(s string) int64 {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return int64(f)
	}
	return 0
}

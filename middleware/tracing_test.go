package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/middleware"
	"github.com/latchkit/latchkit/primitives"
)

// The attribute keys and outcomes Tracing sets, as the package doc lists
// them (package middleware exports none of them: they are the contract a
// dashboard relies on, so the tests spell them out).
const (
	attrKind     = attribute.Key("latchkit.kind")
	attrName     = attribute.Key("latchkit.name")
	attrOutcome  = attribute.Key("latchkit.outcome")
	attrAttempts = attribute.Key("latchkit.attempts")
	attrFence    = attribute.Key("latchkit.fence")
	attrLinkType = attribute.Key("latchkit.link")

	outcomeAcquired    = "acquired"
	outcomeNotAcquired = "not_acquired"
	outcomeCtxDone     = "ctx_done"
	outcomeError       = "error"
)

// telemetry is an SDK tracer provider recording every span and a meter
// provider read on demand.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t testing.TB) *telemetry {
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	return tel
}

func (tel *telemetry) tracing(opts ...middleware.TracingOption) interface {
	primitives.Option
	primitives.RedlockOption
	primitives.LatchOption
} {
	return primitives.WithMiddleware(middleware.Tracing(append([]middleware.TracingOption{
		middleware.WithTracerProvider(tel.tp), middleware.WithMeterProvider(tel.mp)}, opts...)...))
}

// ended returns the ended spans named name whose kind attribute is kind.
func (tel *telemetry) ended(name string, kind latchkit.Kind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name && attr(s.Attributes(), attrKind).AsString() == string(kind) {
			out = append(out, s)
		}
	}
	return out
}

// awaitLeaseLost waits for a lease's Context (lctx) to end, then for the
// LeaseLost span its loss records, and returns it: exactly one must end.
func (tel *telemetry) awaitLeaseLost(t *testing.T, lctx context.Context) sdktrace.ReadOnlySpan {
	t.Helper()
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not end")
	}
	var lost []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(time.Second); len(lost) == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		lost = tel.ended("latchkit.LeaseLost", latchkit.KindMutex)
	}
	if len(lost) != 1 {
		t.Fatalf("%d LeaseLost spans, want 1", len(lost))
	}
	return lost[0]
}

func attr(kvs []attribute.KeyValue, k attribute.Key) attribute.Value {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// metrics collects the points of every instrument.
func (tel *telemetry) metrics(t testing.TB) map[string]metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != middleware.ScopeName {
			t.Errorf("instrumentation scope %q, want %q", sm.Scope.Name, middleware.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sum adds the points of a counter whose attributes include all of want.
func sum(t testing.TB, a metricdata.Aggregation, want ...attribute.KeyValue) int64 {
	t.Helper()
	var n int64
	switch d := a.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if hasAll(p.Attributes, want) {
				n += p.Value
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if hasAll(p.Attributes, want) {
				n += int64(p.Count)
			}
		}
	case nil:
	default:
		t.Fatalf("unexpected aggregation %T", a)
	}
	return n
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// lockers are the acquisitions of every primitive kind, built over the
// Clients cs (a Redlock uses all of them, the others the first) with opts.
type locker struct {
	kind latchkit.Kind
	new  func(t testing.TB, cs []*primitives.Client, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error))
	// holder, when set, is what holds the primitive while this kind waits
	// (a writer, for readers).
	holder *locker
}

func mutexLike(kind latchkit.Kind, ctor func([]*primitives.Client, ...primitives.Option) (primitives.Mutex, error)) locker {
	return locker{kind: kind, new: func(t testing.TB, cs []*primitives.Client, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error)) {
		m, err := ctor(cs, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m.Lock, m.TryLock
	}}
}

func semLike(kind latchkit.Kind, ctor func(*primitives.Client, string, int, ...primitives.Option) (primitives.Semaphore, error)) locker {
	return locker{kind: kind, new: func(t testing.TB, cs []*primitives.Client, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error)) {
		s, err := ctor(cs[0], "res", 1, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s.Acquire, s.TryAcquire
	}}
}

func rw(kind latchkit.Kind) locker {
	return locker{kind: kind, new: func(t testing.TB, cs []*primitives.Client, opts ...primitives.Option) (lock, try func(context.Context) (latchkit.Lease, error)) {
		l, err := primitives.NewRWLock(cs[0], "res", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if kind == latchkit.KindReadLock {
			return l.RLock, l.TryRLock
		}
		return l.Lock, l.TryLock
	}}
}

var lockers = []locker{
	mutexLike(latchkit.KindMutex, func(cs []*primitives.Client, o ...primitives.Option) (primitives.Mutex, error) {
		return primitives.NewMutex(cs[0], "res", o...)
	}),
	mutexLike(latchkit.KindReentrantMutex, func(cs []*primitives.Client, o ...primitives.Option) (primitives.Mutex, error) {
		return primitives.NewReentrantMutex(cs[0], "res", o...)
	}),
	mutexLike(latchkit.KindFairMutex, func(cs []*primitives.Client, o ...primitives.Option) (primitives.Mutex, error) {
		return primitives.NewFairMutex(cs[0], "res", o...)
	}),
	mutexLike(latchkit.KindMultiLock, func(cs []*primitives.Client, o ...primitives.Option) (primitives.Mutex, error) {
		return primitives.NewMultiLock(cs[0], []string{"res", "other"}, o...)
	}),
	mutexLike(latchkit.KindRedlock, func(cs []*primitives.Client, o ...primitives.Option) (primitives.Mutex, error) {
		return primitives.NewRedlock(cs, "res", clienttest.Fitting[primitives.RedlockOption](o)...)
	}),
	rw(latchkit.KindWriteLock),
	{kind: latchkit.KindReadLock, new: rw(latchkit.KindReadLock).new, holder: &[]locker{rw(latchkit.KindWriteLock)}[0]},
	semLike(latchkit.KindSemaphore, primitives.NewSemaphore),
	semLike(latchkit.KindFairSemaphore, primitives.NewFairSemaphore),
}

// miniBackends starts n miniredis servers with a go-redis backend each;
// calls counts the commands the clients send.
func miniBackends(t testing.TB, n int, calls *atomic.Int64) ([]*miniredis.Miniredis, []backend.Backend) {
	var ms []*miniredis.Miniredis
	var bs []backend.Backend
	for i := 0; i < n; i++ {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		if calls != nil {
			c.AddHook(countHook{calls})
		}
		t.Cleanup(func() { c.Close() })
		ms, bs = append(ms, m), append(bs, goredis.New(c))
	}
	return ms, bs
}

type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// TestTracingContendedLock, for every primitive kind: a holder takes the
// lock, a waiter's Lock waits until the holder releases 60ms later. The
// waiter's span has the kind, name, attempts (one event each), outcome and
// fence, and a link to the holder's span (read back from Redis); both
// leases' Release spans exist; the metrics count two acquisitions, two
// waits and two holds, and no waiter is left. No token appears anywhere.
func TestTracingContendedLock(t *testing.T) {
	for _, lk := range lockers {
		t.Run(string(lk.kind), func(t *testing.T) {
			tel := newTelemetry(t)
			_, bs := miniBackends(t, 3, nil)
			cs := clienttest.All(t, bs)
			opts := []primitives.Option{tel.tracing(), primitives.WithTTL(5 * time.Second)}
			hk := lk
			if lk.holder != nil {
				hk = *lk.holder
			}
			holdLock, _ := hk.new(t, cs, opts...)
			waitLock, _ := lk.new(t, cs, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			hctx := primitives.WithOwner(ctx, "holder")
			held, err := holdLock(hctx)
			if err != nil {
				t.Fatal(err)
			}
			holderSpans := tel.ended("latchkit."+method(hk.kind), hk.kind)
			if len(holderSpans) != 1 {
				t.Fatalf("%d acquisition spans after the holder's Lock, want 1", len(holderSpans))
			}
			hs := holderSpans[0]

			got := make(chan latchkit.Lease, 1)
			go func() {
				l, err := waitLock(primitives.WithOwner(ctx, "waiter"))
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			time.Sleep(60 * time.Millisecond)
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l := <-got
			if l == nil {
				return
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// kinds are the kinds involved: the waiter's, and the holder's
			// when it differs; the telemetry below is summed over them.
			kinds := []latchkit.Kind{lk.kind}
			if hk.kind != lk.kind {
				kinds = append(kinds, hk.kind)
			}
			ended := func(name func(latchkit.Kind) string) []sdktrace.ReadOnlySpan {
				var out []sdktrace.ReadOnlySpan
				for _, k := range kinds {
					out = append(out, tel.ended(name(k), k)...)
				}
				return out
			}
			spans := tel.ended("latchkit."+method(lk.kind), lk.kind)
			if n := len(ended(func(k latchkit.Kind) string { return "latchkit." + method(k) })); n != 2 {
				t.Fatalf("%d acquisition spans, want 2", n)
			}
			ws := spans[len(spans)-1] // the waiter's
			a := ws.Attributes()
			if attr(a, attrName).AsString() != "res" && lk.kind != latchkit.KindMultiLock {
				t.Errorf("name attribute %q", attr(a, attrName).AsString())
			}
			if out := attr(a, attrOutcome).AsString(); out != outcomeAcquired {
				t.Errorf("outcome %q", out)
			}
			attempts := attr(a, attrAttempts).AsInt64()
			if attempts < 2 {
				t.Errorf("attempts %d, want at least 2 (one refused while held)", attempts)
			}
			var events int64
			for _, e := range ws.Events() {
				if e.Name == "latchkit.attempt" {
					events++
				}
			}
			if events != attempts {
				t.Errorf("%d attempt events for %d attempts", events, attempts)
			}
			if f := attr(a, attrFence).AsInt64(); f != l.Fence() || f <= held.Fence() {
				t.Errorf("fence attribute %d, lease %d, holder's %d", f, l.Fence(), held.Fence())
			}
			var linked bool
			for _, link := range ws.Links() {
				if link.SpanContext.SpanID() == hs.SpanContext().SpanID() && link.SpanContext.TraceID() == hs.SpanContext().TraceID() &&
					attr(link.Attributes, attrLinkType).AsString() == "holder" {
					linked = true
				}
			}
			if !linked {
				t.Errorf("the waiter's span has no link to the holder's span %s: links %v", hs.SpanContext().SpanID(), ws.Links())
			}
			if n := len(ended(func(latchkit.Kind) string { return "latchkit.Release" })); n != 2 {
				t.Errorf("%d Release spans, want 2", n)
			}

			m := tel.metrics(t)
			acquired := attrOutcome.String(outcomeAcquired)
			total := func(name string, kv ...attribute.KeyValue) int64 {
				var n int64
				for _, k := range kinds {
					n += sum(t, m[name], append(kv, attrKind.String(string(k)))...)
				}
				return n
			}
			if n := total("latchkit.acquisitions", acquired); n != 2 {
				t.Errorf("latchkit.acquisitions{acquired} = %d, want 2", n)
			}
			if n := total("latchkit.acquire.duration", acquired); n != 2 {
				t.Errorf("latchkit.acquire.duration count %d, want 2", n)
			}
			if n := total("latchkit.hold.duration"); n != 2 {
				t.Errorf("latchkit.hold.duration count %d, want 2", n)
			}
			if n := total("latchkit.waiters"); n != 0 {
				t.Errorf("latchkit.waiters = %d after every wait ended", n)
			}
			noToken(t, tel, held.Token(), l.Token())
		})
	}
}

func method(k latchkit.Kind) string {
	switch k {
	case latchkit.KindReadLock:
		return "RLock"
	case latchkit.KindSemaphore, latchkit.KindFairSemaphore:
		return "Acquire"
	}
	return "Lock"
}

// noToken fails when any span attribute, event attribute, link attribute
// or status shows one of the tokens.
func noToken(t *testing.T, tel *telemetry, tokens ...string) {
	t.Helper()
	check := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			for _, tok := range tokens {
				if strings.Contains(kv.Value.Emit(), tok) {
					t.Errorf("%s attribute %s shows a token", where, kv.Key)
				}
			}
		}
	}
	for _, s := range tel.spans.Ended() {
		check(s.Name(), s.Attributes())
		for _, e := range s.Events() {
			check(s.Name()+" event "+e.Name, e.Attributes)
		}
		for _, l := range s.Links() {
			check(s.Name()+" link", l.Attributes)
		}
		for _, tok := range tokens {
			if strings.Contains(s.Status().Description, tok) {
				t.Errorf("%s status shows a token", s.Name())
			}
		}
	}
}

// TestTracingOutcomes: a TryLock that finds the lock held ends its span
// with not_acquired (not an error) and a link to the holder; a Lock whose
// ctx ends is ctx_done, not an error either (issue 30, item 6); a lost
// lease (its key deleted) gets a LeaseLost span in the acquisition's trace and counts in
// latchkit.lease.lost; WithMetricName maps the name on metric points.
func TestTracingOutcomes(t *testing.T) {
	tel := newTelemetry(t)
	ms, bs := miniBackends(t, 1, nil)
	opts := []primitives.Option{primitives.WithTTL(300 * time.Millisecond),
		tel.tracing(middleware.WithMetricName(func(_ latchkit.Kind, name string) string {
			return strings.TrimRightFunc(name, func(r rune) bool { return r >= '0' && r <= '9' }) + "*"
		}))}
	m, _ := primitives.NewMutex(clienttest.For(t, bs[0]), "order42", opts...)
	ctx := context.Background()
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holderSpan := tel.ended("latchkit.Lock", latchkit.KindMutex)[0].SpanContext()

	if _, err := m.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("TryLock while held: %v", err)
	}
	ts := tel.ended("latchkit.TryLock", latchkit.KindMutex)[0]
	if out := attr(ts.Attributes(), attrOutcome).AsString(); out != outcomeNotAcquired {
		t.Errorf("TryLock outcome %q", out)
	}
	if ts.Status().Code == codes.Error {
		t.Errorf("a TryLock that found the lock held is marked an error")
	}
	if len(ts.Links()) != 1 || ts.Links()[0].SpanContext.SpanID() != holderSpan.SpanID() {
		t.Errorf("TryLock links %v, want the holder's span", ts.Links())
	}

	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = m.Lock(dctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v", err)
	}
	ls := tel.ended("latchkit.Lock", latchkit.KindMutex)
	if last := ls[len(ls)-1]; attr(last.Attributes(), attrOutcome).AsString() != outcomeCtxDone || last.Status().Code == codes.Error {
		t.Errorf("Lock past its deadline: outcome %q status %v", attr(last.Attributes(), attrOutcome).AsString(), last.Status())
	}

	ms[0].Del(keyspace.KeyBase(keyspace.DefaultPrefix, "order42")) // the lock is gone
	lost := tel.awaitLeaseLost(t, held.Context())
	if lost.SpanContext().TraceID() != holderSpan.TraceID() || lost.Parent().SpanID() != holderSpan.SpanID() {
		t.Errorf("the LeaseLost span is not in the acquisition's trace under its span")
	}
	if len(lost.Events()) != 1 || lost.Events()[0].Name != "latchkit.lease_lost" {
		t.Errorf("LeaseLost events %v", lost.Events())
	}
	if err := held.Release(ctx); !errors.Is(err, latchkit.ErrLeaseLost) {
		t.Errorf("release of the lost lease: %v", err)
	}
	mt := tel.metrics(t)
	if n := sum(t, mt["latchkit.lease.lost"], attrName.String("order*")); n != 1 {
		t.Errorf("latchkit.lease.lost{name=order*} = %d, want 1 (counted once)", n)
	}
	if n := sum(t, mt["latchkit.acquisitions"], attrName.String("order42")); n != 0 {
		t.Errorf("a metric point carries the unmapped name")
	}
	for _, out := range []string{outcomeAcquired, outcomeNotAcquired, outcomeCtxDone} {
		if n := sum(t, mt["latchkit.acquisitions"], attrOutcome.String(out)); n != 1 {
			t.Errorf("latchkit.acquisitions{%s} = %d, want 1", out, n)
		}
	}
	noToken(t, tel, held.Token())
}

// TestTracingAddsNoRoundTrip: an uncontended TryLock+Release sends the same
// number of commands (counted by a client hook) with Tracing, recording
// and storing the holder's span context, as without it.
func TestTracingAddsNoRoundTrip(t *testing.T) {
	count := func(opts ...primitives.Option) int64 {
		var calls atomic.Int64
		_, bs := miniBackends(t, 1, &calls)
		m, _ := primitives.NewMutex(clienttest.For(t, bs[0]), "n", opts...)
		ctx := context.Background()
		if l, err := m.TryLock(ctx); err != nil { // loads the scripts
			t.Fatal(err)
		} else {
			l.Release(ctx)
		}
		before := calls.Load()
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return calls.Load() - before
	}
	plain := count()
	traced := count(newTelemetry(t).tracing())
	if plain != 2 || traced != plain {
		t.Errorf("commands for TryLock+Release: %d without Tracing, %d with it; want 2 and 2", plain, traced)
	}
}

// BenchmarkTracing measures uncontended TryLock+Release on a redis-server
// started by the benchmark: without Tracing, with it over a no-op provider,
// and with it over the SDK (spans to an in-memory recorder, metrics to a
// manual reader).
func BenchmarkTracing(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	cl := clienttest.For(b, goredis.New(c))
	sdk := newTelemetry(b)
	for _, v := range []struct {
		name string
		opts []primitives.Option
	}{
		{"none", nil},
		{"noop", []primitives.Option{primitives.WithMiddleware(middleware.Tracing(
			middleware.WithTracerProvider(noop.NewTracerProvider()), middleware.WithMeterProvider(metricnoop.NewMeterProvider())))}},
		{"sdk", []primitives.Option{sdk.tracing()}},
	} {
		b.Run(v.name, func(b *testing.B) {
			m, _ := primitives.NewMutex(cl, fmt.Sprintf("bench-%s", v.name), append(v.opts, primitives.WithAutoExtend(false))...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := m.TryLock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTracingNoLossAfterUnknownRelease: a Release that fails (Redis cannot
// be reached) leaves the outcome unknown, but it was sent while the lease
// was live: the caller let go in time, so the lease running out afterwards
// is no loss (no LeaseLost span, latchkit.lease.lost stays 0), and its hold
// time is recorded once. (Until a release stopped being remembered by the
// server, the end was recorded as a loss: issue 39.)
func TestTracingNoLossAfterUnknownRelease(t *testing.T) {
	tel := newTelemetry(t)
	ms, bs := miniBackends(t, 1, nil)
	m, _ := primitives.NewMutex(clienttest.For(t, bs[0]), "r", primitives.WithTTL(300*time.Millisecond), tel.tracing())
	ctx := context.Background()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx := l.Context()
	ms[0].Close()
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = l.Release(rctx)
	cancel()
	if err == nil || errors.Is(err, latchkit.ErrLeaseLost) {
		t.Fatalf("Release with Redis gone: %v, want an unknown outcome", err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the lease's Context did not end at its TTL")
	}
	if cause := context.Cause(lctx); errors.Is(cause, latchkit.ErrLeaseLost) {
		t.Errorf("the lease's Context ended with %v: a loss, after a release sent in time", cause)
	}
	time.Sleep(50 * time.Millisecond) // the middleware records the end
	mt := tel.metrics(t)
	if n := sum(t, mt["latchkit.lease.lost"]); n != 0 {
		t.Errorf("latchkit.lease.lost = %d, want 0", n)
	}
	if n := sum(t, mt["latchkit.hold.duration"]); n != 1 {
		t.Errorf("latchkit.hold.duration has %d points, want 1", n)
	}
	for _, sp := range tel.spans.Ended() {
		if sp.Name() == "latchkit.LeaseLost" {
			t.Errorf("a %s span after a release sent in time", sp.Name())
		}
	}
}

// TestInnermostReachesMultiLease: a MultiLock's lease wrapped by Tracing
// and by a user's middleware still reaches its primitives.MultiLease
// through latchkit.Innermost.
func TestInnermostReachesMultiLease(t *testing.T) {
	tel := newTelemetry(t)
	_, bs := miniBackends(t, 1, nil)
	m, _ := primitives.NewMultiLock(clienttest.For(t, bs[0]), []string{"a", "b"}, tel.tracing(), primitives.WithMiddleware(wrapLeases))
	ctx := context.Background()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, ok := l.(primitives.MultiLease); ok {
		t.Fatal("the wrapped lease is itself a MultiLease: the test would prove nothing")
	}
	ml, ok := latchkit.Innermost(l).(primitives.MultiLease)
	if !ok {
		t.Fatalf("Innermost(%T) is not a MultiLease", l)
	}
	if f := ml.Fences(); len(f) != 2 || f["a"] < 1 || f["b"] < 1 {
		t.Errorf("fences %v", f)
	}
}

// TestTracingWithPropagators: with a propagator that writes more than a
// traceparent (here TraceContext and Baggage), the holder's fields are
// stored beside the grant and a waiter's span still links to the holder's.
func TestTracingWithPropagators(t *testing.T) {
	tel := newTelemetry(t)
	ms, bs := miniBackends(t, 1, nil)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	opts := []primitives.Option{tel.tracing(middleware.WithPropagators(prop))}
	holder, _ := primitives.NewMutex(clienttest.For(t, bs[0]), "p", opts...)
	waiter, _ := primitives.NewMutex(clienttest.For(t, bs[0]), "p", opts...)
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx := baggage.ContextWithBaggage(context.Background(), bag)
	l, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holderSpan := tel.ended("latchkit.Lock", latchkit.KindMutex)[0].SpanContext()
	if who, _ := ms[0].Get(keyspace.KeyBase(keyspace.DefaultPrefix, "p") + ":who"); !strings.Contains(who, "baggage=") || !strings.Contains(who, "traceparent=") {
		t.Fatalf("stored annotation %q, want both fields of the propagator", who)
	}
	if _, err := waiter.TryLock(context.Background()); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Fatalf("TryLock while held: %v", err)
	}
	l.Release(ctx)
	ts := tel.ended("latchkit.TryLock", latchkit.KindMutex)
	if len(ts) != 1 || len(ts[0].Links()) != 1 || ts[0].Links()[0].SpanContext.SpanID() != holderSpan.SpanID() {
		t.Fatalf("the waiter's span does not link to the holder's through the composite propagator: %v", ts)
	}
}

// TestTracingLatchWait: a latch's Wait, whose chain returns a nil lease,
// gets a "latchkit.Wait" span of kind client with the latch's kind and
// name, its attempts (one event per read of the count), its outcome
// (acquired once the latch opened, ctx_done when its context ended: not
// an error, issue 30 item 6) and no fence; the acquisition metrics count it, and no
// hold time, Release span or lost lease is recorded for it.
func TestTracingLatchWait(t *testing.T) {
	tel := newTelemetry(t)
	_, bs := miniBackends(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	setter, _ := primitives.NewLatch(clienttest.For(t, bs[0]), "shards")
	waiter, err := primitives.NewLatch(clienttest.For(t, bs[0]), "shards", tel.tracing())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := setter.TrySetCount(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- waiter.Wait(ctx) }()
	time.Sleep(60 * time.Millisecond)
	if err := setter.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if err := waiter.Wait(ctx); err != nil { // open: one read
		t.Fatalf("Wait on the open latch: %v", err)
	}
	setter.TrySetCount(ctx, 1)
	dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = waiter.Wait(dctx)
	dcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its deadline: %v", err)
	}

	spans := tel.ended("latchkit.Wait", latchkit.KindLatch)
	if len(spans) != 3 {
		t.Fatalf("%d latchkit.Wait spans, want 3 (all spans: %d)", len(spans), len(tel.spans.Ended()))
	}
	for i, want := range []struct {
		outcome     string
		minAttempts int64
		err         bool
	}{
		{outcomeAcquired, 2, false},
		{outcomeAcquired, 1, false},
		{outcomeCtxDone, 1, false},
	} {
		s := spans[i]
		a := s.Attributes()
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %d: kind %v, want client", i, s.SpanKind())
		}
		if n := attr(a, attrName).AsString(); n != "shards" {
			t.Errorf("span %d: name attribute %q", i, n)
		}
		if out := attr(a, attrOutcome).AsString(); out != want.outcome {
			t.Errorf("span %d: outcome %q, want %q", i, out, want.outcome)
		}
		attempts := attr(a, attrAttempts).AsInt64()
		if attempts < want.minAttempts || (i == 1 && attempts != 1) {
			t.Errorf("span %d: %d attempts, want at least %d", i, attempts, want.minAttempts)
		}
		var events int64
		for _, e := range s.Events() {
			if e.Name == "latchkit.attempt" {
				events++
			}
		}
		if events != attempts {
			t.Errorf("span %d: %d attempt events for %d attempts", i, events, attempts)
		}
		if v := attr(a, attrFence); v.Type() != attribute.INVALID {
			t.Errorf("span %d: a fence attribute %v on a latch's Wait", i, v.Emit())
		}
		if isErr := s.Status().Code == codes.Error; isErr != want.err {
			t.Errorf("span %d: status %v", i, s.Status())
		}
	}
	if n := len(tel.spans.Ended()); n != 3 {
		t.Errorf("%d spans in all, want only the 3 Wait spans", n)
	}
	m := tel.metrics(t)
	kind := attrKind.String(string(latchkit.KindLatch))
	if n := sum(t, m["latchkit.acquisitions"], kind, attrOutcome.String(outcomeAcquired)); n != 2 {
		t.Errorf("latchkit.acquisitions{latch, acquired} = %d, want 2", n)
	}
	if n := sum(t, m["latchkit.acquisitions"], kind, attrOutcome.String(outcomeCtxDone)); n != 1 {
		t.Errorf("latchkit.acquisitions{latch, ctx_done} = %d, want 1", n)
	}
	if n := sum(t, m["latchkit.acquire.duration"], kind); n != 3 {
		t.Errorf("latchkit.acquire.duration count %d, want 3", n)
	}
	if n := sum(t, m["latchkit.waiters"], kind); n != 0 {
		t.Errorf("latchkit.waiters = %d after every Wait ended", n)
	}
	if n := sum(t, m["latchkit.hold.duration"]) + sum(t, m["latchkit.lease.lost"]); n != 0 {
		t.Errorf("hold time or lost leases recorded for a latch's Wait: %d points", n)
	}
}

// wrappedLease is a user middleware's wrapper of a lease (latchkit.Wrapper).
type wrappedLease struct{ latchkit.Lease }

func (w wrappedLease) Unwrap() latchkit.Lease { return w.Lease }

// wrapLeases wraps every lease granted in a wrappedLease.
func wrapLeases(next latchkit.Acquire) latchkit.Acquire {
	return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
		l, err := next(ctx, req)
		if err != nil {
			return nil, err
		}
		return wrappedLease{l}, nil
	}
}

package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/latchkit/latchkit"
)

// ScopeName is the instrumentation scope of the tracer and meter that
// Tracing uses: the module path.
const ScopeName = "github.com/latchkit/latchkit"

// The attributes Tracing sets (listed in the package doc). Tokens never
// appear in any of them.
const (
	attrKind     = attribute.Key("latchkit.kind")     // the primitive's kind
	attrName     = attribute.Key("latchkit.name")     // the primitive's name
	attrOutcome  = attribute.Key("latchkit.outcome")  // acquired, not_acquired, ctx_done, error
	attrAttempts = attribute.Key("latchkit.attempts") // attempts made by an acquisition
	attrAttempt  = attribute.Key("latchkit.attempt")  // the number of one attempt
	attrFence    = attribute.Key("latchkit.fence")    // the grant's fencing token
	attrWaitHint = attribute.Key("latchkit.wait_hint_ms")
	attrLinkType = attribute.Key("latchkit.link") // "holder" on a link to the span that held what we waited for
	// attrCause says why: why a lease was lost (on a LeaseLost span and
	// its event), why the caller's context ended a wait (on the
	// latchkit.ctx_done event of an acquisition's span).
	attrCause = attribute.Key("latchkit.cause")
)

// The outcomes of an acquisition, as attrOutcome values (listed in the
// package doc).
const (
	outcomeAcquired    = "acquired"
	outcomeNotAcquired = "not_acquired" // a Try found it held, or the retry policy gave up
	outcomeCtxDone     = "ctx_done"     // the caller's context ended the wait: recorded, not an error
	outcomeError       = "error"        // Redis unreachable, bad input, ...
)

// maxHolderLinks bounds the links one acquisition span gets to holders'
// spans (each distinct holder it waited for counts once).
const maxHolderLinks = 32

// TracingOption configures Tracing.
type TracingOption func(*tracingConfig)

type tracingConfig struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	prop     propagation.TextMapPropagator
	nameAttr func(kind latchkit.Kind, name string) string
	holders  bool
}

// WithTracerProvider sets the TracerProvider (default otel.GetTracerProvider()
// at the time Tracing is called).
func WithTracerProvider(tp trace.TracerProvider) TracingOption {
	return func(c *tracingConfig) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithMeterProvider sets the MeterProvider (default otel.GetMeterProvider()
// at the time Tracing is called).
func WithMeterProvider(mp metric.MeterProvider) TracingOption {
	return func(c *tracingConfig) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithPropagators sets how a holder's span context is written beside its
// grant and read back by the waiters it blocks (default
// propagation.TraceContext{}: a W3C traceparent, which latchctl inspect
// shows as a trace id). Give the process's propagator
// (otel.GetTextMapPropagator()) when the services that wait for each
// other's locks propagate another format, such as B3. Whatever it writes
// must fit in 256 bytes, or nothing is stored.
func WithPropagators(p propagation.TextMapPropagator) TracingOption {
	return func(c *tracingConfig) {
		if p != nil {
			c.prop = p
		}
	}
}

// WithMetricName maps a primitive's name to the latchkit.name attribute of
// its metric points; an empty result leaves the attribute out. Names can be
// of high cardinality (a lock per order id): map them to a family
// ("order-*") or drop them. Spans always carry the full name. By default
// metric points carry the name as is.
func WithMetricName(f func(kind latchkit.Kind, name string) string) TracingOption {
	return func(c *tracingConfig) {
		if f != nil {
			c.nameAttr = f
		}
	}
}

// WithHolderLinks turns off (or on, the default) storing the holder's span
// context beside each grant and linking waiters' spans to it. Off, Tracing
// writes nothing to Redis.
func WithHolderLinks(on bool) TracingOption { return func(c *tracingConfig) { c.holders = on } }

// Tracing returns a middleware that traces and measures acquisitions and
// latch Waits: a span per call covering its whole wait, spans for the
// lease's Release, Extend and loss, a link from a waiter's span to the
// holder's, and the latchkit.* metrics (see the package doc). Put it
// outermost (first in primitives.WithMiddleware) so that its span covers
// the whole wait. The package doc's Set-up shows it with an application's
// TracerProvider and MeterProvider.
func Tracing(opts ...TracingOption) latchkit.Middleware {
	c := tracingConfig{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider(), holders: true, prop: propagation.TraceContext{},
		nameAttr: func(_ latchkit.Kind, name string) string { return name }}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	t := &tracer{cfg: c, tr: c.tp.Tracer(ScopeName)}
	m := c.mp.Meter(ScopeName)
	var errs [6]error
	t.waitTime, errs[0] = m.Float64Histogram("latchkit.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an acquisition to its outcome, waiting included."))
	t.holdTime, errs[1] = m.Float64Histogram("latchkit.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, from grant to release or loss."))
	t.acquisitions, errs[2] = m.Int64Counter("latchkit.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions by outcome."))
	t.lost, errs[3] = m.Int64Counter("latchkit.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost before their release: expired, taken, or Redis unreachable."))
	t.waiters, errs[4] = m.Int64UpDownCounter("latchkit.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquisitions waiting now."))
	_, errs[5] = m.Float64ObservableGauge("latchkit.lease.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest lease held now through this Tracing, per Client and kind (0 when none is)."),
		metric.WithFloat64Callback(t.live.observe))
	if err := errors.Join(errs[:]...); err != nil {
		otel.Handle(err) // the instruments are no-ops then, as OTel does
	}
	return func(next latchkit.Acquire) latchkit.Acquire {
		return func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			switch {
			case next == nil:
				return nil, fmt.Errorf("%w: Tracing around a nil Acquire", latchkit.ErrInvalid)
			case ctx == nil:
				return nil, fmt.Errorf("%w: nil context", latchkit.ErrInvalid)
			case req == nil:
				return nil, fmt.Errorf("%w: nil Request", latchkit.ErrInvalid)
			}
			return t.acquire(ctx, req, next)
		}
	}
}

type tracer struct {
	cfg          tracingConfig
	tr           trace.Tracer
	waitTime     metric.Float64Histogram
	holdTime     metric.Float64Histogram
	acquisitions metric.Int64Counter
	lost         metric.Int64Counter
	waiters      metric.Int64UpDownCounter
	live         liveLeases // for latchkit.lease.oldest_age (oldest.go)
}

// spanName is the name of an acquisition's span: "latchkit." and the
// primitive's method it stands for (Request.Op), "Acquire" when the
// Request names none.
func spanName(req *latchkit.Request) string {
	if req.Op == "" {
		return "latchkit.Acquire"
	}
	return "latchkit." + req.Op
}

// metricAttrs are the attributes of a metric point: kind, the name as
// WithMetricName maps it, and extra.
func (t *tracer) metricAttrs(kind latchkit.Kind, name string, extra ...attribute.KeyValue) metric.MeasurementOption {
	kv := make([]attribute.KeyValue, 0, 3)
	kv = append(kv, attrKind.String(string(kind)))
	if n := t.cfg.nameAttr(kind, name); n != "" {
		kv = append(kv, attrName.String(n))
	}
	return metric.WithAttributeSet(attribute.NewSet(append(kv, extra...)...))
}

// annotation is the span context of ctx as the propagator writes it,
// stored beside a grant: a lone traceparent as is (what latchctl inspect
// reads), anything else as a URL query of the propagator's fields.
func (t *tracer) annotation(ctx context.Context) string {
	c := propagation.MapCarrier{}
	t.cfg.prop.Inject(ctx, c)
	if v, ok := c["traceparent"]; ok && len(c) == 1 {
		return v
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	q := url.Values{}
	for _, k := range keys {
		q.Set(k, c[k])
	}
	return q.Encode()
}

// holderSpan is the span context a holder stored (see annotation), invalid
// when there is none.
func (t *tracer) holderSpan(s string) trace.SpanContext {
	c := propagation.MapCarrier{"traceparent": s}
	if strings.Contains(s, "=") {
		q, err := url.ParseQuery(s)
		if err != nil {
			return trace.SpanContext{}
		}
		c = propagation.MapCarrier{}
		for k := range q {
			c[k] = q.Get(k)
		}
	}
	return trace.SpanContextFromContext(t.cfg.prop.Extract(context.Background(), c))
}

func outcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return outcomeAcquired
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return outcomeCtxDone
	case errors.Is(err, latchkit.ErrNotAcquired):
		return outcomeNotAcquired
	default:
		return outcomeError
	}
}

func (t *tracer) acquire(ctx context.Context, req *latchkit.Request, next latchkit.Acquire) (latchkit.Lease, error) {
	spanAttrs := []attribute.KeyValue{attrKind.String(string(req.Kind)), attrName.String(req.Name)}
	ctx, span := t.tr.Start(ctx, spanName(req),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(spanAttrs...))
	defer span.End()
	recording := span.IsRecording()
	attempts := 0
	if recording {
		if t.cfg.holders && span.SpanContext().IsValid() {
			req.Annotation = t.annotation(ctx)
		}
		var linked map[trace.SpanID]bool
		prev := req.OnAttempt
		req.OnAttempt = func(n int, err error) {
			if prev != nil {
				prev(n, err)
			}
			attempts = n
			var held *latchkit.HeldError
			isHeld := errors.As(err, &held)
			var hint time.Duration
			if isHeld {
				hint = held.WaitHint
			}
			span.AddEvent("latchkit.attempt", trace.WithAttributes(
				attrAttempt.Int(n), attrOutcome.String(outcome(ctx, err)),
				attrWaitHint.Int64(hint.Milliseconds())))
			if !isHeld || held.Holder == "" || !t.cfg.holders || len(linked) >= maxHolderLinks {
				return
			}
			if sc := t.holderSpan(held.Holder); sc.IsValid() && !linked[sc.SpanID()] && sc.SpanID() != span.SpanContext().SpanID() {
				if linked == nil {
					linked = map[trace.SpanID]bool{}
				}
				linked[sc.SpanID()] = true
				span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrLinkType.String("holder")}})
			}
		}
	}
	var waiting metric.MeasurementOption
	if !req.Try {
		waiting = t.metricAttrs(req.Kind, req.Name)
		t.waiters.Add(ctx, 1, waiting)
	}
	start := time.Now()
	returned := false
	defer func() {
		if returned {
			return
		}
		// next panicked (or called runtime.Goexit): the waiter leaves,
		// the acquisition counts as an error and its span says so; the
		// panic goes on.
		if !req.Try {
			t.waiters.Add(ctx, -1, waiting)
		}
		byOutcome := t.metricAttrs(req.Kind, req.Name, attrOutcome.String(outcomeError))
		t.waitTime.Record(ctx, time.Since(start).Seconds(), byOutcome)
		t.acquisitions.Add(ctx, 1, byOutcome)
		if recording {
			span.SetAttributes(attrAttempts.Int(attempts), attrOutcome.String(outcomeError))
		}
		statusOnPanic(span, &returned)
	}()
	l, err := next(ctx, req)
	returned = true
	wait := time.Since(start)
	if !req.Try {
		t.waiters.Add(ctx, -1, waiting)
	}
	out := outcome(ctx, err)
	byOutcome := t.metricAttrs(req.Kind, req.Name, attrOutcome.String(out))
	t.waitTime.Record(ctx, wait.Seconds(), byOutcome)
	t.acquisitions.Add(ctx, 1, byOutcome)
	if recording {
		span.SetAttributes(attrAttempts.Int(attempts), attrOutcome.String(out))
	}
	if err != nil {
		switch out {
		case outcomeError:
			span.RecordError(err)
			span.SetStatus(codes.Error, out)
		case outcomeCtxDone:
			// The caller stopped waiting: what happened, not a
			// failure (a trace viewer would show every timed-out wait
			// as a red span otherwise).
			if recording {
				span.AddEvent("latchkit.ctx_done", trace.WithAttributes(attrCause.String(ctxDoneCause(ctx, err))))
			}
		}
		return nil, err
	}
	if l == nil {
		// A latch's Wait: the latch opened, and there is no lease to
		// wrap, hold or fence.
		return nil, nil
	}
	tl := &tracedLease{Lease: l, t: t, kind: req.Kind, name: req.Name, span: span.SpanContext()}
	t.live.add(tl, req.Client) // stamps tl.granted
	// The loss counter exists, at 0, for every kind and name granted: a
	// rate of 0 (no loss) rather than no series, for dashboards and alerts.
	t.lost.Add(ctx, 0, t.metricAttrs(req.Kind, req.Name))
	if recording {
		span.SetAttributes(attrFence.Int64(l.Fence()))
		tl.spanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(append(spanAttrs, attrFence.Int64(l.Fence()))...)}
	}
	context.AfterFunc(l.Context(), tl.ended)
	return tl, nil
}

// ctxDoneCause is what a wait given up by its context says: the error
// returned (the attempts made, the last holder's wait hint), and the
// context's cause when the caller gave one (context.WithCancelCause).
func ctxDoneCause(ctx context.Context, err error) string {
	if c := context.Cause(ctx); c != nil && c != ctx.Err() && !errors.Is(err, c) {
		return err.Error() + " (cause: " + c.Error() + ")"
	}
	return err.Error()
}

// statusOnPanic, deferred after the span's End, gives span an error
// status when the call it traces did not return (it panicked, or called
// runtime.Goexit): the span still ends, and says so.
func statusOnPanic(span trace.Span, returned *bool) {
	if !*returned {
		span.SetStatus(codes.Error, "panic")
	}
}

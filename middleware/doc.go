// Package middleware holds Tracing, the OpenTelemetry middleware of
// latchkit's acquisitions: spans, metrics, and links from a waiter's span
// to the holder's. It is the only latchkit package that imports
// OpenTelemetry; the primitives do not, so a program that does not trace
// does not link it.
//
// A middleware is a func(next latchkit.Acquire) latchkit.Acquire;
// primitives.WithMiddleware(a, b) runs a outermost, then b, then the
// primitive's wait loop. Reentrancy is primitives.NewReentrantMutex.
//
// # Set-up
//
// Give Tracing the application's TracerProvider and MeterProvider (by
// default the global ones, otel.GetTracerProvider and
// otel.GetMeterProvider) and put it first in every primitive's
// WithMiddleware:
//
//	rdb, stop := exampleRedis() // your *redis.Client
//	defer stop()
//	ctx := context.Background()
//
//	// The application's providers, made once at start-up: here in memory;
//	// in a service, its exporter (OTLP, ...) and a periodic reader.
//	spans := tracetest.NewInMemoryExporter()
//	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
//	defer tp.Shutdown(ctx)
//	metrics := sdkmetric.NewManualReader()
//	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
//	defer mp.Shutdown(ctx)
//
//	client, err := primitives.NewClient(goredis.New(rdb))
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer client.Close(ctx)
//
//	// First in WithMiddleware, outermost: its span covers the whole wait.
//	tracing := middleware.Tracing(
//		middleware.WithTracerProvider(tp),
//		middleware.WithMeterProvider(mp),
//	)
//	mu, err := primitives.NewMutex(client, "invoice:42", primitives.WithMiddleware(tracing))
//	if err != nil {
//		log.Fatal(err)
//	}
//	lease, err := mu.Lock(ctx) // span latchkit.Lock, metrics latchkit.*
//	if err != nil {
//		log.Fatal(err)
//	}
//	lease.Release(ctx) // span latchkit.Release
//
//	printTelemetry(ctx, spans, metrics) // the names of the spans and metrics recorded
//
// # Spans
//
// Tracing makes a span per acquisition, named after the primitive's method
// (latchkit.Request.Op: "latchkit.Lock", "latchkit.TryLock",
// "latchkit.RLock", "latchkit.Acquire", ..., a user primitive's own) with
// the kind, name, attempts,
// outcome and fence, and an event per attempt; a span per Release and
// Extend of the lease it returns; and, when the lease is lost, a
// "latchkit.LeaseLost" span with the cause (latchkit.cause) and an event,
// a child of the acquisition's span.
//
// A Release or Extend whose context carries no span (the usual
// lease.Release(context.Background()), or a call from another goroutine)
// is a child of the acquisition's span: the acquisition, its extensions,
// its release and its loss read as one trace, whatever context the calls
// got. A context with a span of its own keeps the call in that span's
// trace, under it, with a link to the acquisition's span.
//
// Only failures are errors (span status Error, latchkit.acquisitions
// outcome "error"): Redis unreachable, a bad argument, a failed Release or
// Extend, a lost lease. A Try that finds the primitive held
// (not_acquired) is not one, nor is a wait the caller gave up on, its
// context ending (ctx_done): that span gets a "latchkit.ctx_done" event
// with the cause and keeps the status Unset.
//
// A latch's Wait (kind latchkit.KindLatch) gets a "latchkit.Wait" span
// like an acquisition's: attempts (each a read of the count, an event
// each), outcome (acquired once the latch opened, ctx_done, not_acquired
// when the retry policy gave up, error), no fence; and the acquisition
// metrics (wait time, count by outcome, waiters). Its chain returns a nil
// lease, which Tracing passes on: no hold time, no Release span.
//
// # Holder links
//
// The acquisition's span context is stored beside the grant (as a W3C
// traceparent unless WithPropagators says otherwise, in the primitive's
// own keys, by the acquire script itself, expiring with the grant); a
// waiter whose attempt finds the primitive held reads it back with the
// wait hint and links its span to the holder's. A slow request then
// points, in a trace viewer, at the one that blocked it. This costs no
// round trip. WithHolderLinks(false) turns it off.
//
// # Metrics
//
// latchkit.acquire.duration (wait time, s) and latchkit.acquisitions by
// outcome, latchkit.hold.duration (s), latchkit.lease.lost (0 from a
// name's first grant on), latchkit.waiters (acquisitions waiting now), and
// latchkit.lease.oldest_age (s: the age of the oldest lease held now
// through this Tracing, per Client and kind; it carries no name, which is
// unbounded). Make one Tracing per process and give it to every
// primitive: each reports the leases acquired through it.
//
// # Attributes
//
// The attribute keys and values Tracing sets, for queries and dashboards
// (tokens never appear in any of them):
//
//	latchkit.kind          the primitive's kind, a latchkit.Kind ("mutex",
//	                       "rwlock_read", "semaphore", "latch", ...): on
//	                       every span and metric point
//	latchkit.name          the primitive's name: on every span; on metric
//	                       points as WithMetricName maps it (left out when
//	                       it maps it to "")
//	latchkit.client        the name of the Client (primitives.WithClientName,
//	                       latchkit.Request.Client): on
//	                       latchkit.lease.oldest_age only
//	latchkit.outcome       how an acquisition ended, one of the outcomes
//	                       below: on its span, on its latchkit.attempt
//	                       events (the attempt's outcome), and on the
//	                       points of latchkit.acquisitions and
//	                       latchkit.acquire.duration
//	latchkit.attempts      the attempts an acquisition made (its span)
//	latchkit.attempt       the number of one attempt (its event)
//	latchkit.wait_hint_ms  an attempt's wait hint (latchkit.HeldError) in
//	                       ms, 0 without one (the attempt's event)
//	latchkit.fence         the grant's fencing token (the acquisition's
//	                       span, Release, Extend and LeaseLost spans)
//	latchkit.link          "holder" on a link from a waiter's span to the
//	                       span of the holder it waited for
//	latchkit.cause         why a lease was lost (the LeaseLost span and its
//	                       latchkit.lease_lost event), why the caller's
//	                       context ended a wait (the latchkit.ctx_done
//	                       event of an acquisition's span)
//
// The values of latchkit.outcome:
//
//	acquired      granted (for a latch's Wait: the latch opened)
//	not_acquired  a Try found it held, or the retry policy gave up
//	ctx_done      the caller's context ended the wait: recorded, not an
//	              error
//	error         Redis unreachable, a bad argument, ...: the span's
//	              status is Error
//
// The instrumentation scope of spans and metrics is ScopeName.
//
//readme:example middleware ExampleTracing_setup Set-up
package middleware

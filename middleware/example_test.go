package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/middleware"
	"github.com/latchkit/latchkit/primitives"
)

// Tracing, outermost, gives every acquisition a span; a waiter's span links
// to the span of the request that held the lock. Without options it uses
// the global providers (otel.GetTracerProvider, otel.GetMeterProvider).
func ExampleTracing() {
	client, stop := exampleRedis()
	defer stop()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	// One Client per Redis, shared by the primitives made from it.
	cl, err := primitives.NewClient(goredis.New(client))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { // on shutdown: releases what is still held, stops its goroutines
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := cl.Close(ctx); err != nil {
			log.Print(err)
		}
	}()

	mu, err := primitives.NewMutex(cl, "report",
		primitives.WithMiddleware(middleware.Tracing(middleware.WithTracerProvider(tp))))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	held, err := mu.Lock(ctx) // span "latchkit.Lock"
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release(ctx)
	_, err = mu.TryLock(ctx) // span "latchkit.TryLock", linked to the holder's
	fmt.Println(errors.Is(err, latchkit.ErrNotAcquired))

	ended := spans.Ended()
	holder, waiter := ended[0], ended[1]
	fmt.Println(waiter.Name(), "links to", holder.Name()+":",
		waiter.Links()[0].SpanContext.SpanID() == holder.SpanContext().SpanID())
	// Output:
	// true
	// latchkit.TryLock links to latchkit.Lock: true
}

// exampleRedis is a go-redis client of an embedded Redis (miniredis), and
// the function that closes both: in a program, your own client,
// redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}).
func exampleRedis() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	return c, func() { c.Close(); m.Close() }
}

// The set-up in a program: Tracing with the application's TracerProvider
// and MeterProvider, given to every primitive by WithMiddleware.
func ExampleTracing_setup() {
	rdb, stop := exampleRedis() // your *redis.Client
	defer stop()
	ctx := context.Background()

	// The application's providers, made once at start-up: here in memory;
	// in a service, its exporter (OTLP, ...) and a periodic reader.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(ctx)
	metrics := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	defer mp.Shutdown(ctx)

	client, err := primitives.NewClient(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	// First in WithMiddleware, outermost: its span covers the whole wait.
	tracing := middleware.Tracing(
		middleware.WithTracerProvider(tp),
		middleware.WithMeterProvider(mp),
	)
	mu, err := primitives.NewMutex(client, "invoice:42", primitives.WithMiddleware(tracing))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := mu.Lock(ctx) // span latchkit.Lock, metrics latchkit.*
	if err != nil {
		log.Fatal(err)
	}
	lease.Release(ctx) // span latchkit.Release

	printTelemetry(ctx, spans, metrics) // the names of the spans and metrics recorded
	// Output:
	// span latchkit.Lock
	// span latchkit.Release
	// metric latchkit.acquire.duration
	// metric latchkit.hold.duration
	// metric latchkit.acquisitions
	// metric latchkit.lease.lost
	// metric latchkit.waiters
	// metric latchkit.lease.oldest_age
}

// printTelemetry prints the names of the spans and metrics recorded.
func printTelemetry(ctx context.Context, spans *tracetest.InMemoryExporter, metrics *sdkmetric.ManualReader) {
	for _, s := range spans.GetSpans() {
		fmt.Println("span", s.Name)
	}
	var rm metricdata.ResourceMetrics
	if err := metrics.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Println("metric", m.Name)
		}
	}
}

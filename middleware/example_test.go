package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
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
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

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

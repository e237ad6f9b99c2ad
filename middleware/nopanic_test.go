package middleware_test

import (
	"context"
	"testing"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
	"github.com/latchkit/latchkit/middleware"
)

// Issue 38, finding 5: middleware's exported functions with bad input (nil
// options and providers, a nil next, a nil context or request) never
// panic: a nil option or provider is ignored (documented), and the Acquire
// a Tracing middleware returns refuses a nil next, context or request with
// an error matching ErrInvalid. A traced lease's methods are latchkit's
// Lease's (nopanic_test.go at the root).
func TestNoPanicOnBadInput(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	req := &latchkit.Request{Name: "x", Kind: latchkit.KindMutex}
	next := func(context.Context, *latchkit.Request) (latchkit.Lease, error) { return nil, nil }
	// traced builds a Tracing middleware with opts and runs a call
	// through it.
	traced := func(t *testing.T, what string, opts ...middleware.TracingOption) {
		t.Helper()
		apicover.Calm(t, what, func() error { _, err := middleware.Tracing(opts...)(next)(ctx, req); return err })
	}
	apicover.Check(t, ".", map[string]func(t *testing.T){
		"Tracing": func(t *testing.T) {
			traced(t, "Tracing(nil)", nil)
			inv := latchkit.ErrInvalid
			apicover.Must(t, "Tracing()(nil)(ctx, req)", func() error { _, err := middleware.Tracing()(nil)(ctx, req); return err }, inv)
			apicover.Must(t, "Tracing()(next)(nil ctx, req)", func() error { _, err := middleware.Tracing()(next)(nilCtx, req); return err }, inv)
			apicover.Must(t, "Tracing()(next)(ctx, nil req)", func() error { _, err := middleware.Tracing()(next)(ctx, nil); return err }, inv)
		},
		"WithTracerProvider": func(t *testing.T) { traced(t, "WithTracerProvider(nil)", middleware.WithTracerProvider(nil)) },
		"WithMeterProvider":  func(t *testing.T) { traced(t, "WithMeterProvider(nil)", middleware.WithMeterProvider(nil)) },
		"WithPropagators":    func(t *testing.T) { traced(t, "WithPropagators(nil)", middleware.WithPropagators(nil)) },
		"WithMetricName":     func(t *testing.T) { traced(t, "WithMetricName(nil)", middleware.WithMetricName(nil)) },
		"WithHolderLinks":    func(t *testing.T) { traced(t, "WithHolderLinks(false)", middleware.WithHolderLinks(false)) },
	})
}

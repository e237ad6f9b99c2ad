package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/middleware"
)

// demoService names the demo in its metrics (job) and traces.
const demoService = "latchctl-demo"

// demoTelemetry is the demo's OpenTelemetry: middleware.Tracing over a
// MeterProvider read by the OpenTelemetry Prometheus exporter, served at
// http://<-metrics-addr>/metrics, and a TracerProvider exporting over
// OTLP/HTTP to -otlp. Each is made only when its flag is given; without
// either the demo runs without Tracing.
type demoTelemetry struct {
	mw       latchkit.Middleware
	shutdown []func(context.Context) error
}

// startTelemetry sets up what c's flags ask for; nil when neither is given.
func startTelemetry(ctx context.Context, c demoConfig, stderr io.Writer) (_ *demoTelemetry, err error) {
	if c.metricsAddr == "" && c.otlp == "" {
		return nil, nil
	}
	t := &demoTelemetry{}
	defer func() {
		if err != nil {
			_ = t.close(context.Background())
		}
	}()
	res := resource.NewSchemaless(attribute.String("service.name", demoService))
	var opts []middleware.TracingOption
	if c.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		mp := metric.NewMeterProvider(metric.WithReader(exp), metric.WithResource(res))
		t.shutdown = append(t.shutdown, mp.Shutdown)
		ln, err := net.Listen("tcp", c.metricsAddr)
		if err != nil {
			return nil, fmt.Errorf("-metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = srv.Serve(ln)
		}()
		t.shutdown = append(t.shutdown, func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			<-served
			return err
		})
		fmt.Fprintf(stderr, "latchctl demo: metrics at http://%s/metrics\n", ln.Addr())
		opts = append(opts, middleware.WithMeterProvider(mp))
	}
	if c.otlp != "" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.otlp))
		if err != nil {
			return nil, fmt.Errorf("-otlp: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.shutdown = append(t.shutdown, tp.Shutdown)
		fmt.Fprintf(stderr, "latchctl demo: traces to %s (OTLP/HTTP)\n", c.otlp)
		opts = append(opts, middleware.WithTracerProvider(tp))
	}
	// Names per entity (item:17, user:3) are unbounded in a real
	// application: the metrics carry their family (item:*), as
	// docs/operations.md advises; spans keep the full name.
	opts = append(opts, middleware.WithMetricName(func(_ latchkit.Kind, name string) string {
		if i := strings.IndexByte(name, ':'); i >= 0 {
			return name[:i+1] + "*"
		}
		return name
	}))
	t.mw = middleware.Tracing(opts...)
	return t, nil
}

// close flushes the traces and stops serving metrics, the last first,
// within ctx.
func (t *demoTelemetry) close(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		errs = append(errs, t.shutdown[i](ctx))
	}
	return errors.Join(errs...)
}

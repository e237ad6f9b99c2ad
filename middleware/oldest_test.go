package middleware_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/latchkit/latchkit/primitives"
)

// oldestAge is latchkit.lease.oldest_age's point for want (kind and
// client), and every point's attribute keys.
func oldestAge(t *testing.T, tel *telemetry, want ...attribute.KeyValue) (float64, bool, [][]attribute.Key) {
	t.Helper()
	g, ok := tel.metrics(t)["latchkit.lease.oldest_age"].(metricdata.Gauge[float64])
	if !ok {
		t.Fatalf("latchkit.lease.oldest_age: %T, want a float64 gauge", tel.metrics(t)["latchkit.lease.oldest_age"])
	}
	var keys [][]attribute.Key
	v, found := 0.0, false
	for _, p := range g.DataPoints {
		var ks []attribute.Key
		for _, kv := range p.Attributes.ToSlice() {
			ks = append(ks, kv.Key)
		}
		keys = append(keys, ks)
		if hasAll(p.Attributes, want) {
			v, found = p.Value, true
		}
	}
	return v, found, keys
}

// TestTracingOldestLeaseAge (issue 41, item 3): latchkit.lease.oldest_age
// is, per Client and kind, the age of the oldest lease held now (0 once
// none is), with kind and client attributes and never the primitive's name.
func TestTracingOldestLeaseAge(t *testing.T) {
	tel := newTelemetry(t)
	_, bs := miniBackends(t, 1, nil)
	cl, err := primitives.NewClient(bs[0], primitives.WithClientName("api-7"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(context.Background()) })
	ctx := context.Background()
	tr := tel.tracing()
	a, _ := primitives.NewMutex(cl, "a", tr)
	b, _ := primitives.NewMutex(cl, "b", tr)
	mine := []attribute.KeyValue{attrKind.String("mutex"), attribute.String("latchkit.client", "api-7")}

	la, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(120 * time.Millisecond)
	lb, err := b.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	age, ok, keys := oldestAge(t, tel, mine...)
	if !ok || age < 0.12 {
		t.Fatalf("oldest age %v (found %v), want a's, at least 0.12s; points %v", age, ok, keys)
	}
	for _, ks := range keys {
		if len(ks) != 2 || ks[0] != "latchkit.client" || ks[1] != "latchkit.kind" {
			t.Errorf("attributes %v, want latchkit.client and latchkit.kind alone", ks)
		}
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if age2, _, _ := oldestAge(t, tel, mine...); age2 >= age {
		t.Errorf("after a's release the oldest is %vs, want b's, younger than a's %vs", age2, age)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if age3, ok, _ := oldestAge(t, tel, mine...); !ok || age3 != 0 {
		t.Errorf("with no lease held: %v (found %v), want 0", age3, ok)
	}
}

package primitives_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/primitives"
)

// TestHeldWarning (issue 41, item 3): a lease still held past
// WithHeldWarning logs one Warn record with its kind, name, fence, age and
// its Client's identity, never the token; a lease released before the
// limit logs nothing; a negative limit is refused.
func TestHeldWarning(t *testing.T) {
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rc.Close() })
	cl, err := primitives.NewClient(goredis.New(rc), primitives.WithClientName("billing-worker"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(context.Background()) })
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx := context.Background()

	quick, err := primitives.NewSemaphore(cl, "quick", 2, primitives.WithHeldWarning(150*time.Millisecond), primitives.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	q, err := quick.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}

	mu, err := primitives.NewMutex(cl, "nightly-job", primitives.WithHeldWarning(100*time.Millisecond), primitives.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), "held past") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a second record, or quick's, would be here by now
	out := buf.String()
	id := cl.Identity()
	want := []string{"level=WARN", `msg="latchkit: lease held past its warning"`, "kind=mutex", "name=nightly-job",
		"fence=" + strconv.FormatInt(l.Fence(), 10), "client=billing-worker", "host=" + id.Host, "pid=" + strconv.Itoa(id.PID), "client_id=" + id.ID, "age="}
	if strings.Count(out, "held past") != 1 {
		t.Fatalf("want one record, got:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("record lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, l.Token()) || strings.Contains(out, "quick") {
		t.Errorf("the token, or the lease released in time, in:\n%s", out)
	}
	if _, err := primitives.NewMutex(cl, "n", primitives.WithHeldWarning(-time.Second)); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("a negative held warning: %v, want ErrInvalid", err)
	}
}

package ratelimit_test

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/drivers"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/kit"
	"github.com/latchkit/latchkit/primitives"
	"github.com/latchkit/latchkit/ratelimit"
)

// servers are the servers a test runs on: miniredis, and redis-server
// where it is installed.
func servers(t *testing.T) map[string]string {
	m := miniredis.RunT(t)
	out := map[string]string{"miniredis": m.Addr()}
	if redistest.Available() || redistest.Required() {
		out["redis-server"] = redistest.Start(t).Addr
	}
	return out
}

// each runs f on every server with every driver, in parallel.
func each(t *testing.T, f func(t *testing.T, newBackend func(t *testing.T) backend.Backend)) {
	for srv, addr := range servers(t) {
		for _, d := range drivers.All {
			t.Run(srv+"/"+d.Name, func(t *testing.T) {
				t.Parallel()
				f(t, func(t *testing.T) backend.Backend { return d.New(t, addr) })
			})
		}
	}
}

func newClient(t *testing.T, b backend.Backend) *kit.Client {
	t.Helper()
	c, err := kit.NewClient(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

func prefix(t *testing.T) primitives.Option {
	return primitives.WithPrefix(strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()) + ":")
}

func newLimiter(t *testing.T, b backend.Backend, limit int, window time.Duration, opts ...kit.Option) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(newClient(t, b), "api", limit, window, append([]kit.Option{prefix(t)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestTakeWaitsForRoom: with the window full, a Take returns once the
// oldest take has left the window, and not before, by the window's
// length; a TryTake's error says when there will be room.
func TestTakeWaitsForRoom(t *testing.T) {
	each(t, func(t *testing.T, nb func(*testing.T) backend.Backend) {
		ctx := context.Background()
		const window = 300 * time.Millisecond
		l := newLimiter(t, nb(t), 2, window)
		start := time.Now()
		for i := 0; i < 2; i++ {
			if err := l.TryTake(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var held *latchkit.HeldError
		if err := l.TryTake(ctx); !errors.As(err, &held) || held.WaitHint <= 0 || held.WaitHint > window {
			t.Fatalf("a TryTake of a full window: %v (hint %v), want ErrNotAcquired with a hint within the window", err, held)
		}
		if err := l.Take(ctx); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < window-5*time.Millisecond || took > window+2*time.Second {
			t.Fatalf("the waiting Take returned %v after the window filled, want about %v", took, window)
		}
	})
}

// TestBadInput: bad arguments and a key of another type are refused with
// ErrInvalid, and change nothing; a nil Limiter does not panic.
func TestBadInput(t *testing.T) {
	m := miniredis.RunT(t)
	b := drivers.All[0].New(t, m.Addr())
	cl := newClient(t, b)
	for _, c := range []struct {
		limit  int
		window time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, time.Microsecond}} {
		if _, err := ratelimit.New(cl, "x", c.limit, c.window); !errors.Is(err, latchkit.ErrInvalid) {
			t.Errorf("New(limit %d, window %v): %v, want ErrInvalid", c.limit, c.window, err)
		}
	}
	if _, err := ratelimit.New(nil, "x", 1, time.Second); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("New on a nil Client: %v", err)
	}
	if _, err := ratelimit.New(cl, "", 1, time.Second); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("New with an empty name: %v", err)
	}
	var nl *ratelimit.Limiter
	if err := nl.TryTake(context.Background()); !errors.Is(err, latchkit.ErrInvalid) {
		t.Errorf("a nil Limiter's TryTake: %v", err)
	}
	l, _ := ratelimit.New(cl, "w", 1, time.Second)
	//lint:ignore SA1012 a nil context is the bad input under test
	if err := l.TryTake(nil); !errors.Is(err, latchkit.ErrInvalid) { //nolint:staticcheck
		t.Errorf("TryTake(nil): %v", err)
	}
	m.Set("latch:{w}:rl", "not a zset")
	before := m.Keys()
	err := l.TryTake(context.Background())
	if !errors.Is(err, latchkit.ErrInvalid) || !strings.Contains(err.Error(), "latch:{w}:rl holds a string") {
		t.Errorf("a log key of another type: %v, want ErrInvalid naming the key", err)
	}
	if after := m.Keys(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("keys %v after a refused take, were %v", after, before)
	}
}

// TestImportsOnlyTheKit: the package is a user's primitive: it imports
// the public kit, latchkit, backend and the standard library, nothing
// else of latchkit.
func TestImportsOnlyTheKit(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pf, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range pf.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			switch {
			case p == "github.com/latchkit/latchkit", p == "github.com/latchkit/latchkit/kit", p == "github.com/latchkit/latchkit/backend":
			case !strings.Contains(p, "."):
			default:
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}

package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// AcquireN above the limit is refused by the acquire script: the error
// matches ErrInvalid and reads as a sentence, without the scripts'
// internal marker (LATCHKIT_INVALID) or the script's SHA and line. Tried
// on miniredis and on a real redis-server, whose error replies differ.
func TestAcquireNAboveLimitErrorText(t *testing.T) {
	servers := map[string]func(t *testing.T) string{
		"miniredis":    func(t *testing.T) string { return miniredis.RunT(t).Addr() },
		"redis-server": func(t *testing.T) string { return redistest.Start(t).Addr },
	}
	for what, start := range servers {
		t.Run(what, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: start(t)})
			t.Cleanup(func() { c.Close() })
			var b backend.Backend = goredis.New(c)
			s, err := primitives.NewSemaphore(clienttest.For(t, b), "s", 2)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.AcquireN(context.Background(), 3)
			if !errors.Is(err, latchkit.ErrInvalid) {
				t.Fatalf("AcquireN(3) of 2: %v, want ErrInvalid", err)
			}
			for _, bad := range []string{"LATCHKIT_INVALID", "user_script", "script:", "@"} {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("AcquireN(3) of 2: the error shows %q: %v", bad, err)
				}
			}
			if !strings.Contains(err.Error(), "3 permits") || !strings.Contains(err.Error(), "limit 2") {
				t.Errorf("AcquireN(3) of 2: %v, want it to say 3 permits and the limit 2", err)
			}
		})
	}
}

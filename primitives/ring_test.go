package primitives

import (
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
)

// A go-redis Ring shards keys by hash with neither a Cluster's redirects
// nor pub/sub that follows the keys: a MultiLock over names on two shards
// would run one script on one shard and hold nothing on the other, and
// release messages would not reach waiters. It is refused with ErrInvalid,
// and nothing is written to either shard. (Before: a MultiLock held a and
// b on a's shard, and a TryLock of b, on b's shard, was granted beside it.)
func TestRingRefused(t *testing.T) {
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s1": m1.Addr(), "s2": m2.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	_, plain := newMiniBackend(t)
	b := goredis.New(ring)
	for what, mk := range map[string]func() error{
		"Mutex":          func() error { _, err := NewMutex(b, "a"); return err },
		"ReentrantMutex": func() error { _, err := NewReentrantMutex(b, "a"); return err },
		"FairMutex":      func() error { _, err := NewFairMutex(b, "a"); return err },
		"RWLock":         func() error { _, err := NewRWLock(b, "a"); return err },
		"MultiLock":      func() error { _, err := NewMultiLock(b, []string{"a", "b"}); return err },
		"Semaphore":      func() error { _, err := NewSemaphore(b, "a", 2); return err },
		"FairSemaphore":  func() error { _, err := NewFairSemaphore(b, "a", 2); return err },
		"Redlock":        func() error { _, err := NewRedlock([]backend.Backend{plain, b}, "a"); return err },
	} {
		if err := mk(); !errors.Is(err, latchkit.ErrInvalid) || !strings.Contains(err.Error(), "Ring") {
			t.Errorf("%s over a Ring: %v, want ErrInvalid saying why", what, err)
		}
	}
	if n := len(m1.Keys()) + len(m2.Keys()); n != 0 {
		t.Errorf("%d keys written", n)
	}
}

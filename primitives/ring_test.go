package primitives

import (
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/keyspace"
)

// A go-redis Ring shards keys by hash with neither a Cluster's redirects
// nor pub/sub that follows the keys: a MultiLock over names on two shards
// would run one script on one shard and hold nothing on the other, and
// release messages would not reach waiters. NewClient refuses it with
// ErrInvalid saying why, and nothing is written to either shard. (Before:
// a MultiLock held a and b on a's shard, and a TryLock of b, on b's shard,
// was granted beside it.)
func TestRingRefused(t *testing.T) {
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s1": m1.Addr(), "s2": m2.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	c, err := NewClient(goredis.New(ring))
	if !errors.Is(err, latchkit.ErrInvalid) || !strings.Contains(err.Error(), "Ring") || c != nil {
		t.Errorf("NewClient over a Ring: %v, %v; want no client and ErrInvalid saying why", c, err)
	}
	if n := len(keyspace.WithoutClientRecords(m1.Keys())) + len(keyspace.WithoutClientRecords(m2.Keys())); n != 0 {
		t.Errorf("%d keys written", n)
	}
}

// Every constructor refuses a nil Client (ErrInvalid, saying so), and a
// Redlock refuses a nil one among its clients.
func TestNilClientRefused(t *testing.T) {
	_, plain := newMiniBackend(t)
	for what, mk := range map[string]func() error{
		"Mutex":          func() error { _, err := NewMutex(nil, "a"); return err },
		"ReentrantMutex": func() error { _, err := NewReentrantMutex(nil, "a"); return err },
		"FairMutex":      func() error { _, err := NewFairMutex(nil, "a"); return err },
		"RWLock":         func() error { _, err := NewRWLock(nil, "a"); return err },
		"MultiLock":      func() error { _, err := NewMultiLock(nil, []string{"a", "b"}); return err },
		"Semaphore":      func() error { _, err := NewSemaphore(nil, "a", 2); return err },
		"FairSemaphore":  func() error { _, err := NewFairSemaphore(nil, "a", 2); return err },
		"Latch":          func() error { _, err := NewLatch(nil, "a"); return err },
		"Election":       func() error { _, err := NewElection(nil, "a"); return err },
		"Redlock":        func() error { _, err := NewRedlock([]*Client{testClient(t, plain), nil}, "a"); return err },
	} {
		if err := mk(); !errors.Is(err, latchkit.ErrInvalid) || !strings.Contains(err.Error(), "nil client") {
			t.Errorf("%s with a nil client: %v, want ErrInvalid saying why", what, err)
		}
	}
}

package primitives

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
)

// evalOnly hides every optional interface of a backend: a third-party
// driver that implements only backend.Backend.
type evalOnly struct{ backend.Backend }

// A backend that cannot send WAIT on the script's connection makes
// WithReplicaAck fail in the constructor, for every primitive, and so does
// a Redlock (whose quorum is its replication); nothing is written.
func TestReplicaAckNeedsCapability(t *testing.T) {
	m, b := newMiniBackend(t)
	plain := evalOnly{b}
	ack := WithReplicaAck(1, 50*time.Millisecond)
	ctors := map[string]func() error{
		"mutex": func() error { _, err := NewMutex(testClient(t, plain), "n", ack); return err },
		"reentrant": func() error {
			_, err := NewReentrantMutex(testClient(t, plain), "n", ack)
			return err
		},
		"rwlock":    func() error { _, err := NewRWLock(testClient(t, plain), "n", ack); return err },
		"semaphore": func() error { _, err := NewSemaphore(testClient(t, plain), "n", 2, ack); return err },
		"fair":      func() error { _, err := NewFairSemaphore(testClient(t, plain), "n", 2, ack); return err },
		"fairmutex": func() error { _, err := NewFairMutex(testClient(t, plain), "n", ack); return err },
		"multilock": func() error { _, err := NewMultiLock(testClient(t, plain), []string{"a", "b"}, ack); return err },
	}
	for what, ctor := range ctors {
		if err := ctor(); !errors.Is(err, latchkit.ErrInvalid) {
			t.Errorf("%s with WithReplicaAck on a backend without ReplicaAcker: %v, want ErrInvalid", what, err)
		}
	}
	if keys := keyspace.WithoutClientRecords(m.Keys()); len(keys) != 0 {
		t.Errorf("refused constructors wrote %v", keys)
	}
}

package primitives

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// The Semaphore's scripts as the backend runs them (semaphore.go loads
// them through package kit, whose Script hides them): the same source, so
// the same hash.
var (
	semAcquireScript = loadScript("sem_acquire")
	semReleaseScript = loadScript("sem_release")
	semTTLScript     = loadScript("sem_ttl")
)

// unsentRelease is a Backend whose first lease release (sem_release
// without the give-back flag) fails as rueidis fails a call whose
// ConnWriteTimeout (its deadline for a call without one, 500 ms) passed
// while the process was starved: an i/o timeout, the release not sent.
type unsentRelease struct {
	backend.Backend
	failed atomic.Bool
}

func (u *unsentRelease) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	if s.Hash() == semReleaseScript.Hash() && len(args) == 3 && args[2] == "" && u.failed.CompareAndSwap(false, true) {
		return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("write tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout")}
	}
	return u.Backend.Eval(ctx, s, keys, args)
}

// A Release that fails with its outcome unknown (Redis not reached in
// time) is retried in the background: the permit is free soon after,
// not left held for the lease's TTL with nobody holding it (issue 28,
// finding 9: a ghost permit under a starved CPU, where rueidis timed out a
// Release made with context.Background() after 500 ms).
func TestReleaseNotSentIsRetried(t *testing.T) {
	_, mb := newMiniBackend(t)
	b := &unsentRelease{Backend: mb}
	s, err := NewSemaphore(testClient(t, b), "ghost", 2, WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("release: %v, want the i/o timeout", err)
	}
	check, err := NewSemaphore(testClient(t, mb), "ghost", 2, WithTTL(time.Second), WithAutoExtend(false))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, err := mb.Eval(ctx, semTTLScript, []string{check.(*semaphore).s.Key("holders")}, []string{l.Token()})
		if err != nil {
			t.Fatal(err)
		}
		if v == int64(-3) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("1 s after a Release that was not sent, its permit is still held (%v ms left): a ghost nobody holds or renews", v)
		}
	}
	// Both permits are free, and a Release of the lease again says it
	// was released.
	for i := 0; i < 2; i++ {
		l, err := check.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("permit %d: %v", i+1, err)
		}
		defer l.Release(ctx)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release again: %v, want nil (released)", err)
	}
}

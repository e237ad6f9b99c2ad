package primitives

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// A Release that some holding instances do not answer in time has an
// unknown outcome, not a lost lease: 5 instances, the lock held on 1-3
// (4 and 5 are someone else's), instance 3 hung at the release. Two say
// "released", two say "not mine", one is silent: the silent one may still
// hold it, so no quorum is known to have lost it. A retry once it answers
// succeeds.
func TestRedlockReleaseWithSilentHolderIsNotLost(t *testing.T) {
	var bs []backend.Backend
	var hung *hangs
	for i := range 5 {
		m, b := newMiniBackend(t)
		if i >= 3 {
			m.Set(KeyBase(DefaultPrefix, "r"), "someone else")
		}
		if i == 2 {
			hung = newHangs(b)
			t.Cleanup(hung.resume)
			b = hung
		}
		bs = append(bs, b)
	}
	rl, err := NewRedlock(bs, "r", WithAutoExtend(false), WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := rl.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hung.stop("")
	err = l.Release(ctx)
	if err == nil || errors.Is(err, latchkit.ErrLeaseLost) {
		t.Fatalf("Release with a holding instance silent: %v, want an unknown outcome (not ErrLeaseLost)", err)
	}
	hung.resume()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("retried Release once every instance answers: %v", err)
	}
}

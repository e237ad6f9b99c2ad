package primitives

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

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
			m.Set(keyspace.KeyBase(kit.DefaultPrefix, "r"), "someone else")
			m.SetTTL(keyspace.KeyBase(kit.DefaultPrefix, "r"), time.Minute) // as latchkit writes a lock: one without expiry is refused
		}
		if i == 2 {
			hung = newHangs(b)
			t.Cleanup(hung.resume)
			b = hung
		}
		bs = append(bs, b)
	}
	rl, err := NewRedlock(testClients(t, bs), "r", WithAutoExtend(false), WithTTL(10*time.Second))
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

// holderOf is the token of a Mutex-layout lock's value.
func holderOf(v string) string {
	tok, _ := LockHolder(v)
	return tok
}

// flakyRaise fails the first n fence raises it sees as an unreachable
// instance would (a per-instance timeout on a busy machine).
type flakyRaise struct {
	backend.Backend
	n, seen atomic.Int32
}

func (f *flakyRaise) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	if s == fenceRaise && f.seen.Add(1) <= f.n.Load() {
		return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("injected: i/o timeout")}
	}
	return f.Backend.Eval(ctx, s, keys, args)
}

// An attempt that a quorum granted but whose fence could not be raised on
// a quorum (the raises timed out) is a failed attempt like one that could
// not reach a quorum: a waiting Lock tries again, rather than returning
// the error with its deadline far away. (Seen in TestRedlockMutualExclusion
// on a loaded machine: "fence ... reached 1 instances, quorum 3: not
// acquired" from a Lock with a minute left.) Three instances: the first
// counts far ahead, so the other two must be raised; their first raises
// fail.
func TestRedlockLockRetriesAFailedFenceRaise(t *testing.T) {
	var bs []backend.Backend
	var flaky []*flakyRaise
	for i := range 3 {
		m, b := newMiniBackend(t)
		if i == 0 {
			// A fence kept an hour ahead of the clock: a free marker of
			// the lock's key (see put_lock).
			key := keyspace.KeyBase(kit.DefaultPrefix, "f")
			if err := m.Set(key, fmt.Sprintf("~ %d >", time.Now().Add(time.Hour).UnixMicro())); err != nil {
				t.Fatal(err)
			}
			m.SetTTL(key, 2*time.Hour)
		} else {
			f := &flakyRaise{Backend: b}
			f.n.Store(1)
			flaky = append(flaky, f)
			b = f
		}
		bs = append(bs, b)
	}
	rl, err := NewRedlock(testClients(t, bs), "f", WithAutoExtend(false), WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := rl.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with its fence raises failing once: %v, want a grant on a later attempt", err)
	}
	defer l.Release(ctx)
	for i, f := range flaky {
		if f.seen.Load() < 2 {
			t.Errorf("instance %d: %d raises, want the failed one and another", i+1, f.seen.Load())
		}
	}
	if _, err := rl.TryLock(ctx); !errors.Is(err, latchkit.ErrNotAcquired) {
		t.Errorf("TryLock while held: %v", err)
	}
}

// deadlineOnce answers the first n calls it sees with the context's
// deadline error at once, as a driver does whose call found its (per-
// instance) deadline passed before the context's own timer had run: on a
// starved process the deadline is read off the clock (backend.Wrap)
// before the timer fires.
type deadlineOnce struct {
	backend.Backend
	n, seen atomic.Int32
}

func (d *deadlineOnce) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	if s == mutexAcquire && d.seen.Add(1) <= d.n.Load() {
		return nil, context.DeadlineExceeded
	}
	return d.Backend.Eval(ctx, s, keys, args)
}

// An attempt whose instances answer with a context deadline error while
// the caller's context is live failed by the instances' own timeout: a
// waiting Lock tries again instead of returning the error with its
// deadline far away. (Seen in TestTimelyStarved under -race beside two
// busy processes: a bystander's Lock with 20 s left returned "1 of 3
// instances granted, quorum 2: context deadline exceeded".)
func TestRedlockLockRetriesInstanceDeadlines(t *testing.T) {
	var bs []backend.Backend
	for i := range 3 {
		_, b := newMiniBackend(t)
		if i > 0 {
			d := &deadlineOnce{Backend: b}
			d.n.Store(1)
			b = d
		}
		bs = append(bs, b)
	}
	rl, err := NewRedlock(testClients(t, bs), "d", WithAutoExtend(false), WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := rl.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock whose instances' first calls hit their own deadline: %v, want a grant on a later attempt", err)
	}
	l.Release(ctx)
}

// countRaises counts the fence raises sent to one instance.
type countRaises struct {
	backend.Backend
	n atomic.Int32
}

func (c *countRaises) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	if s == fenceRaise {
		c.n.Add(1)
	}
	return c.Backend.Eval(ctx, s, keys, args)
}

// An uncontended Redlock grant costs one round trip to each instance: the
// attempt proposes a fence above every counter and clock it can expect
// (its own clock, ahead by fenceLead), every instance grants that same
// fence, and no instance needs raising. Instances whose counters are
// ahead of the proposal are still raised (TestRedlockLockRetriesAFailedFenceRaise),
// and fences still increase from one grant to the next.
func TestRedlockUncontendedGrantRaisesNoFence(t *testing.T) {
	var bs []backend.Backend
	var counts []*countRaises
	for range 5 {
		_, b := newMiniBackend(t)
		c := &countRaises{Backend: b}
		counts = append(counts, c)
		bs = append(bs, c)
	}
	rl, err := NewRedlock(testClients(t, bs), "u", WithAutoExtend(false), WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last int64
	for i := range 20 {
		l, err := rl.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("grant %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range counts {
		if n := c.n.Load(); n != 0 {
			t.Errorf("instance %d: %d fence raises over 20 uncontended grants, want 0", i+1, n)
		}
	}
}

// A Redlock's waiters listen for release messages on the first instance
// only (see NewRedlock), so a release, a failed attempt's release and a
// give-back publish there and nowhere else: on the other instances the
// PUBLISH would be work nobody hears. Counted by a subscriber on each
// instance's release channel.
func TestRedlockPublishesOnlyOnTheFirstInstance(t *testing.T) {
	const n = 5
	var bs []backend.Backend
	var minis []*miniredis.Miniredis
	for range n {
		m, b := newMiniBackend(t)
		minis = append(minis, m)
		bs = append(bs, b)
	}
	ml, err := NewRedlock(testClients(t, bs), "p", WithAutoExtend(false), WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rl := ml.(*redlock)
	ctx := context.Background()
	var heard [n]atomic.Int32
	for i, m := range minis {
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		sub := c.Subscribe(ctx, rl.m.channel)
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		ch := sub.Channel()
		go func() {
			for range ch {
				heard[i].Add(1)
			}
		}()
		t.Cleanup(func() { sub.Close() })
	}
	// Each step waits for its message before the next writes the lock
	// key: a Release returns once a quorum answered, and the first
	// instance's release may still be on its way (it then finds the next
	// step's token and publishes nothing: 40 of 300 runs under -race
	// beside busy processes, before the test waited).
	await := func(what string, want int32) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for heard[0].Load() < want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := heard[0].Load(); got != want {
			t.Fatalf("first instance: %d release messages after %s, want %d", got, what, want)
		}
	}
	// A release.
	l, err := rl.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	await("a release", 1)
	// A failed attempt's release, and a give-back, of a token that holds.
	for i, give := range []func(string){
		func(tok string) { rl.releaseAll(ctx, tok) },
		func(tok string) {
			if err := rl.giveBack(ctx, tok); err != nil {
				t.Fatal(err)
			}
		},
	} {
		tok := kit.NewToken()
		for _, m := range minis {
			m.Set(rl.m.keys[0], tok)
		}
		give(tok)
		await([]string{"a failed attempt's release", "a give-back"}[i], int32(2+i))
	}
	time.Sleep(100 * time.Millisecond) // room for a message on the others
	if got := heard[0].Load(); got != 3 {
		t.Errorf("first instance: %d release messages, want 3 (release, failed attempt's release, give-back)", got)
	}
	for i := 1; i < n; i++ {
		if got := heard[i].Load(); got != 0 {
			t.Errorf("instance %d: %d release messages nobody listens for, want 0", i+1, got)
		}
	}
}

// slowEval delays every Eval of one instance by d before sending it, as a
// farther instance does (another zone); a call whose context ends during
// the delay is not sent.
type slowEval struct {
	backend.Backend
	d time.Duration
}

func (s *slowEval) Eval(ctx context.Context, sc *backend.Script, keys, args []string) (backend.Value, error) {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Backend.Eval(ctx, sc, keys, args)
}

// A renewal is decided by the quorum's answers (a hung instance holds up
// nobody), but the slowest instance must still be extended: were its call
// dropped once the quorum answered, its key would run out and the lease
// would live on a bare quorum, lost as soon as one more instance hangs.
// Three instances, the third 30 ms slower than the others, a lease of
// 500 ms renewed for 5 TTLs: the third still holds it.
func TestRedlockRenewalExtendsTheSlowestInstance(t *testing.T) {
	var bs []backend.Backend
	var minis []*miniredis.Miniredis
	for i := range 3 {
		m, b := newMiniBackend(t)
		minis = append(minis, m)
		if i == 2 {
			b = &slowEval{Backend: b, d: 30 * time.Millisecond}
		}
		bs = append(bs, b)
	}
	ml, err := NewRedlock(testClients(t, bs), "slow", WithTTL(500*time.Millisecond), WithInstanceTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rl := ml.(*redlock)
	ctx := context.Background()
	l, err := rl.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	key := rl.m.keys[0]
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, m := range minis {
			m.FastForward(20 * time.Millisecond) // miniredis's keys expire only when told time passed
		}
		if l.Context().Err() != nil {
			t.Fatalf("lease lost while every instance answers: %v", context.Cause(l.Context()))
		}
		if v, err := minis[2].Get(key); err != nil || holderOf(v) != l.(interface{ Token() string }).Token() {
			t.Fatalf("the slowest instance no longer holds the lease (%q, %v): its extensions were dropped", v, err)
		}
	}
}

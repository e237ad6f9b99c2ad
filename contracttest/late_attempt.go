package contracttest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// stuck holds back the next script: the call fails when its context ends,
// and the script reaches the server only when run is closed (a command
// stuck in a socket behind a paused server, or retransmitted late).
type stuck struct {
	backend.Backend
	armed atomic.Bool
	run   chan struct{}
	ran   chan error
}

// Cluster passes on what the wrapped backend says.
func (s *stuck) Cluster() bool { return backend.IsCluster(s.Backend) }

func (s *stuck) Eval(ctx context.Context, sc *backend.Script, keys, args []string) (backend.Value, error) {
	if !keyspace.OfPrimitive(keys) || !s.armed.CompareAndSwap(true, false) {
		return s.Backend.Eval(ctx, sc, keys, args)
	}
	go func() {
		<-s.run
		_, err := s.Backend.Eval(context.Background(), sc, keys, args)
		s.ran <- err
	}()
	<-ctx.Done()
	return nil, &backend.Error{Class: ctx.Err(), Cause: errors.New("injected: i/o timeout")}
}

// testLateAttemptRefused: an acquisition gives up while its attempt is
// stuck on the way to the server; the attempt reaches the server only after
// the give-back. The server refuses it (the token was remembered as given
// back): no grant is left that nobody holds.
func testLateAttemptRefused(t *testing.T, h Harness) {
	for _, e := range exclusives {
		for _, try := range []bool{false, true} {
			name := e.name + "/Lock"
			if try {
				name = e.name + "/TryLock"
			}
			t.Run(name, func(t *testing.T) {
				p := prefix(t)
				ctx := ctxT(t, 20*time.Second)
				giveUpThenArrive(t, ctx, h, e, p, try)
				rivalGets(t, ctx, h, e, p, "after a late copy of an attempt whose acquisition gave up", "the late attempt was granted")
			})
		}
	}
}

// testLateAttemptBehindHolder: a waiting acquisition gives up while its
// first attempt is stuck on the way to the server, and the attempt reaches
// the server, after the give-back, while the primitive is held. It must
// not queue there: a place nobody waits in would be handed the primitive
// at the holder's release, and everyone else would wait for it until its
// waiter timeout.
func testLateAttemptBehindHolder(t *testing.T, h Harness) {
	election := exclusive{"Election", func(c *primitives.Client, p string) (lock, try func(context.Context) (latchkit.Lease, error)) {
		e, _ := primitives.NewElection(c, "g", primitives.WithPrefix(p))
		return func(ctx context.Context) (latchkit.Lease, error) { return e.Campaign(ctx, "v") },
			func(ctx context.Context) (latchkit.Lease, error) { return e.TryCampaign(ctx, "v") }
	}}
	for _, e := range append(exclusives[:len(exclusives):len(exclusives)], election) {
		t.Run(e.name, func(t *testing.T) {
			p := prefix(t)
			ctx := ctxT(t, 20*time.Second)
			holder := e.rival(clienttest.For(t, h.NewClient(t).Backend), p)
			hl, err := holder(ctx)
			if err != nil {
				t.Fatal(err)
			}
			giveUpThenArrive(t, ctx, h, e, p, false)
			if err := hl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			rivalGets(t, ctx, h, e, p, "after the holder released", "the late attempt of an acquisition that gave up took a place in the queue")
		})
	}
}

// giveUpThenArrive makes an acquisition of e (a Try, or a waiting one)
// whose first attempt is stuck on the way to the server until the
// acquisition has given up, then lets that attempt reach the server and
// waits for it to have run.
func giveUpThenArrive(t *testing.T, ctx context.Context, h Harness, e exclusive, p string, try bool) {
	t.Helper()
	s := &stuck{Backend: h.NewClient(t).Backend, run: make(chan struct{}), ran: make(chan error, 1)}
	lock, tryLock := e.open(clienttest.For(t, s), p)
	if try {
		lock = tryLock
	}
	s.armed.Store(true)
	lctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := lock(lctx)
	cancel()
	if err == nil {
		t.Fatal("granted although its attempt never reached the server")
	}
	close(s.run) // the attempt reaches the server now, after the give-back
	if err := <-s.ran; err != nil && !errors.Is(err, latchkit.ErrInvalid) {
		t.Logf("the late attempt: %v", err)
	}
}

// rivalGets fails t unless another client is granted what e's holder
// would hold, at once (a Try): what happened before (what says) left it
// free; why is what a refusal means.
func rivalGets(t *testing.T, ctx context.Context, h Harness, e exclusive, p, what, why string) {
	t.Helper()
	l, err := e.rival(clienttest.For(t, h.NewClient(t).Backend), p)(ctx)
	if err != nil {
		t.Fatalf("%s, another client: %v: %s", what, err, why)
	}
	l.Release(ctx)
}

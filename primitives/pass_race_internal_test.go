package primitives

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/testrig/lane"
)

// passFault is how passRacer fails the pass of the unacknowledged grant,
// as an unreachable or slow Redis would.
type passFault int

const (
	passUnsent   passFault = iota // not sent: ErrUnavailable
	passLost                      // run, its reply lost: ErrUnavailable
	passNoAnswer                  // no reply within the call's context (abandoned), run later
)

func (f passFault) String() string {
	return [...]string{"unsent", "reply lost", "no reply in time"}[f]
}

// passRacer is a backend.ReplicaAcker over a real server whose replicas
// are the test's: every script runs on the server as it is, WAIT's count
// is made up. The first grant is not acknowledged (0 replicas), every
// later one is. The first Eval after that grant is its pass (see passOn),
// which fails as fault says. A late run of the pass (passNoAnswer's, and
// every call of the same script with the same arguments made again: the
// background retry of the pass, see lease.release) waits until gate is
// opened (the test opens it once the acquisition has returned), then
// runs; landed is closed once one has run.
type passRacer struct {
	backend.Backend
	fault passFault

	mu     sync.Mutex
	grants int
	pass   *evalCopy // the failed pass
	lands  int       // late runs of the pass
	gate   chan struct{}
	landed chan struct{}
}

func newPassRacer(b backend.Backend, fault passFault) *passRacer {
	return &passRacer{Backend: b, fault: fault, gate: make(chan struct{}), landed: make(chan struct{})}
}

func (p *passRacer) EvalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, _ time.Duration) (backend.Value, int, error) {
	v, err := p.Backend.Eval(ctx, s, keys, args)
	if r, ok := v.([]backend.Value); err != nil || !ok || len(r) == 0 || r[0] != int64(1) {
		return v, replicas, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.grants++
	if p.grants == 1 {
		return v, 0, nil
	}
	return v, replicas, nil
}

func (p *passRacer) Eval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	p.mu.Lock()
	switch {
	case p.grants == 1 && p.pass == nil: // the pass of the unacknowledged grant
		p.pass = &evalCopy{s, slices.Clone(keys), slices.Clone(args)}
		p.mu.Unlock()
		unreachable := &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("read tcp: connection reset by peer (injected)")}
		switch p.fault {
		case passLost:
			if _, err := p.Backend.Eval(ctx, s, keys, args); err != nil {
				return nil, err
			}
		case passNoAnswer:
			go p.land(context.WithoutCancel(ctx), s, keys, args)
			<-ctx.Done()
			return nil, backend.Abandoned(ctx)
		}
		return nil, unreachable
	case p.pass != nil && p.pass.s == s && slices.Equal(p.pass.keys, keys) && slices.Equal(p.pass.args, args):
		p.mu.Unlock()
		return p.land(ctx, s, keys, args) // a retry of the pass
	}
	p.mu.Unlock()
	return p.Backend.Eval(ctx, s, keys, args)
}

// land runs the pass once the gate is open.
func (p *passRacer) land(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	select {
	case <-p.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	v, err := p.Backend.Eval(ctx, s, keys, args)
	p.mu.Lock()
	p.lands++
	if p.lands == 1 {
		close(p.landed)
	}
	p.mu.Unlock()
	return v, err
}

func (p *passRacer) counts() (grants, lands int, passed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grants, p.lands, p.pass != nil
}

// TestReplicaAckUnsurePassNotAfterGrant: with WithReplicaAck, a waiting
// acquisition whose first grant WAIT did not confirm passes the grant on
// (passOn); when that pass fails with an unknown outcome (Redis
// unreachable: unsent, or run with its reply lost; or no reply within the
// pass's budget, the call run later), it may still land later (a call in
// flight, lease.release's background retry). The same
// token must then not be granted to the caller again: a pass landing
// after that grant would free what the caller holds. So either the
// acquisition ends with an error matching ErrNotReplicated and
// ErrUnavailable, leaving nothing held once the background calls are
// done, or the lease it returns is still held in Redis by its token once
// they are done.
func TestReplicaAckUnsurePassNotAfterGrant(t *testing.T) {
	lane.ParallelFast(t)
	onFairServers(t, func(t *testing.T, srv fairServer) {
		for _, k := range passKinds {
			if k.cluster {
				continue // two grants per attempt: passRacer counts one
			}
			for _, fault := range []passFault{passUnsent, passLost, passNoAnswer} {
				how := "/" + fault.String()
				t.Run(k.name+how, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					prefix := "pr:" + k.name + how + ":"
					racer := newPassRacer(srv.b, fault)
					acquire, err := k.open(testClient(t, racer), "n", WithPrefix(prefix), WithTTL(10*time.Second), WithReplicaAck(1, 50*time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
					defer wcancel()
					l, aerr := acquire(wctx)
					close(racer.gate) // the pass may land now
					select {
					case <-racer.landed:
					case <-time.After(2 * time.Second): // it was not retried
					}
					time.Sleep(50 * time.Millisecond) // more landings, a give-back in flight
					grants, lands, passed := racer.counts()
					if !passed {
						t.Fatalf("the unacknowledged grant was not passed on (%d grants; acquisition: %v, %v)", grants, l, aerr)
					}
					hs, err := k.holders(ctx, srv.c, prefix, "n")
					if err != nil {
						t.Fatal(err)
					}
					if aerr != nil {
						t.Logf("acquisition: %v", aerr)
						if !errors.Is(aerr, ErrNotReplicated) || !errors.Is(aerr, backend.ErrUnavailable) || errors.Is(aerr, context.DeadlineExceeded) {
							t.Errorf("acquisition: %v, want an error matching ErrNotReplicated and ErrUnavailable, not DeadlineExceeded", aerr)
						}
						if oe := (*latchkit.OpError)(nil); !errors.As(aerr, &oe) || oe.Op == "release" {
							t.Errorf("acquisition: %v, want the acquisition's OpError, not the pass's release", aerr)
						}
						if len(hs) != 0 {
							t.Errorf("acquisition failed (%v), but held in Redis by %q, want by nobody", aerr, hs)
						}
						return
					}
					defer l.Release(context.Background())
					want := []string{l.Token()}
					if strings.HasPrefix(k.name, "MultiLock") {
						want = append(want, l.Token())
					}
					if !slices.Equal(hs, want) {
						t.Errorf("granted after %d grants; once the failed pass landed (%d times) after the acquisition, held in Redis by %q, want by the lease's token %q", grants, lands, hs, l.Token())
					}
					if _, err := l.TTL(ctx); err != nil {
						t.Errorf("TTL of the granted lease: %v", err)
					}
				})
			}
		}
	})
}

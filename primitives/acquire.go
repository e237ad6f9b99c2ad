package primitives

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// acquisition describes one logical Lock or Acquire of a primitive.
type acquisition struct {
	op    string // "lock" or "acquire", for errors
	kind  latchkit.Kind
	name  string
	chans []string // release channels (read-only, may be shared)
	try   bool
	// attempt makes one attempt for token: a lease, or ErrNotAcquired with
	// req.WaitHint set.
	attempt func(ctx context.Context, req *latchkit.Request, token string) (latchkit.Lease, error)
	// abandon, when set, runs after a waiting acquisition that made
	// attempts gave up: it takes back a place its attempts queued (and
	// passes on what a hand-over gave it meanwhile), rather than let it
	// hold others up until it times out. It must be idempotent: it is
	// retried until it succeeds or a second has passed.
	abandon func(ctx context.Context, token string) error
	// wakeID: the primitive hands itself over to queued waiters and wakes
	// them by wakeID(token).
	wakeID bool
}

// acquire runs a through the primitive's middleware chain with a new
// token: the same token for every attempt, so that an attempt whose reply
// was lost is recognized by the next one.
func (c *config) acquire(ctx context.Context, b backend.Backend, a acquisition) (latchkit.Lease, error) {
	req := &latchkit.Request{
		Name: a.name, Kind: a.kind, TTL: c.ttl, Backend: b,
		Channels: a.chans, Try: a.try, Owner: ownerFrom(ctx),
	}
	token := newToken()
	if a.wakeID && !a.try {
		req.WakeID = wakeID(token)
	}
	var l latchkit.Lease
	var err error
	if a.try && c.builtinOnly() {
		// The built-in middleware pass a Try straight through: one
		// attempt, without building the chain (nor OnAttempt, which only
		// middleware set).
		l, err = a.attempt(ctx, req, token)
	} else {
		l, err = c.chain(func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
			l, err := a.attempt(ctx, req, token)
			if req.OnAttempt != nil {
				req.OnAttempt(req, err)
			}
			return l, err
		})(ctx, req)
	}
	if err != nil {
		if a.abandon != nil && !a.try && req.Attempts > 0 {
			// One try now; while Redis is unreachable, more in the
			// background, so that the caller is not held past its
			// deadline.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			if err := a.abandon(actx, token); errors.Is(err, backend.ErrUnavailable) {
				go func() {
					defer cancel()
					withdraw(actx, token, a.abandon)
				}()
			} else {
				cancel()
			}
		}
		return nil, opErr(a.op, a.kind, a.name, err)
	}
	return l, nil
}

// withdraw retries abandon, after a first try failed on an unreachable
// Redis, until it succeeds, fails for good (anything but an unreachable
// Redis) or ctx ends, pausing a little more each time: a queued place left
// behind would be handed the primitive, which would then wait for a
// confirmation that never comes.
func withdraw(ctx context.Context, token string, abandon func(context.Context, string) error) {
	pause := 5 * time.Millisecond
	for {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := abandon(ctx, token); !errors.Is(err, backend.ErrUnavailable) {
			return
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// scriptAttempt is the attempt of a primitive whose acquire is one script
// over fixed keys, with ARGV the token, then args, then the request's
// annotation, replying {1, fence} or {0, hint ms, holder's annotation}.
func scriptAttempt(b backend.Backend, s *backend.Script, keys, args []string, h holder, cfg *config) func(context.Context, *latchkit.Request, string) (latchkit.Lease, error) {
	return func(ctx context.Context, req *latchkit.Request, token string) (latchkit.Lease, error) {
		req.Attempts++
		start := time.Now()
		argv := make([]string, 0, len(args)+2)
		argv = append(append(append(argv, token), args...), annotation(req))
		v, acks, err := cfg.evalAcquire(ctx, b, s, keys, argv)
		if err != nil {
			return nil, scriptErr(err)
		}
		l, err := grant(ctx, req, v, h, token, start, cfg)
		return cfg.acked(ctx, l, err, acks)
	}
}

// ErrNotReplicated is the error of an attempt whose grant WAIT did not
// confirm on as many replicas as WithReplicaAck asks for. The grant has
// been released (or, if that failed too, expires with its TTL).
var ErrNotReplicated = errors.New("latchkit: grant not acknowledged by enough replicas")

// evalAcquire runs an acquire script: as is, or, with WithReplicaAck,
// followed by WAIT on its connection, returning how many replicas had it.
func (c *config) evalAcquire(ctx context.Context, b backend.Backend, s *backend.Script, keys, args []string) (backend.Value, int, error) {
	if c.ackReplicas == 0 {
		v, err := b.Eval(ctx, s, keys, args)
		return v, 0, err
	}
	return b.(backend.ReplicaAcker).EvalAck(ctx, s, keys, args, c.ackReplicas, c.ackTimeout) // checked by newConfig
}

// acked passes on the outcome of an attempt (l, err) whose script reached
// acks replicas; with WithReplicaAck, a grant that reached too few is
// released and turned into ErrNotReplicated.
func (c *config) acked(ctx context.Context, l latchkit.Lease, err error, acks int) (latchkit.Lease, error) {
	if err != nil || c.ackReplicas == 0 || acks >= c.ackReplicas {
		return l, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	err = fmt.Errorf("%w: WAIT confirmed %d of %d replicas within %v", ErrNotReplicated, acks, c.ackReplicas, c.ackTimeout)
	if rerr := l.Release(rctx); rerr != nil {
		return nil, fmt.Errorf("%w; releasing the grant failed too (it expires with its TTL): %w", err, rerr)
	}
	return nil, fmt.Errorf("%w; the grant was released", err)
}

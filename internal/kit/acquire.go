package kit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// Acquisition describes one logical Lock or Acquire of a primitive.
type Acquisition struct {
	Op string // "lock" or "acquire", for errors
	// Method is the primitive's method without its "Try" ("Lock", "RLock",
	// "Acquire", "Campaign", "Wait"): the Request's Op is it, with "Try"
	// in front for a single attempt.
	Method string
	Kind   latchkit.Kind
	Name   string
	Chans  []string // release channels a waiter listens on (read-only, may be shared)
	Try    bool
	// Attempt makes one attempt: a lease, a *latchkit.HeldError when the
	// primitive is held (a new one each time: the wait loop sets its
	// AtLeast), or another error.
	Attempt func(ctx context.Context, at *Attempt) (latchkit.Lease, error)
	// GiveBack gives back whatever the token may hold or have queued: a
	// grant whose reply was lost or came after the caller gave up, a place
	// in a queue (passing on what a hand-over gave it meanwhile). It must
	// be idempotent: it may run more than once. Nil: nothing to give back
	// (the attempt cleans up after itself).
	GiveBack func(ctx context.Context, token string) error
	// Queues: a waiting attempt may leave a place behind (a queue entry, a
	// ticket, an intent), so a waiting acquisition that gives up always
	// gives back.
	Queues bool
	// WakeID: the primitive hands itself over to queued waiters and wakes
	// them by wakeID(token).
	WakeID bool
	// NoLease: a latch's Wait, which hands out no lease (its Request has
	// no TTL, and a successful attempt returns a nil Lease).
	NoLease bool
	// Handed, when set, makes the lease a hand-over's message granted
	// (details: what followed the waiter's id in it, see pubsub.Target),
	// without another attempt; nil when the message does not prove a
	// grant the waiter can hold on (the next attempt then confirms it).
	Handed func(ctx context.Context, at *Attempt, details string) latchkit.Lease
}

// Attempt is what one attempt of an acquisition knows.
type Attempt struct {
	Token      string // the acquisition's: the same for every attempt
	N          int    // 1 for the first attempt
	Try        bool
	Annotation string // what to store beside a grant ("" for nothing)
	// Reach is the primitive's own progress mark, kept from one attempt to
	// the next: a MultiLock on a Cluster records how many of its names
	// its attempts have touched.
	Reach int
	// The last attempt that found the primitive held and told the fence
	// counter as it stood (a waiting Mutex Lock's): when it began, and
	// the counter. A hand-over with a greater fence ran after it, so no
	// earlier than heldStart.
	heldStart time.Time
	fenceSeen int64
}

// giveBackTimeout bounds the give-back a caller waits for when its
// acquisition ends without a grant: a call that gives up returns at most
// giveBackTimeout after its context ended. The give-back then goes on in the
// background for as long as what it gives back could last (see window), at
// most maxGiveBackWindow.
const (
	GiveBackTimeout   = 100 * time.Millisecond
	maxGiveBackWindow = time.Minute
)

// Window is how long a give-back of the primitive is pursued in the
// background: as long as a grant or a queued place it gives back could
// block others (the TTL, the waiter timeout), and a second more, at most
// maxGiveBackWindow. Its one call waits that long too: against a hung
// server it stays queued behind the stuck attempt it gives back, and runs
// right after it when the server resumes (or, run first, makes the server
// refuse it: the token is remembered as given back).
func (c *Config) Window() time.Duration {
	return min(max(c.TTL, c.WaiterTimeout)+time.Second, maxGiveBackWindow)
}

// Acquire runs one logical acquisition: the user's middleware around the
// wait loop.
func (c *Config) Acquire(ctx context.Context, b backend.Backend, a Acquisition) (latchkit.Lease, error) {
	if err := c.BeginCall(ctx); err != nil {
		return nil, OpErr(a.Op, a.Kind, a.Name, err)
	}
	defer c.End()
	op := a.Method
	if a.Try {
		op = "Try" + op
	}
	req := &latchkit.Request{Name: a.Name, Kind: a.Kind, TTL: c.TTL, Backend: b, Try: a.Try, Op: op, Owner: ownerFrom(ctx), Client: c.Cl.id.Name}
	if a.NoLease {
		req.TTL = 0
	}
	var l latchkit.Lease
	var err error
	if len(c.Middleware) == 0 {
		l, err = c.Wait(ctx, req, &a)
	} else {
		l, err = c.chain(ctx, req, a)
	}
	if err != nil {
		return nil, OpErr(a.Op, a.Kind, a.Name, err)
	}
	return l, nil
}

// chain runs the wait loop of a inside the user's middleware (a copy of a,
// so that the middleware-free path keeps its acquisition on the stack).
// A grant the middleware does not hand to the caller (it panicked, or
// returned an error or no lease after the wait loop granted) is released
// before chain returns or the panic goes on: nobody else could, and
// renewed, it would keep the primitive for as long as the process lives.
func (c *Config) chain(ctx context.Context, req *latchkit.Request, a Acquisition) (l latchkit.Lease, err error) {
	var granted latchkit.Lease
	defer func() {
		if granted == nil {
			return
		}
		if r := recover(); r != nil {
			c.releaseUnclaimed(ctx, granted)
			panic(r)
		}
		if err != nil || l == nil {
			c.releaseUnclaimed(ctx, granted)
		}
	}()
	return latchkit.Chain(func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
		l, err := c.Wait(ctx, req, &a)
		if err == nil {
			granted = l
		}
		return l, err
	}, c.Middleware...)(ctx, req)
}

// releaseUnclaimed releases a grant nobody received, waiting for it no
// longer than a give-back (a release of unknown outcome goes on in the
// background, see lease.Release).
func (c *Config) releaseUnclaimed(ctx context.Context, l latchkit.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), GiveBackTimeout)
	defer cancel()
	_ = l.Release(ctx)
}

// Wait is the wait loop of every primitive: attempt, classify the outcome,
// wait, until an attempt is granted, fails for good, the retry policy gives
// up or ctx ends. Every attempt uses the same token, so that one whose reply
// was lost is recognized by the next. Between attempts that found the
// primitive held it waits for a release message (pubsub.Wake) or the
// holder's remaining TTL, the retry policy's delay as the floor; between
// attempts that could not reach Redis it sleeps for the policy's delay. A
// single attempt (Try) never waits.
//
// When the acquisition ends without a grant, whatever its attempts may
// have left in Redis is given back (see giveUp).
func (c *Config) Wait(ctx context.Context, req *latchkit.Request, a *Acquisition) (latchkit.Lease, error) {
	at := &Attempt{Token: c.NewToken(), Try: a.Try, Annotation: annotation(req.Annotation)}
	var (
		policy  backoff.BackOff
		wake    *pubsub.Wake
		unsure  bool  // an attempt's outcome is unknown: it may have been granted
		found   bool  // an attempt found the primitive held: a waiting one may have queued
		refused error // the last attempt refused for a reason to wait on (held, not replicated)
		// unreached is the error of the last attempt that could not reach
		// Redis (its context still live) since an attempt last did: what
		// the connection said (refused, reset, timed out).
		unreached error
	)
	if !a.Try && len(a.Chans) > 0 {
		id := ""
		if a.WakeID {
			id = wakeID(at.Token)
		}
		wake = pubsub.NewWake(c.Cl.Hub(), id, a.Chans)
		defer wake.Close()
	}
	bound := false // ctx ends at the Client's Close too, once the loop waits
	for {
		at.N++
		l, err := a.Attempt(ctx, at)
		if err == nil && bornLost(l) {
			// Granted, but the reply came after the lease's deadline by
			// this process's clock (Redis, or this process, stalled past
			// the TTL): its Context has ended already. It is dropped, not
			// released: the next attempt, with the same token, finds the
			// grant if the server still holds it and renews it, or takes
			// the primitive anew; an acquisition that ends here gives it
			// back.
			l, err = nil, errBornLost
		}
		var held *latchkit.HeldError
		isHeld := err != nil && errors.As(err, &held)
		if isHeld && held.WaitHint == c.heartbeat() {
			held.AtLeast = true // the script's heartbeat, not the holder's time
		}
		if req.OnAttempt != nil {
			req.OnAttempt(at.N, err)
		}
		if err == nil {
			return l, nil
		}
		// Unsure: the attempt may have been granted somewhere. A refusal
		// joined with an unreachable server's error (a Redlock's, refused
		// by a quorum while an instance did not answer) leaves that
		// server's outcome unknown too: its late copy may take it.
		unsure = unsure || (!definite(err) && (!isHeld || errors.Is(err, backend.ErrUnavailable)))
		found = found || isHeld
		switch {
		case isHeld || errors.Is(err, latchkit.ErrNotReplicated):
			refused, unreached = err, nil
		case CtxDone(ctx) != nil:
			// The caller's deadline cut this attempt short (a driver may
			// then say no more than the context's error): the error says
			// why the earlier ones did not grant, too.
			err = cutShort(err, refused, unreached)
		case errors.Is(err, backend.ErrUnavailable):
			unreached = err
		}
		if a.Try || CtxDone(ctx) != nil || !retryable(err, isHeld) {
			return nil, c.giveUp(ctx, a, at, unsure, found, err)
		}
		if policy == nil {
			policy = c.Retry()
		}
		if !bound {
			// Close withdraws a waiting call: it gives back what its
			// attempts queued and returns an error matching ErrClosed.
			var unbind func()
			ctx, unbind = c.Bind(ctx)
			defer unbind()
			bound = true
		}
		d := policy.NextBackOff()
		if d == backoff.Stop {
			return nil, c.giveUp(ctx, a, at, unsure, found, fmt.Errorf("gave up after %s: %w", Count(at.N, "attempt", "attempts"), err))
		}
		var werr error
		switch {
		case isHeld && wake != nil:
			werr = wake.Wait(ctx, held.WaitHint, d)
			if werr == nil && a.Handed != nil {
				if details := wake.Handed(); details != "" {
					if l := a.Handed(ctx, at, details); l != nil {
						return l, nil // granted by the release that woke it
					}
				}
			}
		case isHeld && held.WaitHint > 0:
			werr = pubsub.Sleep(ctx, min(d, held.WaitHint))
		default: // no release to wait for: Redis was not reached
			werr = pubsub.Sleep(ctx, d)
		}
		if werr != nil {
			if Withdrawn(ctx) {
				err = fmt.Errorf("after %s: %w", Count(at.N, "attempt", "attempts"), err)
			} else {
				err = fmt.Errorf("stopped waiting after %s: %w (last attempt: %w)", Count(at.N, "attempt", "attempts"), werr, err)
			}
			return nil, c.giveUp(ctx, a, at, unsure, found, err)
		}
	}
}

// errBornLost is the error of an attempt whose grant's reply came after
// the lease's deadline (see Config.Wait): an unknown outcome, as when
// Redis could not be reached in time.
var errBornLost = &backend.Error{Class: backend.ErrUnavailable,
	Cause: errors.New("the grant's reply came after its lease's ttl had run out by this process's clock: Redis or this process stalled")}

// bornLost reports whether l, just granted, has ended already (by its
// deadline, since nothing else has seen it yet), and if so drops it: its
// Context ends, its renewals stop, nothing is logged or released.
func bornLost(l latchkit.Lease) bool {
	c, ok := l.(interface{ core() *Lease }) // a *Lease, or a primitive's type around one
	if !ok {
		return false
	}
	kl := c.core()
	if time.Now().Before(kl.Deadline()) {
		return false
	}
	kl.end(errBornLost)
	return true
}

// heartbeat is the longest wait hint the acquire scripts give a waiting
// attempt, which keeps its place in the primitive's queue by coming back
// that often (and a FairMutex's or FairSemaphore's single attempt too): a
// third of the waiter timeout, in whole milliseconds, at least one, as the
// scripts reckon it (heartbeat in lua/prelude.lua). A script that cuts a hint to
// it gives exactly this, so a hint of exactly this may be less than the
// holder's remaining time, never more: the wait loop marks it
// (latchkit.HeldError.AtLeast), so that the error does not say the
// primitive is held for up to its waiter's heartbeat. Any other hint is
// left as the script measured it.
func (c *Config) heartbeat() time.Duration {
	return time.Duration(max(c.WaiterTimeout.Milliseconds()/3, 1)) * time.Millisecond
}

// cutShort is the error of an attempt the caller's deadline cut short
// (err), saying why the attempts before it did not grant: the last one
// refused (held, not replicated), and, when attempts since could not
// reach Redis, the last of those, so that the error matches
// ErrUnavailable and names what the connection said.
func cutShort(err, refused, unreached error) error {
	if errors.Is(err, backend.ErrUnavailable) {
		unreached = nil // the cut attempt's error says it (go-redis's last dial)
	}
	switch {
	case refused != nil && unreached != nil:
		return fmt.Errorf("%w (an earlier attempt: %w; a later one could not reach Redis: %w)", err, refused, unreached)
	case refused != nil:
		return fmt.Errorf("%w (an earlier attempt: %w)", err, refused)
	case unreached != nil:
		return fmt.Errorf("%w (an earlier attempt: %w)", err, unreached)
	}
	return err
}

// retryable reports whether a waiting acquisition makes another attempt
// after err: the primitive was held, Redis could not be reached (trying
// again is safe: an attempt that did get through finds its own token and
// counts as granted), or a grant was not acknowledged by enough replicas
// (WithReplicaAck: a replica may acknowledge the next one, as it does once
// it has caught up or the machine is less busy; like an unreachable Redis,
// a master without replicas holds a Lock up until its context ends),
// unless passing that grant on had an unknown outcome (errPassUnsure, see
// acked): the pass may still free what the same token is granted next.
func retryable(err error, held bool) bool {
	if errors.Is(err, errPassUnsure) {
		return false
	}
	return held || errors.Is(err, backend.ErrUnavailable) || errors.Is(err, latchkit.ErrNotReplicated)
}

// definite reports whether a failed attempt's error proves that it holds
// nothing: the script refused before its first write (a bad argument, a
// key of the wrong type: latchkit.ErrInvalid). Every script keeps that
// true: it checks the keys it touches before writing (lua/prelude.lua),
// undoes what it wrote when a command it could not check first fails, and
// publishes with redis.pcall. Any other error leaves the outcome unknown:
// Redis unreachable, the context ended mid-call, an unexpected reply, and
// any other error reply, which may be the server's refusal of a command
// after the script wrote (an ACL without that command, a script error):
// what the token may hold is given back.
func definite(err error) bool {
	return errors.Is(err, latchkit.ErrInvalid)
}

// CtxDone is ctx's error, or context.DeadlineExceeded once its deadline
// has passed even if its timer has not fired yet.
func CtxDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

package kit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// Acquisition describes one logical Lock or Acquire of a primitive.
type Acquisition struct {
	Op    string // "lock" or "acquire", for errors
	Kind  latchkit.Kind
	Name  string
	Chans []string // release channels a waiter listens on (read-only, may be shared)
	Try   bool
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
	if err := c.Begin(); err != nil {
		return nil, OpErr(a.Op, a.Kind, a.Name, err)
	}
	defer c.End()
	req := &latchkit.Request{Name: a.Name, Kind: a.Kind, TTL: c.TTL, Backend: b, Try: a.Try, Owner: ownerFrom(ctx)}
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
	at := &Attempt{Token: NewToken(), Try: a.Try, Annotation: annotation(req.Annotation)}
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
			return nil, c.giveUp(ctx, a, at, unsure, found, fmt.Errorf("gave up after %d attempts: %w", at.N, err))
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
			return nil, c.giveUp(ctx, a, at, unsure, found, fmt.Errorf("stopped waiting after %d attempts: %w (last attempt: %w)", at.N, werr, err))
		}
	}
}

// heartbeat is the longest wait hint the acquire scripts give a waiting
// attempt, which keeps its place in the primitive's queue by coming back
// that often (and a FairMutex's or FairSemaphore's single attempt too): a
// third of the waiter timeout, in whole milliseconds, at least one, as the
// scripts reckon it (mutex_attempt in lua/prelude.lua, sem_acquire,
// fair_acquire, rw_write, multi_acquire). A script that cuts a hint to
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

// giveUp ends an acquisition that was not granted, returning err. When an
// attempt's outcome was unknown (unsure) or a waiting attempt may have
// queued (one found the primitive held), whatever the token may hold or
// have queued is given back first (an acquisition whose every attempt was
// refused outright, by bad input, left nothing and writes nothing):
// a grant nobody knows of would otherwise keep the primitive taken for its
// whole TTL (nothing renews it), and a queued place would be handed the
// primitive and hold everyone up until it timed out. The give-back is tried
// once, for at most giveBackTimeout; while Redis cannot be reached it is
// retried in the background for the window, so that the caller is not held
// past its deadline by more than giveBackTimeout. When the caller's
// context has ended, the error matches its error too, so that "I gave up"
// can be told from "Redis is down".
func (c *Config) giveUp(ctx context.Context, a *Acquisition, at *Attempt, unsure, held bool, err error) error {
	if a.GiveBack != nil && (unsure || (a.Queues && !a.Try && held)) {
		giveBack(ctx, c.Cl, at.Token, a.GiveBack, c.Window())
	}
	if cerr := CtxDone(ctx); cerr != nil {
		if cause := context.Cause(ctx); cause == ErrClientClosed && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		if done := ctx.Done(); done != nil && ctx.Err() == nil {
			// The deadline has passed and the context's own timer is due:
			// wait for it (briefly), so that a caller that checks ctx.Err()
			// after the call sees it done, as the error says.
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-done:
				cerr = ctx.Err()
			case <-t.C:
			}
			t.Stop()
		}
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
	}
	return err
}

// giveBack runs f for token once, bounded by giveBackTimeout, and, when
// Redis could not be reached, again in the background for window (see
// retryGiveBack).
//
// The budget is for waiting on Redis. A try that returns far past its
// deadline spent it waiting for this process's scheduler (its timer, or the
// driver's goroutine, did not run in time: a starved process), not on
// Redis, and is made once more before returning: left to the background,
// it would return the call while what it gives back is still held. A try
// against a Redis that does not answer ends on time and is not repeated.
func giveBack(ctx context.Context, cl *Client, token string, f func(context.Context, string) error, window time.Duration) {
	for try := 0; ; try++ {
		start := time.Now()
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), GiveBackTimeout)
		err := f(gctx, token)
		cancel()
		if !errors.Is(err, backend.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if try == 0 && time.Since(start) > StarvedGiveBack {
			continue
		}
		cl.Spawn(func(bg context.Context) { RetryGiveBack(bg, token, f, window) })
		return
	}
}

// StarvedGiveBack: a give-back try that took this long, against a budget
// of giveBackTimeout, was held up mostly by the process's scheduler (see
// giveBack). A try against a partitioned server in a CPU-starved process
// ends its budget late by the scheduler's lag, 60-290 ms measured beside
// two busy processes (TestTimelyStarved), and is not tried again there,
// which would double the call's lateness; a stall of several hundred
// milliseconds (570 ms seen) is.
const StarvedGiveBack = 4 * GiveBackTimeout

// RetryGiveBack retries f until it succeeds, fails for good (anything but
// an unreachable Redis) or the window has passed, pausing a little more
// each time. Each try may take the rest of the window: against a hung
// server the give-back waits in its socket, behind the attempt it gives
// back. A server that refuses or resets at once (gone, restarting) is
// tried for a second only: what was stuck in it went with it.
func RetryGiveBack(ctx context.Context, token string, f func(context.Context, string) error, window time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	quick := time.Now().Add(time.Second)
	pause := 5 * time.Millisecond
	for {
		if pubsub.Sleep(ctx, pause) != nil {
			return
		}
		start := time.Now()
		if err := f(ctx, token); !errors.Is(err, backend.ErrUnavailable) {
			return
		}
		if time.Since(start) < GiveBackTimeout && time.Now().After(quick) {
			return
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// ScriptAttempt is the attempt of a primitive whose acquire is one script
// over fixed keys, with ARGV the token, then args, then the annotation and
// the fence counter's retention, replying {1, fence} or {0, hint ms,
// holder's annotation}.
func ScriptAttempt(b backend.Backend, s *backend.Script, keys, args []string, h Holder, kind latchkit.Kind, name string, cfg *Config) func(context.Context, *Attempt) (latchkit.Lease, error) {
	return func(ctx context.Context, at *Attempt) (latchkit.Lease, error) {
		start := time.Now()
		argv := make([]string, 0, len(args)+3)
		argv = append(append(append(argv, at.Token), args...), at.Annotation, cfg.RetArg)
		v, acks, err := cfg.EvalAcquire(ctx, b, s, keys, argv)
		if err != nil {
			return nil, KeyErr(ctx, b, keys, err)
		}
		if !at.Try {
			NoteCounter(at, v, start)
		}
		l, err := Grant(ctx, v, h, kind, name, at.Token, start, cfg)
		return cfg.Acked(ctx, l, err, acks)
	}
}

// NoteCounter keeps, from a waiting attempt's reply that found the
// primitive held (a Mutex's or a FairSemaphore's), the fence counter it
// saw and when the attempt began (see attempt.heldStart).
func NoteCounter(at *Attempt, v backend.Value, start time.Time) {
	a, ok := v.([]backend.Value)
	if !ok || len(a) != 4 || a[0] != int64(0) {
		return
	}
	f, _ := a[3].(string)
	if n, err := strconv.ParseInt(f, 10, 64); err == nil && n > 0 {
		at.heldStart, at.fenceSeen = start, n
	} else {
		at.heldStart, at.fenceSeen = time.Time{}, 0
	}
}

// HandedLease is the lease a hand-over's message grants a waiting
// acquisition of a Mutex or a FairSemaphore (details: "fence hand", see
// hand_over and fair_hand_over in lua/prelude.lua), so that the waiter
// holds on the release's message alone, without an attempt to confirm:
// two requests per hand-over, the waiter's queueing attempt and the
// release. The release ran after the waiter's last attempt, since its
// fence is above the counter that attempt saw (a stale message, from a
// hand-over the attempt already found or outlived, is not), so the server
// holds the lock for the hand-over's time from a moment after that
// attempt began: the lease's deadline is that start plus the hand-over's
// time, less the drift allowance, and the renewer extends it to the TTL
// halfway there. It is nil, and the next attempt confirms the grant as
// before, when the lease would not be what Lock promises: without
// auto-extend (the lease must last its TTL), with WithReplicaAck (the
// grant must be acknowledged), with an annotation to store beside the
// grant (tracing's holder link), or with less than half the hand-over's
// time left (the waiter's process ran late).
func HandedLease(ctx context.Context, at *Attempt, details string, h Holder, kind latchkit.Kind, name string, cfg *Config) latchkit.Lease {
	if at.fenceSeen <= 0 || !cfg.AutoExtend || cfg.AckReplicas > 0 || at.Annotation != "" {
		return nil
	}
	fs, hs, ok := strings.Cut(details, " ")
	if !ok {
		return nil
	}
	fence, err1 := strconv.ParseInt(fs, 10, 64)
	hand, err2 := strconv.ParseInt(hs, 10, 64)
	if err1 != nil || err2 != nil || fence <= at.fenceSeen || hand <= 0 {
		return nil
	}
	d := time.Duration(hand) * time.Millisecond
	deadline := at.heldStart.Add(d - Drift(d))
	if time.Until(deadline) < d/2 {
		return nil
	}
	return newLeaseUntil(ctx, h, kind, name, at.Token, fence, deadline, cfg)
}

// Grant turns an acquire script's {1, fence} or {0, hint ms, holder}
// reply into a lease or a *latchkit.HeldError.
func Grant(ctx context.Context, v backend.Value, h Holder, kind latchkit.Kind, name, token string, start time.Time, cfg *Config) (latchkit.Lease, error) {
	ok, n, holder, err := Pair(v)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, HeldErr(n, holder)
	}
	return NewLease(ctx, h, kind, name, token, n, start, cfg), nil
}

// HeldErr is the error of an attempt told the primitive is held, for up to
// hint ms, by the holder whose annotation is holder.
func HeldErr(hint int64, holder string) *latchkit.HeldError {
	return &latchkit.HeldError{WaitHint: max(time.Duration(hint)*time.Millisecond, 0), Holder: holder}
}

// Passer is a holder that can give up a grant without ending its
// acquisition: what the token holds is freed (handed to the next waiter),
// but the token is not remembered among the name's finished tokens, as a
// release remembers it (see remember in lua/prelude.lua) so that a late
// copy of its attempt is refused. A waiting acquisition whose grant
// WithReplicaAck refused goes on with the same token: its next attempt
// must not be taken for a late copy.
//
// It goes on only once the pass's outcome is known. A pass is keyed by
// the token alone: one that may still run (in flight to a server that
// did not answer, or retried in the background by lease.release) would
// free whatever the token holds when it lands, a later grant of the same
// acquisition too, which the caller would then hold a lease on while
// Redis holds nothing (or another client holds the primitive). So a pass
// of unknown outcome ends the acquisition (errPassUnsure, see acked),
// and the token is given back (giveUp): nothing the token could be
// granted after that is handed to the caller.
type Passer interface {
	Pass(ctx context.Context, token string) (held bool, err error)
}

// passOn gives up l, just granted, for acked: through its holder's pass
// where it has one, else by Release.
func passOn(ctx context.Context, l latchkit.Lease) error {
	if ll, ok := l.(*Lease); ok {
		if p, ok := ll.h.(Passer); ok {
			return ll.release(ctx, p.Pass, ErrReleased)
		}
	}
	return l.Release(ctx)
}

// EvalAcquire runs an acquire script: as is, or, with WithReplicaAck,
// followed by WAIT on its connection, returning how many replicas had it.
func (c *Config) EvalAcquire(ctx context.Context, b backend.Backend, s *backend.Script, keys, args []string) (backend.Value, int, error) {
	if c.AckReplicas == 0 {
		v, err := b.Eval(ctx, s, keys, args)
		return v, 0, err
	}
	return b.(backend.ReplicaAcker).EvalAck(ctx, s, keys, args, c.AckReplicas, c.AckTimeout) // checked by NewConfig
}

// errPassUnsure marks the error of an attempt whose grant, refused by
// WithReplicaAck, could not be passed on for sure (see Passer): the
// acquisition ends with it rather than try again with the same token.
var errPassUnsure = errors.New("passing the grant on failed with an unknown outcome (it may still free the token's next grant), so the acquisition ends")

// Acked passes on the outcome of an attempt (l, err) whose script reached
// acks replicas; with WithReplicaAck, a grant that reached too few is
// passed on (released) and turned into latchkit.ErrNotReplicated. The pass has the
// give-back's budget, past the caller's deadline too. One that fails with
// a known outcome (an error reply: it ran, or will never run) leaves the
// grant to the next attempt, which finds its own token, or to the
// give-back when the acquisition ends (giveUp). One whose outcome is
// unknown (Redis unreachable, or no reply within the budget) may still
// land, after a later grant of the same token too: the error then also
// matches errPassUnsure, which ends the acquisition (see retryable), and
// the pass's cause, as ErrUnavailable (a pass its own budget cut short
// does not match the context errors: the caller's context was live).
func (c *Config) Acked(ctx context.Context, l latchkit.Lease, err error, acks int) (latchkit.Lease, error) {
	if err != nil || c.AckReplicas == 0 || acks >= c.AckReplicas {
		return l, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), GiveBackTimeout)
	defer cancel()
	err = fmt.Errorf("%w: WAIT confirmed %d of %d replicas within %v", latchkit.ErrNotReplicated, acks, c.AckReplicas, c.AckTimeout)
	rerr := passOn(rctx, l)
	if oe, ok := rerr.(*latchkit.OpError); ok {
		rerr = oe.Err // the lease's "release": the caller's op is the acquisition's
	}
	switch {
	case rerr == nil:
		return nil, fmt.Errorf("%w; the grant was released", err)
	case unknownOutcome(rerr):
		if errors.Is(rerr, context.DeadlineExceeded) || errors.Is(rerr, context.Canceled) {
			// The pass's own budget (rctx), not the caller's context.
			rerr = &backend.Error{Class: backend.ErrUnavailable, Cause: fmt.Errorf("no reply within %v: %v", GiveBackTimeout, rerr)}
		}
		return nil, fmt.Errorf("%w; %w: %w", err, errPassUnsure, rerr)
	}
	return nil, fmt.Errorf("%w; releasing the grant failed too (it expires with its TTL): %w", err, rerr)
}

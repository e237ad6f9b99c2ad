package primitives

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/kit"
)

// fenceRaise lifts the fence an instance holds for a grant to the grant's
// fence, so that a quorum holds the fence a Redlock grant hands out.
var fenceRaise = loadScript("fence_raise")

type redlock struct {
	bs      []backend.Backend
	name    string
	cfg     kit.Config
	quorum  int
	timeout time.Duration // per instance and call
	m       *mutex        // keys, scripts and arguments, the same on every instance

	// released are, for a release of unknown outcome (a quorum neither
	// released it nor could no longer hold it), the instances that did
	// release it, by token: its retry counts them, since the instances
	// remember nothing (see Release). Written on that rare path only.
	relMu    sync.Mutex
	released map[string]releasedBy
}

// releasedBy is which instances released a token, and when the last try
// that left its outcome unknown ended.
type releasedBy struct {
	at time.Time
	by []bool
}

// NewRedlock returns a Mutex over N independent Redis instances, a Client
// each (the Redlock algorithm): a grant needs a quorum of N/2+1 and time
// left of its TTL, an extension a quorum too, and losing it ends the
// lease's Context. WithInstanceTimeout bounds each instance's calls. The
// Close of any of its clients releases its leases, and its calls then
// return an error matching latchkit.ErrClosed.
func NewRedlock(clients []*Client, name string, opts ...RedlockOption) (Mutex, error) {
	if len(clients) == 0 {
		return nil, kit.Invalid("new", latchkit.KindRedlock, name, "the list of clients is empty: a Redlock needs independent Redis instances, a Client each")
	}
	cs := make([]*kit.Client, len(clients))
	for i, c := range clients {
		cs[i] = core(c)
	}
	m, err := newMutex(latchkit.KindRedlock, cs[0], name, lockOptions(opts, RedlockOption.redlockOption))
	if err != nil {
		return nil, err
	}
	bs := make([]backend.Backend, len(cs))
	for i, c := range cs {
		if err := kit.CheckClient(c); err != nil {
			return nil, &latchkit.OpError{Op: "new", Kind: latchkit.KindRedlock, Name: name, Err: fmt.Errorf("client %d: %w", i, err)}
		}
		bs[i] = kit.BackendOf(c)
	}
	m.cfg.Cls = cs
	for i, b := range bs {
		for j, o := range bs[:i] {
			if cs[j] == cs[i] {
				return nil, kit.Invalid("new", latchkit.KindRedlock, name, "client %d is given twice: the quorum would count it twice", i)
			}
			if t := reflect.TypeOf(b); t.Comparable() && reflect.TypeOf(o) == t && o == b {
				return nil, kit.Invalid("new", latchkit.KindRedlock, name, "client %d is over the backend of client %d: the quorum would count it twice", i, j)
			}
		}
	}
	timeout := m.cfg.InstanceTimeout
	switch {
	case timeout == 0:
		timeout = defaultInstanceTimeout(m.cfg.TTL)
	case timeout >= m.cfg.TTL:
		return nil, kit.Invalid("new", latchkit.KindRedlock, name, "WithInstanceTimeout(%v) is not below the ttl %v", timeout, m.cfg.TTL)
	}
	return &redlock{bs: slices.Clone(bs), name: name, cfg: m.cfg, quorum: len(bs)/2 + 1, timeout: timeout, m: m}, nil
}

// defaultInstanceTimeout is a Redlock's per-instance timeout when
// WithInstanceTimeout is not given: a twentieth of the TTL, between 5ms and
// 100ms, and at most half the TTL, so that it fits every TTL from MinTTL
// on with room for a grant: an attempt is valid while the TTL less its time
// and the drift allowance is positive.
func defaultInstanceTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/20, 5*time.Millisecond), 100*time.Millisecond, ttl/2)
}

func (r *redlock) Lock(ctx context.Context) (latchkit.Lease, error) { return r.acquire(ctx, false) }

func (r *redlock) TryLock(ctx context.Context) (latchkit.Lease, error) { return r.acquire(ctx, true) }

func (r *redlock) acquire(ctx context.Context, try bool) (latchkit.Lease, error) {
	return r.cfg.Acquire(ctx, r.bs[0], kit.Acquisition{Op: "lock", Method: "Lock", Kind: latchkit.KindRedlock, Name: r.name,
		Chans: r.m.chans, Try: try, Attempt: r.attempt, GiveBack: r.giveBack})
}

// each runs f on every instance in parallel, each call bounded by the
// per-instance timeout, and returns the results in instance order.
func each[T any](ctx context.Context, r *redlock, f func(ctx context.Context, i int, b backend.Backend) (T, error)) ([]T, []error) {
	return eachWithin(ctx, r, r.timeout, f)
}

// opTimeout bounds each instance's call of a release, extend, TTL or
// give-back: unlike an attempt, whose validity the per-instance timeout
// protects, these gain nothing from giving up on a slow instance early
// (one that does not answer leaves the outcome unknown), so they wait
// longer for it, within the caller's context.
func (r *redlock) opTimeout() time.Duration { return max(10*r.timeout, time.Second) }

// eachWithin is each with every call bounded by timeout.
func eachWithin[T any](ctx context.Context, r *redlock, timeout time.Duration, f func(ctx context.Context, i int, b backend.Backend) (T, error)) ([]T, []error) {
	vals := make([]T, len(r.bs))
	errs := make([]error, len(r.bs))
	var wg sync.WaitGroup
	for i, b := range r.bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ictx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			vals[i], errs[i] = f(ictx, i, b)
			errs[i] = instanceErr(ctx, errs[i])
		}()
	}
	wg.Wait()
	return vals, errs
}

// instanceErr classifies the error of one instance's call made under a
// per-instance timeout derived from ctx: a context error while ctx itself
// is live (not ended, its deadline not passed) can only be the instance's
// own timeout: it is slow or unreachable, which a waiting Lock rides out
// (ErrUnavailable), not the caller giving up. The instance's context need
// not be done yet: a driver reads a passed deadline off the clock before
// the context's timer has run, on a starved process.
//
// Its error then no longer matches context.DeadlineExceeded or Canceled:
// they are the caller's to report, and a caller whose context is live
// must not take an instance's timeout for its own deadline.
func instanceErr(ctx context.Context, err error) error {
	if err == nil || kit.CtxDone(ctx) != nil {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &backend.Error{Class: backend.ErrUnavailable, Cause: instanceTimeout{err.Error()}}
	}
	return err
}

// instanceTimeout is the cause of an instance's call cut by its own
// timeout: its text, without the context error it wrapped.
type instanceTimeout struct{ msg string }

func (e instanceTimeout) Error() string {
	return "no answer within the instance timeout (" + e.msg + ")"
}

type vote struct {
	granted bool
	n       int64  // fence when granted, the holder's pttl when not
	holder  string // the holder's annotation, when not granted
}

func (r *redlock) attempt(ctx context.Context, at *kit.Attempt) (latchkit.Lease, error) {
	token := at.Token
	start := time.Now()
	least := strconv.FormatInt(start.Add(fenceLead).UnixMicro(), 10)
	votes, errs := each(ctx, r, func(ctx context.Context, _ int, b backend.Backend) (vote, error) {
		v, err := b.Eval(ctx, mutexAcquire, r.m.keys, []string{token, r.m.ttlArg, at.Annotation, least})
		if err != nil {
			return vote{}, kit.KeyErr(ctx, b, r.m.keys, err)
		}
		ok, n, holder, err := kit.Pair(v)
		return vote{ok, n, holder}, err
	})
	var granted []int
	var fence, hint int64
	var holder string
	for i, v := range votes {
		switch {
		case errs[i] != nil:
		case v.granted:
			granted = append(granted, i)
			fence = max(fence, v.n)
		case v.n > 0 && (hint == 0 || v.n < hint):
			hint, holder = v.n, v.holder
		}
	}
	fail := func(err error) (latchkit.Lease, error) {
		r.releaseAll(ctx, token)
		return nil, err
	}
	for _, err := range errs {
		if errors.Is(err, latchkit.ErrInvalid) {
			return fail(err)
		}
	}
	if len(granted) < r.quorum {
		if countRefused(votes, errs) > 0 {
			// Someone holds it somewhere: wait for a release. Instances
			// that did not answer leave the outcome unknown there: the
			// acquisition gives back when it ends.
			held := error(kit.HeldErr(hint, holder))
			if err := errors.Join(errs...); err != nil {
				held = errors.Join(held, err)
			}
			return fail(held)
		}
		return fail(fmt.Errorf("%d of %d instances granted, quorum %d: %w", len(granted), len(r.bs), r.quorum, errors.Join(errs...)))
	}
	// Make the fence every granting instance's: raise each that counted
	// lower (not only until a quorum has it), so that any later quorum,
	// which shares an instance with this one, meets it even after other
	// instances lost their data.
	raised := 0
	var low []int
	for _, i := range granted {
		if votes[i].n == fence {
			raised++
		} else {
			low = append(low, i)
		}
	}
	if len(low) > 0 {
		arg := []string{token, strconv.FormatInt(fence, 10)}
		keys := r.m.keys[:1] // the lock
		_, rerrs := each(ctx, r, func(ctx context.Context, i int, b backend.Backend) (struct{}, error) {
			if !slices.Contains(low, i) {
				return struct{}{}, errSkip
			}
			_, err := b.Eval(ctx, fenceRaise, keys, arg)
			return struct{}{}, err
		})
		var failed []error
		for _, i := range low {
			if rerrs[i] == nil {
				raised++
			} else {
				failed = append(failed, rerrs[i])
			}
		}
		if raised < r.quorum {
			// The raises did not get through (timeouts, most likely): a
			// failed attempt like one that reached too few instances,
			// which a waiting Lock makes again.
			return fail(fmt.Errorf("fence %d reached %d instances, quorum %d: %w (%w)", fence, raised, r.quorum, latchkit.ErrNotAcquired, errors.Join(failed...)))
		}
	}
	if validity := r.cfg.TTL - time.Since(start) - kit.Drift(r.cfg.TTL); validity <= 0 {
		// Too slow to be of use, not refused: a waiting Lock tries again.
		return fail(fmt.Errorf("the quorum took %v of a %v ttl: %w (%w)", time.Since(start), r.cfg.TTL, latchkit.ErrNotAcquired,
			&backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("instances too slow for the ttl")}))
	}
	return kit.NewLease(ctx, r, latchkit.KindRedlock, r.name, token, fence, start, &r.cfg), nil
}

var errSkip = errors.New("skipped")

// fenceLead is how far ahead of its own clock a Redlock attempt proposes
// its fence (in microseconds, as the instances count): enough to be above
// every instance's clock and counter when the attempt runs there, with
// clocks a little apart and the per-instance timeout (at most 100 ms by
// default) between sending and running, so that every instance grants the
// same fence and none needs raising. An instance whose counter is above
// the proposal anyway (a client whose clock runs ahead took the last
// grant) grants one more than its counter, and the others are raised.
const fenceLead = time.Second

// countRefused counts the instances that answered that someone else holds
// the lock.
func countRefused(votes []vote, errs []error) int {
	n := 0
	for i, v := range votes {
		if errs[i] == nil && !v.granted {
			n++
		}
	}
	return n
}

// channelOf is the release channel the scripts publish on at instance i:
// the first instance's, where waiters listen (see NewRedlock), and none
// ("") elsewhere, where a message would be work nobody hears.
func (r *redlock) channelOf(i int) string {
	if i == 0 {
		return r.m.channel
	}
	return ""
}

// releaseAll passes on token's lock on every instance, after a failed
// attempt: those that did not answer may have granted it. It is a
// give-back that does not end the acquisition (mutex_withdraw without its
// end flag): the token is not remembered among the finished ones, as a
// release would remember it, since the acquisition's next attempt uses
// the same token and must not be refused as a late copy.
func (r *redlock) releaseAll(ctx context.Context, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	each(ctx, r, func(ctx context.Context, i int, b backend.Backend) (struct{}, error) {
		_, err := b.Eval(ctx, mutexWithdraw, r.m.keys, []string{token, r.channelOf(i), r.m.handArg, "", ""})
		return struct{}{}, err
	})
}

// giveBack ends an acquisition without a grant: token is given back on
// every instance and remembered there, so that a late copy of an attempt
// that did not answer in time is refused.
func (r *redlock) giveBack(ctx context.Context, token string) error {
	_, errs := eachWithin(ctx, r, r.opTimeout(), func(ctx context.Context, i int, b backend.Backend) (struct{}, error) {
		_, err := b.Eval(ctx, mutexWithdraw, r.m.keys, []string{token, r.channelOf(i), r.m.handArg, "", "1"})
		return struct{}{}, err
	})
	return errors.Join(errs...)
}

func (r *redlock) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	// The instances not yet heard from when the quorum is decided still get
	// the extension, past the caller's context (see decide): a call
	// dropped there would let the slowest instance's key run out, renewal
	// after renewal, and leave the lease on a bare quorum.
	held, errs := r.decide(ctx, context.WithoutCancel(ctx), r.opTimeout(), func(ctx context.Context, _ int, b backend.Backend) (bool, error) {
		keys, args := r.m.extendCall(token, ttl)
		return kit.Flag(b.Eval(ctx, mutexExtend, keys, args))
	})
	return r.quorumOf(held, errs)
}

func (r *redlock) Release(ctx context.Context, token string) (bool, error) {
	// The first instance's arguments, and the others' (no channel).
	both := [2][]string{{token, r.channelOf(0), r.m.handArg}, {token, r.channelOf(1), r.m.handArg}}
	args := func(i int) []string { return both[min(i, 1)] }
	// The instances not yet heard from when the quorum is decided still get
	// the release, past the caller's context (see decide).
	held, errs := r.decide(ctx, context.WithoutCancel(ctx), r.opTimeout(), func(ctx context.Context, i int, b backend.Backend) (bool, error) {
		return kit.Flag(b.Eval(ctx, mutexRelease, r.m.keys, args(i)))
	})

	// An instance that could not be reached may still hold the lock: it
	// is released there in the background while it cannot be reached (for
	// a while; else its key expires with the TTL), whatever the quorum
	// says, so that it does not block the next grant.
	for i, err := range errs {
		if errors.Is(err, backend.ErrUnavailable) && err != errUndecided {
			b, args := r.bs[i], args(i)
			r.cfg.Cl.Spawn(func(bg context.Context) {
				kit.RetryGiveBack(bg, token, func(ctx context.Context, _ string) error {
					_, err := b.Eval(ctx, mutexRelease, r.m.keys, args)
					return err
				}, r.cfg.Window())
			})
		}
	}
	ok, err := r.quorumOf(held, errs)
	if err != nil {
		// Undecided. On a retry, an instance that released the token on
		// an earlier try answers "not held" now, or not at all: it
		// released it.
		if before := r.releasedBefore(token); before != nil {
			for i, did := range before {
				if did {
					held[i], errs[i] = true, nil
				}
			}
			ok, err = r.quorumOf(held, errs)
		}
	}
	r.noteReleased(token, held, errs, err != nil)
	return ok, err
}

// TTL is the time a quorum still holds it for: the quorum-th longest.
func (r *redlock) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	type left struct {
		d    time.Duration
		held bool
	}
	ls, errs := eachWithin(ctx, r, r.opTimeout(), func(ctx context.Context, _ int, b backend.Backend) (left, error) {
		d, held, err := kit.Remaining(b.Eval(ctx, mutexTTL, r.m.keys[:1], []string{token}))
		return left{d, held}, err
	})
	var ds []time.Duration
	for i, l := range ls {
		if errs[i] == nil && l.held {
			ds = append(ds, l.d)
		}
	}
	if len(ds) >= r.quorum {
		slices.Sort(ds)
		return ds[len(ds)-r.quorum], true, nil
	}
	held := make([]bool, len(ls))
	for i, l := range ls {
		held[i] = l.held
	}
	_, err := r.quorumOf(held, errs)
	return 0, false, err
}

// RenewCall: a Redlock renewal needs a quorum of several backends, which
// is extend's job.
func (r *redlock) RenewCall(string, time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return nil, nil, nil, nil, false
}

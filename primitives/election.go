package primitives

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// Election elects one leader at a time among the processes that campaign
// for its name (etcd's concurrency.Election, Kubernetes' leader election).
// Leadership is a lease: it ends when the leader resigns (Release), or is
// lost (Context ends) before the server could seat anyone else.
type Election interface {
	// Campaign blocks until value leads (or ctx is done) and returns the
	// leadership as a lease: Fence strictly increases from one leadership
	// to the next, Context ends when leadership is lost, Release resigns,
	// and the next campaigner takes over at once (woken, in arrival
	// order). value is what Leader and Observe report: a non-empty string
	// of at most 4096 bytes, else an error matching
	// latchkit.ErrInvalid.
	Campaign(ctx context.Context, value string) (latchkit.Lease, error)
	// TryCampaign makes one attempt: it leads at once if the seat is free
	// (like a Mutex's TryLock, it may take a seat whose leader's lease ran
	// out before a queued campaigner does), and otherwise returns an error matching
	// latchkit.ErrNotAcquired (the annotation of the leader it found, when
	// tracing stored one, is in the *latchkit.HeldError). It never queues.
	TryCampaign(ctx context.Context, value string) (latchkit.Lease, error)
	// Leader returns the current leader, or an error matching ErrNoLeader
	// when the seat is empty.
	Leader(ctx context.Context) (LeaderInfo, error)
	// Observe returns a channel that receives the current leader first,
	// then every change in order (a zero LeaderInfo when the seat falls
	// empty). It may skip changes but never reports a stale leader. It is
	// closed when ctx ends, or when the seat cannot be read for a reason
	// retrying cannot change (Leader then returns that error); at once for
	// a nil ctx.
	Observe(ctx context.Context) <-chan LeaderInfo
	// Run campaigns with value and, while leading, calls fn with the lease
	// and a context that ends with the term (its cause matches
	// latchkit.ErrLeaseLost when leadership was lost); fn must then return.
	// Run resigns, then returns fn's error (or nil) if fn returned while
	// leading, campaigns again if leadership was lost, returns an error
	// matching ctx.Err() once ctx ends, or a campaign error retrying cannot fix.
	// A nil fn is refused (latchkit.ErrInvalid) before anything is written.
	Run(ctx context.Context, value string, fn func(ctx context.Context, leader latchkit.Lease) error) error
}

// LeaderInfo is who leads an Election: the value it campaigned with and the
// fence of its leadership. The zero LeaderInfo means nobody leads.
type LeaderInfo struct {
	Value string
	Fence int64
}

// ErrNoLeader is the error of Leader when nobody leads.
var ErrNoLeader = errors.New("latchkit: no leader")

// maxLeaderValue is the longest value a campaign may give.
const maxLeaderValue = 4096

// The Election scripts (lua/el_*.lua; keys in el_acquire.lua). A
// campaign is a waiting Mutex Lock on the election's own keys (the Mutex
// layout, under ":el") that also keeps the seat: who leads, with which
// fence, expiring with the lock. A resignation hands the lock to the oldest
// live campaigner and seats it in the same script; every change of the
// seat is published to observers with the new leader in the message.
var (
	elAcquire  = loadScript("el_acquire")
	elRelease  = loadScript("el_release")
	elWithdraw = loadScript("el_withdraw")
	elExtend   = loadScript("el_extend")
	elLeader   = loadScript("el_leader")
)

type election struct {
	b       backend.Backend
	name    string
	cfg     kit.Config
	keys    []string
	channel string   // campaigners' release channel
	obs     string   // observers' channel
	wchans  []string // {channel, inbox}
	inbox   string
	ttlArg  string
	waitArg string
	handArg string
}

// NewElection returns the Election named name on cl's Redis. Its leases have
// the options' TTL (WithTTL) and are renewed by auto-extend
// (WithAutoExtend): a leader whose process dies is replaced within its TTL,
// and one that stops being scheduled learns it was deposed (its lease's
// Context ends) before the server could seat another. Its keys are the Mutex
// layout under prefix{name}:el plus the seat (:el:seat) and the waiting
// candidates' values (:el:cand), and they disappear like a Mutex's when
// nobody campaigns.
func NewElection(cl *Client, name string, opts ...Option) (Election, error) {
	b := kit.BackendOf(core(cl))
	cfg, err := newConfig(latchkit.KindElection, core(cl), name, opts)
	if err != nil {
		return nil, err
	}
	l := keyspace.ElectionLayout
	channel := l.Channel(cfg.Prefix, name)
	e := &election{b: b, name: name, cfg: cfg, keys: l.KeysOf(cfg.Prefix, name), channel: channel,
		obs:    keyspace.KeyBase(cfg.Prefix, name) + l.Sub + ":obs",
		inbox:  pubsub.Inbox(b, channel),
		ttlArg: kit.Ms(cfg.TTL), waitArg: kit.Ms(cfg.WaiterTimeout), handArg: kit.Ms(min(cfg.TTL, cfg.WaiterTimeout))}
	e.wchans = []string{channel, e.inbox}
	return e, nil
}

func (e *election) Campaign(ctx context.Context, value string) (latchkit.Lease, error) {
	return e.campaign(ctx, value, false)
}

func (e *election) TryCampaign(ctx context.Context, value string) (latchkit.Lease, error) {
	return e.campaign(ctx, value, true)
}

func (e *election) campaign(ctx context.Context, value string, try bool) (latchkit.Lease, error) {
	switch {
	case value == "":
		return nil, kit.Invalid("campaign", latchkit.KindElection, e.name, "empty value: a leader's value tells it apart from an empty seat")
	case len(value) > maxLeaderValue:
		return nil, kit.Invalid("campaign", latchkit.KindElection, e.name, "value of %d bytes is over the %d-byte limit of a leader's value", len(value), maxLeaderValue)
	}
	attempt := func(ctx context.Context, at *kit.Attempt) (latchkit.Lease, error) {
		start := time.Now()
		wait, entry := e.waitArg, e.entry(at.Token)
		if at.Try {
			wait, entry = "", ""
		}
		args := []string{at.Token, e.ttlArg, at.Annotation, wait, entry, e.cfg.RetArg, value, e.obs}
		v, acks, err := e.cfg.EvalAcquire(ctx, e.b, elAcquire, e.keys, args)
		if err != nil {
			return nil, kit.KeyErr(ctx, e.b, e.keys, err)
		}
		l, err := kit.Grant(ctx, v, e, latchkit.KindElection, e.name, at.Token, start, &e.cfg)
		return e.cfg.Acked(ctx, l, err, acks)
	}
	a := kit.Acquisition{Op: "campaign", Method: "Campaign", Kind: latchkit.KindElection, Name: e.name,
		Chans: e.wchans, Attempt: attempt, GiveBack: e.withdraw, Queues: true, WakeID: true}
	if try {
		a.Try, a.Chans, a.GiveBack = true, e.wchans[:1], e.giveBack
	}
	return e.cfg.Acquire(ctx, e.b, a)
}

// entry is token's queue entry: the token and the inbox of this process.
func (e *election) entry(token string) string { return token + " " + e.inbox }

// withdraw gives back what a campaign that ended without leading may hold
// or have queued (see el_withdraw.lua).
func (e *election) withdraw(ctx context.Context, token string) error {
	_, err := e.b.Eval(ctx, elWithdraw, e.keys, []string{token, e.channel, e.handArg, e.entry(token), e.cfg.RetArg, e.obs})
	return err
}

// Pass frees the seat token was just granted, without ending the campaign
// (see kit.Passer): el_withdraw with "0" as its end flag.
func (e *election) Pass(ctx context.Context, token string) (bool, error) {
	_, err := e.b.Eval(ctx, elWithdraw, e.keys, []string{token, e.channel, e.handArg, "", e.cfg.RetArg, e.obs, "0"})
	return true, err
}

// giveBack gives back what a TryCampaign whose outcome is unknown may hold.
func (e *election) giveBack(ctx context.Context, token string) error {
	_, err := e.b.Eval(ctx, elWithdraw, e.keys, []string{token, e.channel, e.handArg, "", e.cfg.RetArg, e.obs})
	return err
}

func (e *election) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return kit.ExtendBy(ctx, e, &e.cfg, token, ttl)
}

// RenewCall is election's one extend call: the lock as KEYS; the
// annotation and the seat as companions (see extendArgs).
func (e *election) RenewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return e.b, elExtend, e.keys[:1], kit.ExtendArgs(token, ttl, e.keys[3], e.keys[7]), e.cfg.AckReplicas == 0
}

func (e *election) Release(ctx context.Context, token string) (bool, error) {
	return kit.Flag(e.b.Eval(ctx, elRelease, e.keys, []string{token, e.channel, e.handArg, e.cfg.RetArg, e.obs}))
}

func (e *election) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	return kit.Remaining(e.b.Eval(ctx, mutexTTL, e.keys[:1], []string{token}))
}

func (e *election) Leader(ctx context.Context) (LeaderInfo, error) {
	if err := e.cfg.BeginCall(ctx); err != nil {
		return LeaderInfo{}, kit.OpErr("leader", latchkit.KindElection, e.name, err)
	}
	defer e.cfg.End()
	info, _, _, err := e.read(ctx)
	if err != nil {
		return LeaderInfo{}, kit.OpErr("leader", latchkit.KindElection, e.name, err)
	}
	if info == (LeaderInfo{}) {
		return LeaderInfo{}, kit.OpErr("leader", latchkit.KindElection, e.name, ErrNoLeader)
	}
	return info, nil
}

// read returns the seat: the leader (zero when none), how long its seat
// has left, and the fence of the latest leadership granted (the one the
// lock key keeps): news of a leadership at or below it is older than the
// read.
func (e *election) read(ctx context.Context) (info LeaderInfo, left time.Duration, latest int64, err error) {
	v, err := e.b.Eval(ctx, elLeader, e.keys, nil)
	if err != nil {
		return LeaderInfo{}, 0, 0, kit.KeyErr(ctx, e.b, e.keys, err)
	}
	a, ok := v.([]backend.Value)
	if !ok || (len(a) != 2 && len(a) != 5) {
		return LeaderInfo{}, 0, 0, kit.BadReply(v)
	}
	latest, ok = a[len(a)-1].(int64)
	if !ok {
		return LeaderInfo{}, 0, 0, kit.BadReply(v)
	}
	if len(a) == 2 {
		return LeaderInfo{}, 0, latest, nil
	}
	val, ok1 := a[1].(string)
	f, ok2 := a[2].(int64)
	ms, ok3 := a[3].(int64)
	if !ok1 || !ok2 || !ok3 {
		return LeaderInfo{}, 0, 0, kit.BadReply(v)
	}
	return LeaderInfo{Value: val, Fence: f}, time.Duration(ms) * time.Millisecond, latest, nil
}

func (e *election) Run(ctx context.Context, value string, fn func(ctx context.Context, leader latchkit.Lease) error) error {
	if fn == nil {
		return kit.Invalid("run", latchkit.KindElection, e.name, "nil fn")
	}
	if err := e.cfg.BeginCall(ctx); err != nil {
		return fmt.Errorf("latchkit: run election %q: %w", e.name, err)
	}
	defer e.cfg.End()
	ctx, unbind := e.cfg.Bind(ctx)
	defer unbind()
	policy := e.cfg.Retry()    // between failed campaigns; reset by a grant
	lostPause := e.cfg.Retry() // between lost terms; reset by a term that lasted the TTL
	for {
		lead, err := e.Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, latchkit.ErrClosed) {
				return e.runEnded(ctx, nil)
			}
			if refusedForGood(err) {
				return err
			}
			// Anything else passes (Redis unreachable, a grant the
			// replicas did not acknowledge, a retry policy that gave
			// up): campaign again.
			if pubsub.Sleep(ctx, nextPause(policy)) != nil {
				return e.runEnded(ctx, nil)
			}
			continue
		}
		policy.Reset()
		began := time.Now()
		ferr, lost := e.term(ctx, lead, fn)
		switch {
		case ctx.Err() != nil || errors.Is(context.Cause(lead.Context()), latchkit.ErrClosed):
			return e.runEnded(ctx, ferr)
		case !lost && ferr != nil:
			return fmt.Errorf("latchkit: run election %q: %w", e.name, ferr)
		case !lost:
			return nil
		}
		if time.Since(began) >= e.cfg.TTL {
			lostPause.Reset()
		}
		if pubsub.Sleep(ctx, max(nextPause(lostPause), minRelead)) != nil {
			return e.runEnded(ctx, nil)
		}
	}
}

// minRelead is the shortest pause of Run between a lost term and the next
// campaign, whatever the retry policy.
const minRelead = 10 * time.Millisecond

// errTermOver is the cause of fn's context once fn has returned.
var errTermOver = errors.New("latchkit: election term over: fn returned")

// term runs one term of Run: fn under a context that ends, with a cause
// saying why, when leadership is lost or ctx ends; then it resigns. It
// returns fn's error and whether leadership was lost by the time fn
// returned. A lease that ended before fn could be called (a stall between
// the grant and now) is no term: fn is not called.
func (e *election) term(ctx context.Context, lead latchkit.Lease, fn func(context.Context, latchkit.Lease) error) (ferr error, lost bool) {
	lctx := lead.Context()
	defer func() { // also when fn panics: resign before the panic goes on
		lost = lctx.Err() != nil && errors.Is(context.Cause(lctx), latchkit.ErrLeaseLost)
		// The resignation waits no longer than a give-back: one whose
		// outcome is unknown goes on in the background (see
		// Lease.Release); a failed one ends at the TTL.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), kit.GiveBackTimeout)
		_ = lead.Release(rctx) // a lost or resigned lease reports ErrLeaseLost
		rcancel()
	}()
	if lctx.Err() != nil {
		return nil, false
	}
	fctx, cancel := context.WithCancelCause(ctx) // ends with ctx's cause when ctx ends
	stop := context.AfterFunc(lctx, func() { cancel(e.termCause(lctx)) })
	defer func() {
		stop()
		cancel(errTermOver)
	}()
	return fn(fctx, lead), false
}

// termCause is the cause of fn's context when the lease's context lctx
// ended: a loss (matching latchkit.ErrLeaseLost), or fn's own Release.
func (e *election) termCause(lctx context.Context) error {
	cause := context.Cause(lctx)
	if errors.Is(cause, latchkit.ErrLeaseLost) {
		return fmt.Errorf("latchkit: election %q: leadership lost: %w", e.name, cause)
	}
	return fmt.Errorf("latchkit: election %q: leadership ended: %w", e.name, cause)
}

// runEnded is Run's error once ctx has ended or the Client's Close
// withdrew Run. Ended by ctx, it matches ctx.Err() and ctx's cause, and
// ferr, fn's error, when that is something else. Withdrawn by Close, it
// matches latchkit.ErrClosed alone (fn's error is described, not
// matched): one cause per ending.
func (e *election) runEnded(ctx context.Context, ferr error) error {
	if ctx.Err() == nil || kit.Withdrawn(ctx) {
		if ferr != nil {
			return fmt.Errorf("latchkit: run election %q: %w (fn returned: %v)", e.name, kit.ErrClientClosed, ferr)
		}
		return fmt.Errorf("latchkit: run election %q: %w", e.name, kit.ErrClientClosed)
	}
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause != nil && !errors.Is(err, cause) {
		if errors.Is(cause, err) {
			err = cause
		} else {
			err = fmt.Errorf("%w: %w", err, cause)
		}
	}
	if ferr != nil && !errors.Is(err, ferr) && !errors.Is(ferr, err) && !errors.Is(ferr, cause) {
		return fmt.Errorf("latchkit: run election %q: %w (and fn returned: %w)", e.name, err, ferr)
	}
	return fmt.Errorf("latchkit: run election %q: %w", e.name, err)
}

// refusedForGood reports whether err is a failure that trying again cannot
// change: bad input (latchkit.ErrInvalid, which a key of another type is
// too), a closed client, or an error reply of the server (NOPERM, an
// unknown command, a script error). The replies of a server that cannot
// serve now (MOVED, LOADING, READONLY, BUSY, OOM, MISCONF, ...) are not
// among them: the backends report them as backend.ErrUnavailable (see
// backend.Wrap). Nor is NOSCRIPT, which the backends answer with EVAL.
func refusedForGood(err error) bool {
	if errors.Is(err, latchkit.ErrInvalid) || errors.Is(err, latchkit.ErrClosed) {
		return true
	}
	var re *backend.ReplyError
	return errors.As(err, &re)
}

// nextPause is the retry policy's next delay; when the policy gives up,
// it starts over (an observer or a Run goes on until its context ends).
func nextPause(p backoff.BackOff) time.Duration {
	d := p.NextBackOff()
	if d == backoff.Stop {
		p.Reset()
		d = p.NextBackOff()
	}
	return max(d, time.Millisecond)
}

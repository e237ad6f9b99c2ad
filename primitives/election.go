package primitives

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/cenkalti/backoff/v4"

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
	// retrying cannot change (Leader then returns that error).
	Observe(ctx context.Context) <-chan LeaderInfo
	// Run campaigns with value and, while leading, calls fn with the lease
	// and a context that ends with the term (its cause matches
	// latchkit.ErrLeaseLost when leadership was lost); fn must then return.
	// Run resigns, then returns fn's error (or nil) if fn returned while
	// leading, campaigns again if leadership was lost, returns an error
	// matching ctx.Err() once ctx ends, or a campaign error retrying cannot fix.
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

// NewElection returns the Election named name on b. Its leases have the
// options' TTL (WithTTL) and are renewed by auto-extend (WithAutoExtend):
// a leader whose process dies is replaced within its TTL, and one that
// stops being scheduled learns it was deposed (its lease's Context ends)
// before the server could seat another. Its keys are the Mutex layout
// under prefix{name}:el plus the seat (:el:seat) and the waiting
// candidates' values (:el:cand), and they disappear like a Mutex's when
// nobody campaigns.
func NewElection(cl *Client, name string, opts ...Option) (Election, error) {
	b := kit.BackendOf(cl.core())
	cfg, err := newConfig(latchkit.KindElection, cl.core(), name, opts)
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
		return nil, kit.Invalid("campaign", latchkit.KindElection, e.name, "value of %d bytes, above maxLeaderValue (%d)", len(value), maxLeaderValue)
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
	a := kit.Acquisition{Op: "campaign", Kind: latchkit.KindElection, Name: e.name,
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
	if err := e.cfg.Begin(); err != nil {
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
// has left, and the fence of the latest leadership granted (the fence
// counter): news of a leadership at or below it is older than the read.
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

// seatNews is one message of the observers' channel: a leader seated
// ("L<fence> <ms> <value>") or the seat emptied ("E<fence>", the fence of
// the leader that left).
type seatNews struct {
	info  LeaderInfo    // the new leader; zero for an emptied seat
	left  time.Duration // how long the new leader's seat lasts unless renewed
	fence int64         // the fence the message is about
}

// parseSeatNews decodes a message of the observers' channel.
func parseSeatNews(payload string) (seatNews, bool) {
	if rest, ok := strings.CutPrefix(payload, "E"); ok {
		f, err := strconv.ParseInt(rest, 10, 64)
		return seatNews{fence: f}, err == nil
	}
	rest, ok := strings.CutPrefix(payload, "L")
	if !ok {
		return seatNews{}, false
	}
	fs, rest, ok1 := strings.Cut(rest, " ")
	ttl, value, ok2 := strings.Cut(rest, " ")
	f, err1 := strconv.ParseInt(fs, 10, 64)
	d, err2 := strconv.ParseInt(ttl, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || value == "" {
		return seatNews{}, false
	}
	return seatNews{info: LeaderInfo{Value: value, Fence: f}, left: time.Duration(d) * time.Millisecond, fence: f}, true
}

// maxObserved bounds the messages an observer keeps for a slow consumer;
// past it, the observer drops them and re-reads the leader.
const maxObserved = 1024

func (e *election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo)
	if e.cfg.Begin() != nil {
		close(out) // the Client is closed: Leader says so
		return out
	}
	ctx, unbind := e.cfg.Bind(ctx)
	go func() {
		defer e.cfg.End()
		defer unbind()
		e.observe(ctx, out)
	}()
	return out
}

// observer is the state of one Observe: the messages heard and not yet
// handled, and whether they can be trusted to be complete.
type observer struct {
	mu    sync.Mutex
	news  []string
	stale bool // messages were dropped (too many, or the subscription): re-read
}

func (o *observer) heard(_, payload string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.news) >= maxObserved {
		o.news, o.stale = o.news[:0], true
		return
	}
	o.news = append(o.news, payload)
}

// take returns the messages heard since the last take, and whether the
// leader must be read again.
func (o *observer) take() ([]string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	news, stale := o.news, o.stale
	o.news, o.stale = nil, false
	return news, stale
}

// observe feeds out until ctx ends: subscribe first, then read the seat,
// then apply each message in order (ignoring any about fences already
// seen), re-reading the seat when its leader's time is up (an expiry
// publishes nothing), when messages may have been lost, and, while the
// subscription is down, at the retry policy's pace.
func (e *election) observe(ctx context.Context, out chan<- LeaderInfo) {
	defer close(out)
	o := &observer{}
	h := e.cfg.Cl.Hub()
	if h == nil {
		return // closed meanwhile
	}
	w, live := h.Listen(ctx, o.heard, e.obs)
	defer w.Leave()
	var (
		view   seatView
		policy = e.cfg.Retry()
	)
	pace := func() time.Duration { return nextPause(policy) }
	send := func(info LeaderInfo, changed bool) bool {
		if !changed {
			return true
		}
		select {
		case out <- info:
			return true
		case <-ctx.Done():
			return false
		}
	}
	reread := true
	for {
		if !live {
			live = w.Live()
		}
		news, stale := o.take()
		if stale || reread {
			info, left, counter, err := e.read(ctx)
			if err != nil {
				if ctx.Err() != nil || refusedForGood(err) {
					return // Leader tells a refusal
				}
				reread = true
				if pubsub.Sleep(ctx, pace()) != nil {
					return
				}
				continue
			}
			policy.Reset()
			reread = false
			if !send(view.read(info, left, counter, time.Now())) {
				return
			}
		}
		for _, p := range news {
			if n, ok := parseSeatNews(p); ok && !send(view.news(n, time.Now())) {
				return
			}
		}
		// Sleep until a message, the seat's expiry (re-read: renewals
		// publish nothing), or, while not subscribed, the retry pace.
		wait := time.Duration(-1)
		if !view.expires.IsZero() {
			wait = max(time.Until(view.expires), 0) + time.Millisecond
		}
		if !live || !w.Live() {
			live = false
			d := pace()
			if wait < 0 || d < wait {
				wait = d
			}
		}
		var t *time.Timer
		var timer <-chan time.Time
		if wait >= 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-w.C():
			if !w.Live() {
				live = false
				reread = true // messages may have been lost: read once subscribed again
			}
		case <-timer:
			reread = true
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
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

// seatView is what an observer knows of the seat: what it reported last,
// and the highest fence it knows of. It decides what a read of the seat, or
// a message, changes: messages may arrive out of step with reads (a
// message published before a read can arrive after its reply), so news of
// a leadership at or below the highest fence known is old and ignored, and
// an emptied seat is news only about the leader last reported.
type seatView struct {
	cur     LeaderInfo // last reported
	sent    bool       // anything reported yet
	latest  int64      // the highest fence known
	expires time.Time  // when cur's seat runs out unless renewed; zero: none
}

// report makes info the last reported, and says whether it is a change.
func (v *seatView) report(info LeaderInfo) (LeaderInfo, bool) {
	changed := !v.sent || info != v.cur
	v.cur, v.sent = info, true
	return info, changed
}

// read applies a read of the seat made at now: the leader (zero: none),
// its time left, and the fence counter then.
func (v *seatView) read(info LeaderInfo, left time.Duration, counter int64, now time.Time) (LeaderInfo, bool) {
	v.latest = max(v.latest, counter, info.Fence)
	v.expires = time.Time{}
	if info != (LeaderInfo{}) {
		v.expires = now.Add(left)
	}
	return v.report(info)
}

// news applies a message heard at now.
func (v *seatView) news(n seatNews, now time.Time) (LeaderInfo, bool) {
	switch {
	case n.info != (LeaderInfo{}) && n.fence > v.latest:
		v.latest = n.fence
		v.expires = now.Add(n.left)
		return v.report(n.info)
	case n.info == (LeaderInfo{}) && v.cur != (LeaderInfo{}) && n.fence == v.cur.Fence:
		v.expires = time.Time{}
		return v.report(LeaderInfo{})
	}
	return v.cur, false
}

func (e *election) Run(ctx context.Context, value string, fn func(ctx context.Context, leader latchkit.Lease) error) error {
	if err := e.cfg.Begin(); err != nil {
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
			if ctx.Err() != nil {
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
		case ctx.Err() != nil:
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
// returned.
func (e *election) term(ctx context.Context, lead latchkit.Lease, fn func(context.Context, latchkit.Lease) error) (ferr error, lost bool) {
	fctx, cancel := context.WithCancelCause(ctx) // ends with ctx's cause when ctx ends
	lctx := lead.Context()
	ended := func() { cancel(e.termCause(lctx)) }
	stop := context.AfterFunc(lctx, ended)
	if lctx.Err() != nil {
		ended() // lost already: fn's context is done from the start
	}
	defer func() { // also when fn panics: resign before the panic goes on
		stop()
		lost = lctx.Err() != nil && errors.Is(context.Cause(lctx), latchkit.ErrLeaseLost)
		cancel(errTermOver)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.TTL)
		_ = lead.Release(rctx) // a lost or resigned lease reports ErrLeaseLost; a failed release ends at its TTL
		rcancel()
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

// runEnded is Run's error once ctx has ended: it matches ctx.Err() and
// ctx's cause, and ferr, fn's error, when that is something else.
func (e *election) runEnded(ctx context.Context, ferr error) error {
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
// unknown command, a script error) other than passingReplies. The replies
// of a server that cannot serve now (MOVED, LOADING, READONLY, ...) are
// not among them: the backends report them as backend.ErrUnavailable. Nor
// is NOSCRIPT, which the backends answer with EVAL.
func refusedForGood(err error) bool {
	if errors.Is(err, latchkit.ErrInvalid) || errors.Is(err, latchkit.ErrClosed) {
		return true
	}
	var re *backend.ReplyError
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range passingReplies {
		if strings.HasPrefix(re.Msg, p) {
			return false
		}
	}
	return true
}

// passingReplies are the prefixes of error replies that refuse a command
// for a while only: a script running past busy-reply-threshold (BUSY), the
// memory at maxmemory (OOM), writes stopped by a failed save (MISCONF).
var passingReplies = []string{"BUSY", "OOM", "MISCONF"}

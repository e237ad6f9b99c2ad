package model_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/primitives"
)

// retention is every primitive's WithRetention here: the fence counter
// (and a semaphore's stored limit) outlives the last grant by it, longer
// than the given-back tokens (60 s) and the waiters' liveness (3 s), so a
// name left alone for retention after its last call leaves nothing.
const retention = 2 * time.Minute

// markerTTL is kit.MarkerTTL: how long given-back tokens, a latch at
// zero and a latch round's call ids are kept.
const markerTTL = 60 * time.Second

// clientMargin: a Release whose reply is lost is made only while the
// lease's deadline by the client's own clock is at least this far ahead
// or already behind, so that the model knows which the library saw (see
// sentAlive).
const clientMargin = 20 * time.Millisecond

// panicAfterGrantFixed turns on the PanicAfterGrant actions: a user
// middleware that panics after the wait loop granted leaves the grant held
// by a token nobody has (see TestRegressPanicAfterGrant). Set it once the
// fix is in.
const panicAfterGrantFixed = true

// lstate is where a lease is, as the model sees it.
type lstate int

const (
	held     lstate = iota // granted; live until exp by the server's clock
	released               // a Release went through; relErr is what it returned
	unknown                // a Release whose reply was lost: ran says whether it freed a live lease
)

// mlease is one lease of the model.
type mlease struct {
	id     int
	l      latchkit.Lease
	c      int // the client (driver) that holds it
	n      int // permits
	reader bool
	exp    time.Time
	st     lstate
	relErr string // released: what every later Release returns
	ran    bool   // unknown: the lost release freed the lease
	// sentAlive: a Release whose reply was lost was sent before the
	// lease's deadline by the client's clock: the library counts the
	// lease let go in time, whatever the server says after (a retried
	// Release succeeds; a TTL or Extend that finds it gone logs no loss).
	sentAlive bool
	// told: a TTL or Extend (or Release) found it gone, so the lease
	// itself knows it is lost (its Context ended, a record was logged).
	told bool
}

func (l *mlease) String() string {
	return fmt.Sprintf("lease#%d(c%d,n=%d,fence=%d)", l.id, l.c, l.n, l.l.Fence())
}

// live reports whether the server holds l at now.
func (l *mlease) live(now time.Time) bool { return l.st == held && now.Before(l.exp) }

// leases is the lease bookkeeping every model shares: Release, Extend and
// TTL of a lease in any state, with and without a lost reply.
type leases struct {
	r         *rig
	all       []*mlease
	logged    int64 // "lease lost" records the model expects
	lastTouch time.Time
	log       *lostLog
	prefix    string
	// trace is the actions run so far, for a failure's message (a
	// failure that does not come back on replay has no other record).
	trace []string
}

// client draws one of the rig's clients, noting it in the trace.
func (ls *leases) client(t *rapid.T) int {
	c := ls.r.clientDraw(t, "client")
	ls.note(fmt.Sprint("c", c))
	return c
}

// holder is the one live lease of a lock the model holds, or nil.
func (ls *leases) holder() *mlease {
	if l := ls.live(); len(l) > 0 {
		return l[0]
	}
	return nil
}

// note adds s to the trace's last action.
func (ls *leases) note(s string) {
	if n := len(ls.trace); n > 0 {
		ls.trace[n-1] += "," + s
	}
}

// traced records each action's name in ls.trace before it runs.
func (ls *leases) traced(actions map[string]func(*rapid.T)) map[string]func(*rapid.T) {
	out := map[string]func(*rapid.T){}
	for name, f := range actions {
		out[name] = f
		if name != "" {
			out[name] = func(t *rapid.T) {
				ls.trace = append(ls.trace, fmt.Sprintf("%s@%d", name, ls.r.now.UnixMilli()))
				f(t)
			}
		}
	}
	return out
}

func (ls *leases) add(l latchkit.Lease, c, n int, ttl time.Duration) *mlease {
	m := &mlease{id: len(ls.all), l: l, c: c, n: n, exp: ls.r.now.Add(ttl)}
	ls.all = append(ls.all, m)
	return m
}

func (ls *leases) live() []*mlease {
	var out []*mlease
	for _, l := range ls.all {
		if l.live(ls.r.now) {
			out = append(out, l)
		}
	}
	return out
}

func (ls *leases) touch() { ls.lastTouch = ls.r.now }

// lose marks l known lost, counting the record it logs the first time.
func (ls *leases) lose(l *mlease) {
	if !l.told && l.st != released {
		ls.logged++
	}
	l.told = true
}

// pick draws one of the model's leases (skipping the action when there
// are none), those matching ok only.
func (ls *leases) pick(t *rapid.T, ok func(*mlease) bool) *mlease {
	var c []*mlease
	for _, l := range ls.all {
		if ok == nil || ok(l) {
			c = append(c, l)
		}
	}
	if len(c) == 0 {
		t.Skip("no lease")
	}
	l := rapid.SampledFrom(c).Draw(t, "lease")
	ls.note(fmt.Sprint("#", l.id))
	return l
}

// release is Release on a lease in any state; the model says what it
// returns.
func (ls *leases) release(t *rapid.T, l *mlease) {
	now := ls.r.now
	wantErr := "ErrLeaseLost"
	switch {
	case l.st == released:
		wantErr = l.relErr
	case l.told:
	case l.st == unknown && l.sentAlive:
		wantErr = "nil" // a retried release whose first try was sent in time
	case l.live(now):
		wantErr = "nil"
	}
	if l.st != released {
		ls.touch()
	}
	ctx, cancel := ctxFor(callTimeout)
	err := l.l.Release(ctx)
	cancel()
	want(t, fmt.Sprintf("Release (state %d, told %v)", l.st, l.told), err, wantErr, l, "\n"+ls.r.dump(ls.prefix, ls))
	l.st, l.relErr = released, wantErr
}

// releaseLost is a Release whose reply is lost: it must not claim the lease
// was lost; the server freed it when it was live.
func (ls *leases) releaseLost(t *rapid.T, l *mlease) {
	if l.st == released {
		t.Skip("no round trip")
	}
	alive, known := clientLive(l.l)
	if !known {
		t.Skip("the lease's deadline by the client's clock is too close to tell which side the release is sent on")
	}
	ls.touch()
	var err error
	ran := ls.r.clients[l.c].lostReply(func(ctx context.Context) { err = l.l.Release(ctx) })
	if !ran {
		fail(t, "Release with a lost reply made no round trip", l, err)
	}
	if err == nil || errors.Is(err, latchkit.ErrLeaseLost) {
		// The driver waited past the deadline for the second reply
		// (the resend's): an ordinary, if late, release.
		wantErr := "ErrLeaseLost"
		if !l.told && (l.live(ls.r.now) || l.st == unknown && l.sentAlive) {
			wantErr = "nil"
		}
		want(t, "Release answered by the resend", err, wantErr, l)
		l.st, l.relErr = released, wantErr
		return
	}
	if debug {
		fmt.Printf("release %v token %s with a lost reply: %v\n", l, l.l.Token(), err)
	}
	if l.st == held {
		l.ran = l.live(ls.r.now)
	}
	if alive && !l.told {
		l.sentAlive = true
	}
	l.st = unknown
}

// clientLive says whether l is live by the client's own clock (before its
// deadline: Release sets sentAlive by it), and whether that is known:
// false within clientMargin of the deadline, where the call may land on
// either side.
func clientLive(l latchkit.Lease) (alive, known bool) {
	d, ok := latchkit.Innermost(l).(interface{ Deadline() time.Time })
	if !ok {
		return false, false
	}
	left := time.Until(d.Deadline())
	return left > 0, left > clientMargin || left < -clientMargin
}

// extend is Extend on a lease in any state.
func (ls *leases) extend(t *rapid.T, l *mlease, d time.Duration) {
	now := ls.r.now
	wantErr := "ErrLeaseLost"
	switch {
	case d < primitives.MinTTL:
		wantErr = "ErrInvalid"
	case l.st == released || l.told:
	case l.live(now):
		wantErr = "nil"
	}
	if wantErr != "ErrInvalid" && l.st != released && !l.told {
		ls.touch()
	}
	ctx, cancel := ctxFor(callTimeout)
	err := l.l.Extend(ctx, d)
	cancel()
	want(t, "Extend", err, wantErr, d, l)
	switch {
	case wantErr == "nil":
		l.exp = now.Add(d)
	case wantErr == "ErrLeaseLost" && l.st != released && !l.sentAlive:
		ls.lose(l)
	}
}

// ttl is TTL on a lease in any state: the exact time the server has left.
func (ls *leases) ttl(t *rapid.T, l *mlease) {
	now := ls.r.now
	ctx, cancel := ctxFor(callTimeout)
	d, err := l.l.TTL(ctx)
	cancel()
	if l.st != released && !l.told {
		ls.touch()
	}
	if l.live(now) && !l.told {
		want(t, "TTL of a live lease", err, "nil", l)
		if left := l.exp.Sub(now); d != left {
			fail(t, "TTL differs from the model", l, d, left)
		}
		return
	}
	want(t, fmt.Sprintf("TTL (state %d)", l.st), err, "ErrLeaseLost", l)
	if l.st != released && !l.sentAlive {
		ls.lose(l)
	}
}

// checkKeys is the check every lease model ends a step with: every key
// under the prefix has an expiry, the lease-lost records are the model's,
// and once no lease is live and the retention has passed nothing remains.
func (ls *leases) checkKeys(t *rapid.T) {
	ls.r.checkExpiries(t, ls.prefix)
	ls.checkLogged(t)
	if ls.quiet() {
		ls.r.checkEmpty(t, ls.prefix, "no lease live and the retention passed since the last call")
	}
}

// checkLogged compares the lease-lost records with the model's count.
func (ls *leases) checkLogged(t *rapid.T) {
	if got := ls.log.n.Load(); got != ls.logged {
		fail(t, "lease-lost records differ from the model", got, ls.logged, "\n"+ls.r.dump(ls.prefix, ls))
	}
}

// quiet reports whether nothing may remain: no live lease, and the
// retention has passed since the last call that reached the server.
func (ls *leases) quiet() bool {
	return len(ls.live()) == 0 && !ls.r.now.Before(ls.lastTouch.Add(retention))
}

// edges are the instants worth landing on: each live lease's expiry and
// the end of the retention.
func (ls *leases) edges() []time.Duration {
	var out []time.Duration
	for _, l := range ls.live() {
		out = append(out, l.exp.Sub(ls.r.now))
	}
	if q := ls.lastTouch.Add(retention).Sub(ls.r.now); q > 0 {
		out = append(out, q)
	}
	return out
}

// leaseActions are the actions on leases every model shares.
func (ls *leases) actions(ttl time.Duration) map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"Release":          func(t *rapid.T) { ls.release(t, ls.pick(t, nil)) },
		"ReleaseLostReply": func(t *rapid.T) { ls.releaseLost(t, ls.pick(t, func(l *mlease) bool { return l.st != released })) },
		"Extend":           func(t *rapid.T) { ls.extend(t, ls.pick(t, nil), ttlDraw(t, ttl)) },
		"TTL":              func(t *rapid.T) { ls.ttl(t, ls.pick(t, nil)) },
		"TimePasses":       func(t *rapid.T) { ls.r.advance(advanceDraw(t, ttl, ls.edges())) },
	}
}

// warmMutex runs every Mutex script once (see rig.warm).
func warmMutex(ctx context.Context, cl *primitives.Client, o []primitives.Option) error {
	mu, err := primitives.NewMutex(cl, "w", o...)
	if err != nil {
		return err
	}
	return warmLock(ctx, mu)
}

package model_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// warmElection runs every Election script once (see rig.warm).
func warmElection(ctx context.Context, cl *primitives.Client, o []primitives.Option) error {
	e, err := primitives.NewElection(cl, "w", o...)
	if err != nil {
		return err
	}
	l, err := e.TryCampaign(ctx, "a")
	if err != nil {
		return err
	}
	_, _ = e.TryCampaign(ctx, "b")
	wctx, cancel := context.WithTimeout(ctx, shortWait)
	_, _ = e.Campaign(wctx, "b")
	cancel()
	_, _ = e.Leader(ctx)
	_ = l.Extend(ctx, time.Second)
	_, _ = l.TTL(ctx)
	return l.Release(ctx)
}

// TestModelElection: an Election against its model: at most one leader,
// whose value and fence Leader reports exactly, by the server's clock; a
// resignation hands the seat to a campaigner waiting (Campaign), else
// empties it.
func TestModelElection(t *testing.T) {
	r := newRig(t)
	r.warm(t, warmElection)
	rapid.Check(t, func(t *rapid.T) {
		prefix, ttl, ls, pn, opts := r.leaseSession(t)
		var els []primitives.Election
		for _, c := range r.clients {
			e, err := primitives.NewElection(clienttest.For(t, c.b), "e", opts...)
			if err != nil {
				t.Fatal(err)
			}
			els = append(els, e)
		}
		keys := keyspace.ElectionLayout.KeysOf(prefix, "e")
		lockKey, queueKey, seatKey := keys[0], keys[5], keys[7]
		fences := &fenceSeq{}
		values := map[*mlease]string{}
		n := 0
		client := func(t *rapid.T) int { return r.clientDraw(t, "client") }
		// value draws a campaign's value: valid ones are told apart by a
		// counter; the invalid ones are refused.
		value := func(t *rapid.T) (string, bool) {
			n++
			v := rapid.SampledFrom([]string{"v" + strconv.Itoa(n), "v" + strconv.Itoa(n) + " with spaces",
				"v" + strconv.Itoa(n) + strings.Repeat("x", maxLeaderValue-10), "", strings.Repeat("x", maxLeaderValue+1)}).Draw(t, "value")
			return v, v != "" && len(v) <= maxLeaderValue
		}
		leader := func() *mlease {
			if l := ls.live(); len(l) > 0 {
				return l[0]
			}
			return nil
		}
		granted := func(t *rapid.T, c int, v string, l latchkit.Lease, what string) {
			fences.next(t, l, what)
			values[ls.add(l, c, 1, ttl)] = v
		}
		// state compares Redis with the model: the lock's holder and
		// expiry, the seat's value and fence, nobody left queued.
		state := func() string {
			h := leader()
			v, left := heldLock(r, lockKey)
			switch {
			case h == nil && v != "":
				return fmt.Sprintf("lock held by %q, the model says nobody leads", v)
			case h != nil && v != lockValue(h.l):
				return fmt.Sprintf("lock held by %q, the model says %v", v, h)
			case h != nil && left != h.exp.Sub(r.now):
				return fmt.Sprintf("the lock's TTL %v in Redis, %v in the model", left, h.exp.Sub(r.now))
			case h != nil && (r.m.HGet(seatKey, "v") != values[h] || r.m.HGet(seatKey, "f") != strconv.FormatInt(h.l.Fence(), 10)):
				return fmt.Sprintf("the seat says %.20q fence %s, the model %v %.20q", r.m.HGet(seatKey, "v"), r.m.HGet(seatKey, "f"), h, values[h])
			}
			if q, _ := r.m.ZMembers(queueKey); len(q) > 0 {
				return fmt.Sprintf("campaigners left queued: %q", q)
			}
			return ""
		}
		actions := ls.actions(ttl)
		actions["TryCampaign"] = func(t *rapid.T) {
			c := client(t)
			v, valid := value(t)
			h := leader()
			ctx, cancel := ctxFor(callTimeout)
			l, err := els[c].TryCampaign(ctx, v)
			cancel()
			switch {
			case !valid:
				want(t, "TryCampaign with a bad value", err, "ErrInvalid")
				return
			case h != nil:
				ls.touch()
				want(t, "TryCampaign with a leader", err, "ErrNotAcquired")
				var he *latchkit.HeldError
				if !errors.As(err, &he) || he.WaitHint != h.exp.Sub(r.now) {
					fail(t, "TryCampaign: wait hint differs from the leader's TTL", err, h.exp.Sub(r.now))
				}
				return
			}
			ls.touch()
			if lateGrant(err, ttl) {
				eventually(t, "after a grant that came back late", state)
				return
			}
			want(t, "TryCampaign with nobody leading", err, "nil")
			granted(t, c, v, l, "TryCampaign")
		}
		actions["Campaign"] = func(t *rapid.T) {
			c := client(t)
			v, valid := value(t)
			h := leader()
			d := callTimeout
			if h != nil {
				d = shortWait
			}
			ctx, cancel := ctxFor(d)
			l, err := els[c].Campaign(ctx, v)
			cancel()
			switch {
			case !valid:
				want(t, "Campaign with a bad value", err, "ErrInvalid")
				return
			case h != nil:
				ls.touch()
				if !errors.Is(err, context.DeadlineExceeded) {
					fail(t, "Campaign with a leader did not give up at its deadline", err)
				}
				eventually(t, "after a Campaign gave up", state)
				return
			}
			ls.touch()
			if lateGrant(err, ttl) {
				eventually(t, "after a Campaign whose grants came back late", state)
				return
			}
			want(t, "Campaign with nobody leading", err, "nil")
			granted(t, c, v, l, "Campaign")
		}
		actions["Leader"] = func(t *rapid.T) {
			ctx, cancel := ctxFor(callTimeout)
			info, err := els[client(t)].Leader(ctx)
			cancel()
			h := leader()
			if h == nil {
				if !errors.Is(err, primitives.ErrNoLeader) {
					fail(t, "Leader with nobody leading did not say ErrNoLeader", err, info)
				}
				return
			}
			want(t, "Leader", err, "nil")
			if info.Value != values[h] || info.Fence != h.l.Fence() {
				fail(t, "Leader differs from the model", fmt.Sprintf("%.20q %d", info.Value, info.Fence), h)
			}
		}
		// ResignToCampaigner: a campaigner waits; the leader resigns; the
		// campaigner is seated at once, with the next fence.
		actions["ResignToCampaigner"] = func(t *rapid.T) {
			h := leader()
			if h == nil {
				t.Skip("nobody leads")
			}
			c := client(t)
			v, valid := value(t)
			if !valid {
				t.Skip("a bad value does not campaign")
			}
			ls.touch()
			w := r.clients[c].startWaiting(t, 3*time.Second, 20*time.Millisecond, func(ctx context.Context) (latchkit.Lease, error) {
				return els[c].Campaign(ctx, v)
			})
			ls.release(t, h)
			res := w.result()
			if lateGrant(res.err, ttl) {
				eventually(t, "after a waiting Campaign whose grants came back late", state)
				return
			}
			want(t, "Campaign of a campaigner waiting when the leader resigned", res.err, "nil")
			granted(t, c, v, res.l, "Campaign handed the seat")
		}
		actions["TryCampaignLostReply"] = func(t *rapid.T) {
			c := client(t)
			v := "lost" + strconv.Itoa(c)
			h := leader()
			ls.touch()
			var l latchkit.Lease
			var err error
			r.clients[c].lostReply(func(ctx context.Context) { l, err = els[c].TryCampaign(ctx, v) })
			if err == nil {
				if h != nil {
					fail(t, "TryCampaign with a leader whose reply was lost was granted")
				}
				granted(t, c, v, l, "TryCampaign answered by the resend")
			}
			eventually(t, "after a TryCampaign whose reply was lost", state)
		}
		actions["TryCampaignPaused"] = func(t *rapid.T) {
			c := client(t)
			d := rapid.SampledFrom([]time.Duration{0, ttl, ttl + time.Millisecond}).Draw(t, "paused for")
			var err error
			r.clients[c].paused(func(ctx context.Context) { _, err = els[c].TryCampaign(ctx, "paused") }, func() { r.advance(d) })
			ls.touch()
			if err == nil {
				fail(t, "TryCampaign of a paused client was granted")
			}
			eventually(t, "after a paused TryCampaign", state)
		}
		actions["PanicBefore"] = func(t *rapid.T) {
			c := client(t)
			pn.set("before")
			if !recovered(func() { _, _ = els[c].TryCampaign(context.Background(), "p") }) {
				fail(t, "the middleware did not panic")
			}
		}
		actions["PanicAfterGrant"] = func(t *rapid.T) {
			c := client(t)
			if leader() != nil {
				t.Skip("a leader: no grant to panic after")
			}
			ls.touch()
			pn.set("after")
			var err error
			if !recovered(func() { _, err = els[c].TryCampaign(context.Background(), "p") }) && !lateGrant(err, ttl) {
				fail(t, "the middleware did not panic", err)
			}
			eventually(t, "after a middleware panicked on a grant", state)
		}
		actions[""] = func(t *rapid.T) {
			if n := len(ls.live()); n > 1 {
				fail(t, "model: more than one leader", n)
			}
			if msg := state(); msg != "" {
				fail(t, "Redis differs from the model", msg, "\n"+r.dump(prefix, ls))
			}
			ls.checkKeys(t)
		}
		t.Repeat(actions)
	})
}

// maxLeaderValue is the longest value a campaign may give (4096 bytes).
const maxLeaderValue = 4096

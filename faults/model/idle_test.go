package model_test

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"pgregory.net/rapid"

	"github.com/latchkit/latchkit/internal/keyspace"
)

// holdersIn reads a zset of holders (a Semaphore's holders, an RWLock's
// readers; fence_member in internal/kit/lua/prelude.lua): each live
// holder's expiry (server ms), and each holder's fence. In the spread
// form a holder's token is scored by its expiry and its member "#"+token
// by its fence; a lone holder's token is scored by its fence, and the
// key's expiry is its own.
func holdersIn(m *miniredis.Miniredis, key string, now time.Time) (exp, fences map[string]int64) {
	exp, fences = map[string]int64{}, map[string]int64{}
	ms, _ := m.ZMembers(key)
	for _, member := range ms {
		sc, _ := m.ZScore(key, member)
		switch tok, ok := strings.CutPrefix(member, "#"); {
		case ok:
			fences[tok] = int64(sc)
		case sc >= 1e14 && len(ms) == 1: // lone
			fences[member] = int64(sc)
			if ttl := m.TTL(key); ttl > 0 {
				exp[member] = now.Add(ttl).UnixMilli()
			}
		case int64(sc) > now.UnixMilli():
			exp[member] = int64(sc)
		}
	}
	return exp, fences
}

// fencesMatch says what differs between the fences Redis keeps for the
// model's live leases and the leases' own (by token).
func fencesMatch(ls *leases, fences map[string]int64, reader func(*mlease) bool) string {
	for _, l := range ls.live() {
		if reader != nil && !reader(l) {
			continue
		}
		if f, ok := fences[l.l.Token()]; !ok || f != l.l.Fence() {
			return fmt.Sprintf("%v: fence %d in Redis (kept: %v), %d in the model", l, f, ok, l.l.Fence())
		}
	}
	return ""
}

// idle is how long after its last call a name with no live lease keeps
// nothing (issue 39): what a release writes is gone with the lease, a
// given-back token is kept markerTTL, and a fence kept because the clock
// had not passed it markerTTL and its lead (a millisecond here: the
// model's clock stands still between its steps).
const idle = markerTTL + time.Second

// checkIdle fails t when, no lease being live and idle having passed since
// the last call, a key but those allowed (a stored limit, kept for the
// retention) remains under the prefix. A Client's record is no name's key:
// one per Client, with its own expiry (checkExpiries sees it has one).
func (ls *leases) checkIdle(t *rapid.T, allowed ...string) {
	if len(ls.live()) > 0 || ls.r.now.Before(ls.lastTouch.Add(idle)) {
		return
	}
	var left []string
	for _, k := range ls.r.keys(ls.prefix) {
		ok := keyspace.IsClientRecord(ls.prefix, k)
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			left = append(left, k+"("+ls.r.m.Type(k)+", ttl "+ls.r.m.TTL(k).String()+")")
		}
	}
	if len(left) > 0 {
		fail(t, "no lease live and a minute passed since the last call, yet keys remain", left, "\n"+ls.r.dump(ls.prefix, ls))
	}
}

// timePasses is the TimePasses action of a model that checks idle: its
// edges include the end of the idle minute.
func (ls *leases) timePasses(ttl time.Duration) func(*rapid.T) {
	return func(t *rapid.T) {
		edges := ls.edges()
		if q := ls.lastTouch.Add(idle).Sub(ls.r.now); q > 0 {
			edges = append(edges, q)
		}
		ls.r.advance(advanceDraw(t, ttl, edges))
	}
}

// fenceOfWriter is the fence in an RWLock writer's value ("token fence").
func fenceOfWriter(v string) (token string, fence int64) {
	token, f, _ := strings.Cut(v, " ")
	fence, _ = strconv.ParseInt(f, 10, 64)
	return token, fence
}

package faults_test

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The models' own tests: small histories, written by hand, that they must
// accept or reject. They show what the give-up operations allow (a failed
// call may hold inside its interval) and what they do not (anything held
// after it returned).

// modelHist builds a history from (client, input, output, call, return) rows.
type modelStep struct {
	c         int
	in        any
	ok        bool
	call, ret int64
}

func modelHist(steps ...modelStep) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, s := range steps {
		ops = append(ops, porcupine.Operation{ClientId: s.c, Input: s.in, Output: semOutput{s.ok}, Call: s.call, Return: s.ret})
	}
	return ops
}

func semAcq(c int) semInput              { return semInput{client: c, kind: opAcquire} }
func semRel(c int) semInput              { return semInput{client: c, kind: opRelease} }
func semTake(c int, seq uint32) semInput { return semInput{client: c, kind: giveUpTake, seq: seq} }
func semRelUnknown(c int) semInput       { return semInput{client: c, kind: releaseUnknown} }
func semEnd(c int, seq uint32) semInput  { return semInput{client: c, kind: giveUpEnd, seq: seq} }

func TestSemModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		ops   []porcupine.Operation
		want  bool // linearizable
	}{
		{"two holders of a mutex", 1, modelHist(
			modelStep{0, semAcq(0), true, 0, 10}, modelStep{1, semAcq(1), true, 20, 30}, modelStep{0, semRel(0), true, 40, 50},
		), false},
		{"a failed try while free", 1, modelHist(
			modelStep{0, semAcq(0), false, 0, 10},
		), false},
		{"a failed call held inside its interval", 1, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 100}, modelStep{0, semEnd(0, 1), false, 0, 100},
			modelStep{1, semAcq(1), false, 20, 30}, // client 0's call held then
			modelStep{1, semAcq(1), true, 110, 120},
		), true},
		{"a grant left by a failed call", 1, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 100}, modelStep{0, semEnd(0, 1), false, 0, 100},
			modelStep{1, semAcq(1), false, 110, 120}, // nobody holds after it returned
		), false},
		{"failed calls back to back each held", 1, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 100}, modelStep{0, semEnd(0, 1), false, 0, 100},
			modelStep{1, semAcq(1), false, 20, 30},
			modelStep{0, semTake(0, 2), false, 110, 200}, modelStep{0, semEnd(0, 2), false, 110, 200},
			modelStep{1, semAcq(1), false, 120, 130},
		), true},
		{"a failed call takes nothing once it ended", 1, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 100}, modelStep{0, semEnd(0, 1), false, 0, 100},
			modelStep{1, semAcq(1), true, 0, 10},  // 1 holds from the start...
			modelStep{1, semRel(1), true, 50, 60}, // ...until 50-60
			modelStep{2, semAcq(2), false, 110, 120},
		), false},
		// A give-back that could not finish within its budget goes on in
		// the background (README, "Unknown outcomes are safe"): for up to
		// giveUpGrace after the failed call returned, its grant, another
		// token, may still hold beside the same client's next grant.
		{"a failed call's grant beside the same client's next grant", 2, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 10}, modelStep{0, semEnd(0, 1), false, 0, 110},
			modelStep{0, semAcq(0), true, 20, 30},
			modelStep{1, semAcq(1), false, 40, 50}, // the failed call's grant and 0's fill both permits
			modelStep{1, semAcq(1), true, 120, 130},
		), true},
		{"...but not once its grace is over", 2, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 10}, modelStep{0, semEnd(0, 1), false, 0, 110},
			modelStep{0, semAcq(0), true, 20, 30},
			modelStep{1, semAcq(1), false, 120, 130},
		), false},
		{"...nor beyond the limit", 1, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 10}, modelStep{0, semEnd(0, 1), false, 0, 110},
			modelStep{1, semAcq(1), false, 12, 14}, // the failed call held then
			modelStep{0, semAcq(0), true, 20, 30},
			modelStep{1, semAcq(1), false, 40, 50},
			modelStep{2, semAcq(2), true, 35, 45}, // 0 holds: over the limit
		), false},
		{"failed calls of one client overlapping in their grace", 3, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 10}, modelStep{0, semEnd(0, 1), false, 0, 110},
			modelStep{0, semTake(0, 2), false, 20, 30}, modelStep{0, semEnd(0, 2), false, 20, 130},
			modelStep{1, semAcq(1), true, 32, 34},
			modelStep{2, semAcq(2), false, 40, 50}, // both failed calls' grants and 1's
		), true},
		// A Release whose outcome is unknown (Redis unreachable) may have
		// freed the permit at any instant of its interval, which the
		// harness ends when the lease's TTL would have.
		{"a release of unknown outcome frees within its interval", 1, modelHist(
			modelStep{0, semAcq(0), true, 0, 10}, modelStep{0, semRelUnknown(0), false, 20, 1000},
			modelStep{1, semAcq(1), true, 100, 110},
		), true},
		{"...or later: refusals meanwhile", 1, modelHist(
			modelStep{0, semAcq(0), true, 0, 10}, modelStep{0, semRelUnknown(0), false, 20, 1000},
			modelStep{1, semAcq(1), false, 100, 110}, modelStep{1, semAcq(1), true, 500, 510},
		), true},
		{"...but never two holders at once", 1, modelHist(
			modelStep{0, semAcq(0), true, 0, 10}, modelStep{0, semRelUnknown(0), false, 20, 1000},
			modelStep{1, semAcq(1), true, 100, 110}, modelStep{2, semAcq(2), true, 200, 210},
		), false},
		{"two permits", 2, modelHist(
			modelStep{0, semAcq(0), true, 0, 10}, modelStep{1, semAcq(1), true, 0, 10}, modelStep{2, semAcq(2), false, 20, 30},
		), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(semModel(tc.limit), tc.ops); got != tc.want {
				t.Errorf("linearizable: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMixModel(t *testing.T) {
	in := func(c int, kind opKind, res uint8, seq uint32) mixInput {
		return mixInput{client: c, kind: kind, res: res, seq: seq}
	}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"a MultiLock while a Mutex of one of its names holds", modelHist(
			modelStep{0, in(0, opAcquire, resA, 0), true, 0, 10},
			modelStep{1, in(1, opAcquire, resA|resB, 0), true, 20, 30},
		), false},
		{"a MultiLock beside a Mutex of another name", modelHist(
			modelStep{0, in(0, opAcquire, resC, 0), true, 0, 10},
			modelStep{1, in(1, opAcquire, resA|resB, 0), true, 20, 30},
		), true},
		{"a FairMutex and a Mutex of the same name", modelHist(
			modelStep{0, in(0, opAcquire, resA, 0), true, 0, 10},
			modelStep{1, in(1, opAcquire, resFairA, 0), true, 20, 30},
		), true},
		{"a failed MultiLock TryLock with its names free", modelHist(
			modelStep{0, in(0, opAcquire, resB, 0), true, 0, 10},
			modelStep{1, in(1, opAcquire, resA|resC, 0), false, 20, 30},
		), false},
		{"a MultiLock grant left by a failed call", modelHist(
			modelStep{0, in(0, giveUpTake, resA|resB, 1), false, 0, 100}, modelStep{0, in(0, giveUpEnd, resA|resB, 1), false, 0, 100},
			modelStep{1, in(1, opAcquire, resB, 0), false, 110, 120},
		), false},
		// A waiting MultiLock{a,b} (steps a, then b, over [0,100]) holds a
		// while a Mutex of b holds b; a TryLock of a fails meanwhile.
		{"a waiting MultiLock holds its first name while it waits for the next", modelHist(
			modelStep{2, in(2, opAcquire, resB, 0), true, 0, 5},
			modelStep{0, mixInput{client: 0, kind: opAcquire, res: resA, step: 1}, true, 0, 100},
			modelStep{0, mixInput{client: 0, kind: opAcquire, res: resB, step: 2, last: true}, true, 0, 100},
			modelStep{1, in(1, opAcquire, resA, 0), false, 20, 30},
			modelStep{2, in(2, opRelease, resB, 0), true, 40, 50},
		), true},
		// ...but never its later name before its earlier one.
		{"a waiting MultiLock never holds a later name first", modelHist(
			modelStep{2, in(2, opAcquire, resA, 0), true, 0, 5},
			modelStep{0, mixInput{client: 0, kind: opAcquire, res: resA, step: 1}, true, 0, 100},
			modelStep{0, mixInput{client: 0, kind: opAcquire, res: resB, step: 2, last: true}, true, 0, 100},
			modelStep{1, in(1, opAcquire, resB, 0), false, 20, 30},
			modelStep{2, in(2, opRelease, resA, 0), true, 40, 50},
		), false},
		{"a MultiLock release frees all its names", modelHist(
			modelStep{0, in(0, opAcquire, resA|resB, 0), true, 0, 10},
			modelStep{0, in(0, opRelease, resA|resB, 0), true, 20, 30},
			modelStep{1, in(1, opAcquire, resA, 0), true, 40, 50},
			modelStep{2, in(2, opAcquire, resB, 0), true, 40, 50},
		), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(mixModel(), tc.ops); got != tc.want {
				t.Errorf("linearizable: %v, want %v", got, tc.want)
			}
		})
	}
}

// classifyIllegal tells an over-grant from a refusal nobody's grant
// explains, on histories written by hand.
func TestClassifyIllegal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int
		ops   []porcupine.Operation
		want  string // a part of the verdict
	}{
		{"two holders of a mutex", 1, modelHist(
			modelStep{0, semAcq(0), true, 0, 10}, modelStep{1, semAcq(1), true, 20, 30},
			modelStep{0, semRel(0), true, 40, 50}, modelStep{1, semRel(1), true, 40, 50},
		), "over-grant: 2 clients held for sure"},
		{"a refusal with one permit free", 2, modelHist(
			modelStep{0, semAcq(0), true, 0, 10}, modelStep{1, semAcq(1), false, 20, 30}, modelStep{0, semRel(0), true, 40, 50},
		), "refusal of client 1 [20ns, 30ns] while at most 1 others"},
		{"a refusal a failed call's grace explains", 1, modelHist(
			modelStep{0, semTake(0, 1), false, 0, 10}, modelStep{0, semEnd(0, 1), false, 0, 110},
			modelStep{1, semAcq(1), false, 50, 60},
			modelStep{2, semAcq(2), true, 0, 5}, modelStep{2, semRel(2), true, 20, 25},
		), "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classifyIllegal(tc.ops, tc.limit); !strings.Contains(got, tc.want) {
				t.Errorf("verdict %q, want it to say %q", got, tc.want)
			}
		})
	}
}

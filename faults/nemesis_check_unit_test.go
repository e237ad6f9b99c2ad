package faults_test

// Unit tests of the nemesis's history checker (no Redis needed).

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNemesisChecker(t *testing.T) {
	hist := func(holds ...nemHold) *nemHistory {
		return &nemHistory{holds: holds, failures: map[string]int{}}
	}
	h := func(c int, fence int64, called, start, end time.Duration, lost bool) nemHold {
		return nemHold{client: c, fence: fence, called: called, start: start, end: end, lost: lost}
	}
	exec := func(k nemKind, inst int, at time.Duration) executedStep {
		return executedStep{nemStep: nemStep{At: at, Kind: k, Inst: inst}, began: at, ended: at + ms}
	}
	type want struct{ kind, excused string }
	summarize := func(vs []nemViolation) []want {
		var out []want
		for _, v := range vs {
			w := want{kind: v.kind}
			if v.excused != "" {
				w.excused = strings.Fields(v.excused)[0]
			}
			out = append(out, w)
		}
		return out
	}
	single := nemRules{limit: 1}
	cases := []struct {
		name  string
		rules nemRules
		hist  *nemHistory
		steps []executedStep
		want  []want
	}{
		{"in turn", single, hist(h(0, 1, 0, 5*ms, 50*ms, false), h(1, 2, 10*ms, 50*ms, 90*ms, false)), nil, nil},
		{"overlap", single, hist(h(0, 1, 0, 5*ms, 50*ms, false), h(1, 2, 10*ms, 40*ms, 90*ms, false)), nil,
			[]want{{"exclusion", ""}}},
		{"overlap across a FLUSHALL", single, hist(h(0, 1, 0, 5*ms, 50*ms, false), h(1, 2, 10*ms, 40*ms, 90*ms, false)),
			[]executedStep{exec(nemFlush, 0, 20*ms)}, []want{{"exclusion", "across"}}},
		{"overlap, FLUSHALL after", single, hist(h(0, 1, 0, 5*ms, 50*ms, false), h(1, 2, 10*ms, 40*ms, 90*ms, false)),
			[]executedStep{exec(nemFlush, 0, 45*ms)}, []want{{"exclusion", ""}}},
		{"lost, told a little late", single, hist(h(0, 1, 0, 5*ms, 100*ms, true), h(1, 2, 10*ms, 60*ms, 90*ms, false)), nil, nil},
		{"lost, told too late", single, hist(h(0, 1, 0, 5*ms, 100*ms, true), h(1, 2, 10*ms, 40*ms, 90*ms, false)), nil,
			[]want{{"exclusion", ""}}},
		{"fence backwards across a restart", single, hist(h(0, 5, 0, 5*ms, 50*ms, false), h(1, 1, 60*ms, 70*ms, 90*ms, false)),
			[]executedStep{exec(nemKill, 0, 52*ms), exec(nemRestart, 0, 55*ms)}, []want{{"fence", ""}}},
		{"fences of grants asked for before the other ended", single,
			hist(h(0, 5, 0, 5*ms, 50*ms, false), h(1, 4, 40*ms, 70*ms, 90*ms, false)), nil, nil},
		{"one fence violation per grant", single, hist(h(0, 5, 0, 5*ms, 50*ms, false), h(1, 6, 55*ms, 60*ms, 70*ms, false),
			h(2, 3, 80*ms, 85*ms, 90*ms, false)), nil, []want{{"fence", ""}}},
		{"semaphore, a lease lost as it was granted", nemRules{limit: 2}, hist(h(0, 1, 0, 30*ms, 60*ms, true),
			h(1, 2, 0, 31*ms, 50*ms, false), h(2, 3, 0, 32*ms, 50*ms, false)), nil, nil},
		{"semaphore", nemRules{limit: 2}, hist(h(0, 1, 0, 5*ms, 50*ms, false), h(1, 2, 0, 6*ms, 50*ms, false),
			h(2, 3, 0, 7*ms, 50*ms, false), h(3, 4, 0, 51*ms, 60*ms, false)), nil, []want{{"exclusion", ""}}},
	}
	// Redlock: within the budget (one instance flushed), and outside it
	// (A and B paused and C flushed while the first grant held).
	rl := func() nemRules {
		return nemRules{limit: 1, redlock: true, budget: newBudget(5, 2, 100*ms, 0), attempt: 10 * ms}
	}
	overlap := hist(h(0, 1, 0, 5*ms, 80*ms, false), h(1, 2, 10*ms, 40*ms, 90*ms, false))
	cases = append(cases,
		struct {
			name  string
			rules nemRules
			hist  *nemHistory
			steps []executedStep
			want  []want
		}{"redlock within the budget", rl(), overlap, []executedStep{exec(nemPause, 2, 20*ms)}, []want{{"exclusion", ""}}},
		struct {
			name  string
			rules nemRules
			hist  *nemHistory
			steps []executedStep
			want  []want
		}{"redlock across a data loss", rl(), overlap, []executedStep{exec(nemFlush, 2, 20*ms)}, []want{{"exclusion", "across"}}},
		struct {
			name  string
			rules nemRules
			hist  *nemHistory
			steps []executedStep
			want  []want
		}{"redlock within the budget, strict", func() nemRules { r := rl(); r.strict = true; return r }(), overlap,
			[]executedStep{exec(nemFlush, 2, 20*ms)}, []want{{"exclusion", ""}}},
		struct {
			name  string
			rules nemRules
			hist  *nemHistory
			steps []executedStep
			want  []want
		}{"redlock outside the budget", rl(), overlap,
			[]executedStep{exec(nemPause, 0, 1*ms), exec(nemPause, 1, 2*ms), exec(nemFlush, 2, 20*ms), exec(nemResume, 0, 30*ms), exec(nemResume, 1, 30*ms)},
			[]want{{"exclusion", "outside"}}},
	)
	for _, c := range cases {
		got := summarize(checkNemesis(c.rules, c.hist, c.steps, time.Second))
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	slow := hist()
	slow.call("lock", 0, 0, nemCallDeadline+nemMargin+ms, nemCallDeadline, nil)
	slow.call("lock", 0, 0, nemCallDeadline+nemMargin, nemCallDeadline, nil)
	slow.call("release", 0, 2*time.Second, nemCallDeadline+nemMargin+100*ms, nemCallDeadline, nil)
	slow.stalls = []stall{{at: 2*time.Second + 300*ms, late: 120 * ms}}
	if got := summarize(checkNemesis(single, slow, nil, 3*time.Second)); !reflect.DeepEqual(got, []want{{"deadline", ""}, {"deadline", "starved:"}}) {
		t.Errorf("slow calls: %v", got)
	}
	// A lease told lost late while the process was starved.
	starved := hist(h(0, 1, 0, 5*ms, 200*ms, true), h(1, 2, 10*ms, 110*ms, 190*ms, false))
	if got := summarize(checkNemesis(single, starved, nil, time.Second)); len(got) != 1 {
		t.Errorf("lost lease told 90ms late: %v", got)
	}
	starved.stalls = []stall{{at: 190 * ms, late: 60 * ms}}
	if got := summarize(checkNemesis(single, starved, nil, time.Second)); len(got) != 0 {
		t.Errorf("lost lease told 90ms late, after a 60ms stall: %v", got)
	}
}

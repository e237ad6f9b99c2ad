package faults_test

// The nemesis's history and its checker: exclusion, fences never
// backwards, and calls back by their deadline, with what a Redlock and a
// single Redis each promise under the faults of a schedule.

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// nemHold is one grant as its client saw it; times are offsets from the
// start of the run.
type nemHold struct {
	client int
	fence  int64
	called time.Duration // the acquisition was called: the grant came after
	start  time.Duration // it returned the lease
	end    time.Duration // Release was called, or the lease's Context ended first
	lost   bool          // the Context ended first
}

func (h nemHold) String() string {
	how := "released"
	if h.lost {
		how = "lost"
	}
	return fmt.Sprintf("client %d's grant with fence %d (called +%dms, granted +%dms, %s +%dms)",
		h.client, h.fence, h.called.Milliseconds(), h.start.Milliseconds(), how, h.end.Milliseconds())
}

// nemHistory is what a run's clients recorded.
type nemHistory struct {
	mu       sync.Mutex
	holds    []nemHold
	ops      int
	slow     []slowCall     // calls that returned past their deadline plus the margin
	failures map[string]int // failed calls by error, for the log
	stalls   []stall        // the process's timers running late (watchScheduler)
}

// slowCall is a call that returned past its deadline plus the margin.
type slowCall struct {
	text                  string
	began, took, deadline time.Duration
}

// stall is a sleep of the scheduler watch that woke late by late, ending
// at at.
type stall struct{ at, late time.Duration }

// watchScheduler sleeps 5ms at a time until stop and records each wake-up
// more than 20ms late: a call past its deadline while the process itself
// was starved is told apart from one that the library held up.
func (h *nemHistory) watchScheduler(now func() time.Duration, stop <-chan struct{}) {
	const tick = 5 * time.Millisecond
	for {
		before := now()
		select {
		case <-stop:
			return
		case <-time.After(tick):
		}
		at := now()
		if late := at - before - tick; late > 20*time.Millisecond {
			h.mu.Lock()
			h.stalls = append(h.stalls, stall{at, late})
			h.mu.Unlock()
		}
	}
}

// worstStall is the latest the scheduler watch woke within [from, to].
func (h *nemHistory) worstStall(from, to time.Duration) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var worst time.Duration
	for _, s := range h.stalls {
		if s.at >= from && s.at-s.late <= to {
			worst = max(worst, s.late)
		}
	}
	return worst
}

func (h *nemHistory) add(x nemHold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds = append(h.holds, x)
}

// call records a call of client c that began at began (an offset) and
// took took, given deadline.
func (h *nemHistory) call(what string, c int, began, took, deadline time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops++
	if took > deadline+nemMargin {
		h.slow = append(h.slow, slowCall{fmt.Sprintf("client %d's %s called at +%dms returned after %v, %v past its %v deadline (%v)",
			c, what, began.Milliseconds(), took.Round(time.Millisecond), (took - deadline).Round(time.Millisecond), deadline, err),
			began, took, deadline})
	}
	if err != nil {
		k := err.Error()
		if len(k) > 70 {
			k = k[:70]
		}
		h.failures[what+": "+k]++
	}
}

// nemMargin is how late past its deadline a call may return.
const nemMargin = 250 * time.Millisecond

// nemLostSlack is how late the end of a lease told lost may be recorded:
// its Context ends by a timer (or a renewal's reply), and the goroutine
// that records the end must then run. README promises the timer's end
// within scheduling lateness (p99 4-14 ms measured on a 2-core machine
// with two busy processes); this is several times that, and well under
// the third of a TTL during which a lease whose lock was lost to a data
// loss stays live until its next renewal. When the process itself was
// starved just before (the scheduler watch woke late), the stall is
// allowed too.
const nemLostSlack = 50 * time.Millisecond

// nemViolation is one failed check.
type nemViolation struct {
	kind string // "exclusion", "fence" or "deadline"
	text string
	// excused, when set, is why it is not a violation of a promise: a
	// data loss on a single Redis (exclusion), a Redlock outside its fault
	// budget.
	excused string
}

// nemRules is what a run promises.
type nemRules struct {
	limit int // holders at once
	// redlock: exclusion and fences are promised while the run stayed
	// within the budget; on a single Redis, fences always, exclusion
	// except across a data loss.
	redlock bool
	// budget is the Redlock's accounting, restoring lost instances by
	// grants; attempt is how long before a grant returned its attempt may
	// have run.
	budget  *budget
	attempt time.Duration
	// strict: a Redlock's exclusion is judged across data losses too.
	// Without it, an overlap across an instance's data loss is excused:
	// a grant's quorum may be no more than a quorum (votes split between
	// contenders, not only faults, leave the rest out), and once one of
	// its instances forgets the grant, the instances left out and the
	// empty one make a quorum for another client. Only an instance kept
	// out for a TTL after it lost its data ("delayed restart") avoids it.
	strict bool
}

// executedStep is a step as the nemesis ran it: began and ended are
// offsets from the start of the run.
type executedStep struct {
	nemStep
	began, ended time.Duration
}

// budgetTime is the time at which the budget counts step s: faults from
// when they began, ends of faults and instances back from when the step
// was done.
func (s executedStep) budgetTime() time.Duration {
	switch s.Kind {
	case nemPause, nemKill, nemPartition:
		return s.began
	default:
		return s.ended
	}
}

// checkNemesis checks a run's history against rules, given the steps as
// they ran and the end of the run; it returns every violation found,
// excused or not.
func checkNemesis(rules nemRules, h *nemHistory, steps []executedStep, end time.Duration) []nemViolation {
	var out []nemViolation
	holds := slices.Clone(h.holds)
	sort.SliceStable(holds, func(i, j int) bool { return holds[i].start < holds[j].start })

	// Data losses (single Redis) and budget (Redlock).
	var losses []executedStep
	for _, s := range steps {
		if s.Kind == nemKill || s.Kind == nemFlush {
			losses = append(losses, s)
		}
	}
	lossWithin := func(from, to time.Duration) (executedStep, bool) {
		for _, l := range losses {
			if l.began <= to && l.ended >= from {
				return l, true
			}
		}
		return executedStep{}, false
	}
	var over []overBudget
	if rules.redlock && rules.budget != nil {
		var evs []budgetEvent
		for _, s := range steps {
			st := s.nemStep
			st.At = s.budgetTime()
			evs = append(evs, budgetEvent{at: st.At, step: &st})
		}
		for _, x := range holds {
			evs = append(evs, budgetEvent{at: x.start, from: x.start - rules.attempt, grant: true})
		}
		over = rules.budget.overIntervals(evs, end)
	}
	// excuse says why a violation between from and to is not one.
	excuse := func(kind string, from, to time.Duration) string {
		if rules.redlock {
			if ob, ok := exceeded(over, from, to); ok {
				return fmt.Sprintf("outside the fault budget from +%dms to +%dms (%s)", ob.from.Milliseconds(), ob.to.Milliseconds(), ob.what)
			}
		}
		if kind == "exclusion" && (!rules.redlock || !rules.strict) {
			if l, ok := lossWithin(from, to); ok {
				return fmt.Sprintf("across a data loss (%s at +%dms)", l.nemStep, l.began.Milliseconds())
			}
		}
		return ""
	}

	// (a) Exclusion: no more than limit valid at once. A lease told lost
	// by its timer ended when that timer ran, which may be late by
	// scheduling: such an end counts lostSlack earlier.
	validUntil := func(x nemHold) time.Duration {
		if x.lost {
			return max(x.start, x.end-nemLostSlack-h.worstStall(x.end-200*time.Millisecond, x.end))
		}
		return x.end
	}
	if rules.limit == 1 {
		for i, a := range holds {
			for _, b := range holds[i+1:] {
				if b.start >= validUntil(a) {
					continue
				}
				if a.client == b.client {
					continue
				}
				out = append(out, nemViolation{kind: "exclusion",
					text:    fmt.Sprintf("two holders at once: %s and %s", a, b),
					excused: excuse("exclusion", a.called, b.start)})
			}
		}
	} else {
		type ev struct {
			at    time.Duration
			delta int
			i     int
		}
		var evs []ev
		for i, x := range holds {
			if until := validUntil(x); until > x.start { // else never valid
				evs = append(evs, ev{x.start, +1, i}, ev{until, -1, i})
			}
		}
		sort.SliceStable(evs, func(i, j int) bool {
			if evs[i].at != evs[j].at {
				return evs[i].at < evs[j].at
			}
			return evs[i].delta < evs[j].delta // ends first
		})
		active := map[int]bool{}
		for _, e := range evs {
			if e.delta < 0 {
				delete(active, e.i)
				continue
			}
			active[e.i] = true
			if len(active) <= rules.limit {
				continue
			}
			var who []string
			from := e.at
			for _, i := range slices.Sorted(maps.Keys(active)) {
				who = append(who, holds[i].String())
				from = min(from, holds[i].called)
			}
			out = append(out, nemViolation{kind: "exclusion",
				text:    fmt.Sprintf("%d holders at once, limit %d: %s", len(active), rules.limit, strings.Join(who, "; ")),
				excused: excuse("exclusion", from, e.at)})
		}
	}

	// (b) Fences: a grant asked for after another ended has a higher
	// fence. One violation per later grant, against the highest fence
	// that ended before it was asked for.
	for _, b := range holds {
		var worst *nemHold
		for k := range holds {
			a := &holds[k]
			if a.end < b.called && a.fence >= b.fence && (worst == nil || a.fence > worst.fence) {
				worst = a
			}
		}
		if worst != nil {
			out = append(out, nemViolation{kind: "fence",
				text:    fmt.Sprintf("fence not above an earlier grant's: %s was asked for after %s had ended", b, *worst),
				excused: excuse("fence", worst.called, b.start)})
		}
	}

	// (c) Every call back by its deadline plus the margin.
	// A call late by no more than the process itself was starved
	// meanwhile (its timers ran that late) is excused.
	for _, s := range h.slow {
		v := nemViolation{kind: "deadline", text: s.text}
		stall := h.worstStall(s.began, s.began+s.took)
		if stall > 0 {
			v.text += fmt.Sprintf("; meanwhile the process's timers ran up to %v late", stall.Round(time.Millisecond))
		}
		if over := s.took - s.deadline - nemMargin; over <= stall {
			v.excused = fmt.Sprintf("starved: the process's timers ran %v late while the call was %v over its margin", stall.Round(time.Millisecond), over.Round(time.Millisecond))
		}
		out = append(out, v)
	}
	return out
}

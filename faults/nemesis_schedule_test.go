package faults_test

// The nemesis's schedules: a seeded, replayable sequence of faults over a
// set of redis-server instances and the clients that reach them, and the
// fault budget that bounds how many instances a Redlock may have impaired
// at once.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// nemKind is what a step of a schedule does.
type nemKind uint8

const (
	nemCalm      nemKind = iota // nothing: the clients run on
	nemPause                    // SIGSTOP the instance
	nemResume                   // SIGCONT it
	nemKill                     // SIGKILL it: down, its data gone
	nemRestart                  // start it again, empty, on the same port
	nemFlush                    // FLUSHALL on it: up, its data gone
	nemPartition                // black-hole one client's proxy to the instance
	nemHeal                     // let that proxy's bytes through again
	nemMigrate                  // move the lock's slot to Cluster master Inst, with its keys
)

var nemKindNames = [...]string{"calm", "pause", "resume", "kill", "restart", "flushall", "partition", "heal", "migrate"}

func (k nemKind) String() string { return nemKindNames[k] }

// nemStep is one step of a schedule, At after the run began.
type nemStep struct {
	At     time.Duration
	Kind   nemKind
	Inst   int // the instance (every kind but calm)
	Client int // the client (partition, heal)
}

func instName(i int) string { return string(rune('A' + i)) }

func (s nemStep) String() string {
	switch s.Kind {
	case nemCalm:
		return "calm"
	case nemPartition, nemHeal:
		return fmt.Sprintf("%s client %d from %s", s.Kind, s.Client, instName(s.Inst))
	case nemMigrate:
		return fmt.Sprintf("migrate the lock's slot to %s", instName(s.Inst))
	default:
		return fmt.Sprintf("%s %s", s.Kind, instName(s.Inst))
	}
}

// nemSchedule is what a seed generates.
type nemSchedule struct {
	Seed   uint64
	Steps  []nemStep
	Length time.Duration // the last step is at or before it
}

// String lists the steps with their times, planned and, when given (one
// per step), as executed.
func (s nemSchedule) String() string { return s.format(nil) }

func (s nemSchedule) format(actual []time.Duration) string {
	var b strings.Builder
	for i, st := range s.Steps {
		fmt.Fprintf(&b, "  %2d  +%4dms", i, st.At.Milliseconds())
		if i < len(actual) {
			fmt.Fprintf(&b, " (ran +%4dms)", actual[i].Milliseconds())
		}
		fmt.Fprintf(&b, "  %s\n", st)
	}
	return b.String()
}

// Budget.
//
// A Redlock of N instances and quorum Q keeps its promises (exclusion,
// fences never backwards) while no more than N-Q instances are impaired at
// any one time. An instance is impaired
//
//   - while it is paused, down, or partitioned from any client;
//   - for grace after a pause or partition of it ends: it may hold a lock
//     that it could not release meanwhile, or that a late copy of an
//     attempt (bytes held by the pause or the partition) took when it
//     ended, and refuse grants until that lock's TTL runs out. grace covers
//     that TTL plus the life of a lease granted while it refused (the
//     longest hold, and the attempt's rounds), so that a lease granted
//     without it is over before it counts as whole again;
//   - after it lost its data (SIGKILL and restart, or FLUSHALL), until it
//     is restored: until a grant whose attempt ran after it was back, and
//     while it was otherwise unimpaired, re-established the fence on it.
//     The generator cannot see grants: it counts a lost instance restored
//     once it has been back and otherwise unimpaired for recover, long
//     enough for clients that take the lock continually to have been
//     granted it; the checker replays the run's real grants instead.
//
// budget does the accounting for one run, fed steps (and grants) in time
// order.
type budget struct {
	limit   int           // most instances impaired at once; < 0: no limit
	grace   time.Duration // how long a pause or partition impairs after it ends
	recover time.Duration // > 0: restore lost instances by time (the generator); 0: by grants (the checker)
	insts   []instState
}

type instState struct {
	paused, down bool
	parts        uint64        // clients partitioned from it, a bit each
	healed       time.Duration // when its last pause or partition ended
	lost         bool          // its data was lost and it was not restored since
	back         time.Duration // when it was up again after the loss
}

// never is a time before any run: nothing healed or came back then.
const never = -time.Hour

func newBudget(instances, limit int, grace, recover time.Duration) *budget {
	b := &budget{limit: limit, grace: grace, recover: recover, insts: make([]instState, instances)}
	for i := range b.insts {
		b.insts[i].healed = never
	}
	return b
}

func (b *budget) clone() *budget {
	c := *b
	c.insts = slices.Clone(b.insts)
	return &c
}

// faulted reports whether instance i is paused, down or partitioned.
func (s *instState) faulted() bool { return s.paused || s.down || s.parts != 0 }

// apply records step s, at s.At.
func (b *budget) apply(s nemStep) {
	if s.Kind == nemCalm {
		return
	}
	in := &b.insts[s.Inst]
	wasHeld := in.paused || in.parts != 0
	switch s.Kind {
	case nemPause:
		in.paused = true
	case nemResume:
		in.paused = false
	case nemKill:
		in.paused, in.down, in.lost = false, true, true
	case nemRestart:
		in.down, in.back = false, s.At
	case nemFlush:
		in.lost, in.back = true, s.At
	case nemPartition:
		in.parts |= 1 << s.Client
	case nemHeal:
		in.parts &^= 1 << s.Client
	}
	// A pause or partition that ends leaves the instance impaired for
	// grace; one that ends because the instance was killed does not (its
	// data, and any lock it could not release, are gone).
	if wasHeld && !(in.paused || in.parts != 0) && s.Kind != nemKill {
		in.healed = s.At
	}
}

// grant records a grant whose attempt ran within [from, at]: it restores
// every lost instance that was back before from and unimpaired otherwise
// throughout (only when restoring by grants).
func (b *budget) grant(from, at time.Duration) {
	if b.recover > 0 {
		return
	}
	for i := range b.insts {
		in := &b.insts[i]
		if in.lost && !in.faulted() && in.back <= from && in.healed+b.grace <= from {
			in.lost = false
		}
	}
}

// restoredAt is when lost instance i counts as restored by time (the
// generator's rule), given no further step.
func (b *budget) restoredAt(i int) time.Duration {
	in := &b.insts[i]
	return max(in.back, in.healed+b.grace) + b.recover
}

// impaired reports whether instance i is impaired at at (no earlier than
// the last step applied).
func (b *budget) impaired(i int, at time.Duration) bool {
	in := &b.insts[i]
	switch {
	case in.faulted():
		return true
	case at < in.healed+b.grace:
		return true
	case in.lost && b.recover > 0:
		return at < b.restoredAt(i)
	default:
		return in.lost
	}
}

// count is the number of instances impaired at at.
func (b *budget) count(at time.Duration) int {
	n := 0
	for i := range b.insts {
		if b.impaired(i, at) {
			n++
		}
	}
	return n
}

// allows reports whether step s keeps the run within the budget: after
// it, no more than limit instances impaired. Between steps the count only
// falls (graces end, lost instances are restored), so checking at each
// step is enough.
func (b *budget) allows(s nemStep) bool {
	if b.limit < 0 {
		return true
	}
	c := b.clone()
	c.apply(s)
	return c.count(s.At) <= b.limit
}

// describe says which instances are impaired at at, and why.
func (b *budget) describe(at time.Duration) string {
	var out []string
	for i := range b.insts {
		if !b.impaired(i, at) {
			continue
		}
		in := &b.insts[i]
		var why []string
		if in.paused {
			why = append(why, "paused")
		}
		if in.down {
			why = append(why, "down")
		}
		if in.parts != 0 {
			why = append(why, fmt.Sprintf("partitioned from clients %s", bitList(in.parts)))
		}
		if !in.paused && in.parts == 0 && at < in.healed+b.grace {
			why = append(why, fmt.Sprintf("healed %dms ago", (at-in.healed).Milliseconds()))
		}
		if in.lost && (b.recover == 0 || at < b.restoredAt(i)) {
			why = append(why, "lost its data, not restored")
		}
		out = append(out, instName(i)+" "+strings.Join(why, ", "))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

func bitList(m uint64) string {
	var out []string
	for i := 0; m != 0; i, m = i+1, m>>1 {
		if m&1 != 0 {
			out = append(out, fmt.Sprint(i))
		}
	}
	return strings.Join(out, ",")
}

// overBudget is a time interval with more than limit instances impaired.
type overBudget struct {
	from, to time.Duration
	what     string // the impaired instances at from
}

// dropsWithin returns the times in (from, to) at which an instance stops
// being impaired without a step: graces ending, lost instances restored
// by time.
func (b *budget) dropsWithin(from, to time.Duration) []time.Duration {
	var ds []time.Duration
	for i := range b.insts {
		in := &b.insts[i]
		cand := []time.Duration{in.healed + b.grace}
		if in.lost && b.recover > 0 {
			cand = append(cand, b.restoredAt(i))
		}
		for _, d := range cand {
			if d > from && d < to {
				ds = append(ds, d)
			}
		}
	}
	slices.Sort(ds)
	return ds
}

// overUntil returns the part of [from, to) from its start during which the
// budget is exceeded, given no step within; ok false when it is not
// exceeded at from.
func (b *budget) overUntil(from, to time.Duration) (ob overBudget, ok bool) {
	if b.limit < 0 || b.count(from) <= b.limit {
		return overBudget{}, false
	}
	ob = overBudget{from: from, to: to, what: b.describe(from)}
	for _, d := range b.dropsWithin(from, to) {
		if b.count(d) <= b.limit {
			ob.to = d
			break
		}
	}
	return ob, true
}

// budgetEvent is a step or a grant at a time, for replaying a run.
type budgetEvent struct {
	at    time.Duration
	step  *nemStep      // a step, or
	from  time.Duration // a grant whose attempt ran within [from, at]
	grant bool
}

// overIntervals replays events (in any order) through b and returns the
// intervals during which more than its limit were impaired, up to end.
func (b *budget) overIntervals(events []budgetEvent, end time.Duration) []overBudget {
	events = slices.Clone(events)
	slices.SortStableFunc(events, func(x, y budgetEvent) int {
		if x.at != y.at {
			return int(x.at - y.at)
		}
		// Steps before grants at the same time: a grant counts only
		// what happened before it.
		if x.grant != y.grant {
			if x.grant {
				return 1
			}
			return -1
		}
		return 0
	})
	var out []overBudget
	for k, e := range events {
		if e.grant {
			b.grant(e.from, e.at)
		} else {
			b.apply(*e.step)
		}
		next := end
		if k+1 < len(events) {
			next = events[k+1].at
		}
		if next <= e.at {
			continue
		}
		if ob, ok := b.overUntil(e.at, next); ok {
			if n := len(out); n > 0 && out[n-1].to == ob.from {
				out[n-1].to = ob.to // one interval across events
			} else {
				out = append(out, ob)
			}
		}
	}
	return out
}

// exceeded returns the first interval of obs that meets [from, to].
func exceeded(obs []overBudget, from, to time.Duration) (overBudget, bool) {
	for _, ob := range obs {
		if ob.from <= to && ob.to > from {
			return ob, true
		}
	}
	return overBudget{}, false
}

// Generator.

// genConfig is what a schedule is generated for.
type genConfig struct {
	instances, clients int
	limit              int           // fault budget: most instances impaired at once; < 0: none
	grace, recover     time.Duration // see budget
	length             time.Duration // faults until then, then everything heals
	minGap, maxGap     time.Duration // time between steps
	// cluster: the instances are the masters of a Redis Cluster, whose
	// clients reach every node directly (no proxy: no partition), and
	// the lock's slot, on instance 0 at first, moves between them
	// (nemMigrate) when both ends are up and running.
	cluster bool
}

// generate returns the schedule of seed for cfg: steps at random gaps of
// minGap to maxGap (log-uniform: mostly short, some long), each a fault or
// its end or calm, chosen at random among those the budget allows, until
// cfg.length; then every fault still in force ends (resume, heal, restart),
// so that the run ends whole.
func generate(seed uint64, cfg genConfig) nemSchedule {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973)) // "nemesis"
	gap := func() time.Duration {
		lo, hi := float64(cfg.minGap), float64(cfg.maxGap)
		return time.Duration(lo * math.Pow(hi/lo, rng.Float64())).Round(time.Millisecond)
	}
	b := newBudget(cfg.instances, cfg.limit, cfg.grace, cfg.recover)
	s := nemSchedule{Seed: seed, Length: cfg.length}
	type cand struct {
		step   nemStep
		weight int
	}
	owner := 0 // cluster: the master the lock's slot is on
	at := gap()
	for at < cfg.length {
		cands := []cand{{nemStep{At: at, Kind: nemCalm}, 3}}
		add := func(st nemStep, w int) {
			st.At = at
			if b.allows(st) {
				cands = append(cands, cand{st, w})
			}
		}
		for i := range b.insts {
			in := b.insts[i]
			switch {
			case in.down:
				add(nemStep{Kind: nemRestart, Inst: i}, 4)
				continue
			case in.paused:
				add(nemStep{Kind: nemResume, Inst: i}, 4)
			default:
				add(nemStep{Kind: nemPause, Inst: i}, 2)
				add(nemStep{Kind: nemFlush, Inst: i}, 1)
			}
			add(nemStep{Kind: nemKill, Inst: i}, 1)
			if cfg.cluster {
				if up := b.insts[owner]; i != owner && !in.paused && !up.paused && !up.down {
					add(nemStep{Kind: nemMigrate, Inst: i}, 3)
				}
				continue // no proxies: no partition
			}
			var free []int // clients not partitioned from it
			for c := 0; c < cfg.clients; c++ {
				if in.parts&(1<<c) != 0 {
					add(nemStep{Kind: nemHeal, Inst: i, Client: c}, 4)
				} else {
					free = append(free, c)
				}
			}
			if len(free) > 0 {
				add(nemStep{Kind: nemPartition, Inst: i, Client: free[rng.IntN(len(free))]}, 2)
			}
		}
		total := 0
		for _, c := range cands {
			total += c.weight
		}
		pick := rng.IntN(total)
		for _, c := range cands {
			if pick -= c.weight; pick < 0 {
				s.Steps = append(s.Steps, c.step)
				b.apply(c.step)
				if c.step.Kind == nemMigrate {
					owner = c.step.Inst
				}
				break
			}
		}
		at += gap()
	}
	// Everything heals at the end.
	end := cfg.length
	for i, in := range b.insts {
		if in.paused {
			s.Steps = append(s.Steps, nemStep{At: end, Kind: nemResume, Inst: i})
		}
		for c := 0; c < cfg.clients; c++ {
			if in.parts&(1<<c) != 0 {
				s.Steps = append(s.Steps, nemStep{At: end, Kind: nemHeal, Inst: i, Client: c})
			}
		}
		if in.down {
			s.Steps = append(s.Steps, nemStep{At: end, Kind: nemRestart, Inst: i})
		}
	}
	return s
}

package faults_test

// Unit tests of the nemesis's fault budget and schedule generator (no
// Redis needed).

import (
	"reflect"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestNemesisBudget(t *testing.T) {
	t.Run("by time", func(t *testing.T) {
		b := newBudget(5, 2, 100*ms, 50*ms)
		step := func(at time.Duration, k nemKind, inst, client int) nemStep {
			return nemStep{At: at, Kind: k, Inst: inst, Client: client}
		}
		apply := func(s nemStep) {
			t.Helper()
			if !b.allows(s) {
				t.Fatalf("%v at %v refused with %s impaired", s, s.At, b.describe(s.At))
			}
			b.apply(s)
		}
		want := func(at time.Duration, n int) {
			t.Helper()
			if got := b.count(at); got != n {
				t.Errorf("at %v: %d impaired (%s), want %d", at, got, b.describe(at), n)
			}
		}
		apply(step(0, nemPause, 0, 0))
		want(0, 1)
		apply(step(10*ms, nemPartition, 1, 1)) // client 1 from B
		want(10*ms, 2)
		for _, s := range []nemStep{step(20*ms, nemPause, 2, 0), step(20*ms, nemFlush, 2, 0),
			step(20*ms, nemKill, 3, 0), step(20*ms, nemPartition, 4, 0)} {
			if b.allows(s) {
				t.Errorf("%v allowed with A and B impaired", s)
			}
		}
		// Already impaired: more of the same costs nothing.
		for _, s := range []nemStep{step(20*ms, nemPartition, 1, 2), step(20*ms, nemKill, 0, 0), step(20*ms, nemFlush, 1, 0)} {
			if !b.allows(s) {
				t.Errorf("%v refused, though its instance is impaired already", s)
			}
		}
		apply(step(30*ms, nemResume, 0, 0))
		want(30*ms, 2) // A in its grace
		want(129*ms, 2)
		want(130*ms, 1)
		if b.allows(step(100*ms, nemPause, 2, 0)) || !b.allows(step(130*ms, nemPause, 2, 0)) {
			t.Errorf("pause C allowed before A's grace ended, or refused after")
		}
		if got := b.describe(100 * ms); got != "A healed 70ms ago; B partitioned from clients 1" {
			t.Errorf("describe: %q", got)
		}
		apply(step(200*ms, nemHeal, 1, 1))
		want(299*ms, 1)
		want(300*ms, 0)

		// A kill: down, then lost until back and whole for recover.
		apply(step(400*ms, nemKill, 2, 0))
		want(400*ms, 1)
		apply(step(450*ms, nemRestart, 2, 0))
		want(499*ms, 1)
		want(500*ms, 0)
		// FLUSHALL: lost at once, restored recover later.
		apply(step(600*ms, nemFlush, 3, 0))
		want(649*ms, 1)
		want(650*ms, 0)
		// A paused instance killed: no grace (its locks are gone), lost.
		apply(step(700*ms, nemPause, 4, 0))
		apply(step(710*ms, nemKill, 4, 0))
		apply(step(720*ms, nemRestart, 4, 0))
		want(769*ms, 1)
		want(770*ms, 0)
		// A lost instance paused again before it was restored: restored
		// recover after its grace.
		apply(step(800*ms, nemFlush, 0, 0))
		apply(step(820*ms, nemPause, 0, 0))
		apply(step(830*ms, nemResume, 0, 0))
		want(979*ms, 1)
		want(980*ms, 0)
	})

	t.Run("by grants", func(t *testing.T) {
		b := newBudget(3, 1, 100*ms, 0)
		b.apply(nemStep{At: 0, Kind: nemFlush, Inst: 0})
		b.grant(-10*ms, 5*ms) // its attempt may have run before the flush
		if b.count(1000*ms) != 1 {
			t.Errorf("restored by a grant whose attempt may have come before the loss")
		}
		b.grant(1*ms, 20*ms)
		if b.count(20*ms) != 0 {
			t.Errorf("not restored by a grant after it: %s", b.describe(20*ms))
		}
		b.apply(nemStep{At: 30 * ms, Kind: nemPause, Inst: 1})
		b.apply(nemStep{At: 40 * ms, Kind: nemKill, Inst: 1})
		b.grant(35*ms, 45*ms)
		b.apply(nemStep{At: 50 * ms, Kind: nemRestart, Inst: 1})
		b.grant(45*ms, 60*ms)
		if b.count(60*ms) != 1 {
			t.Errorf("restored by grants before it was back: %s", b.describe(60*ms))
		}
		b.apply(nemStep{At: 70 * ms, Kind: nemPartition, Inst: 1, Client: 2})
		b.apply(nemStep{At: 80 * ms, Kind: nemHeal, Inst: 1, Client: 2})
		b.grant(100*ms, 120*ms) // within the partition's grace
		if b.count(1000*ms) != 1 {
			t.Errorf("restored by a grant while it could not take part: %s", b.describe(1000*ms))
		}
		b.grant(180*ms, 200*ms)
		if b.count(200*ms) != 0 {
			t.Errorf("not restored: %s", b.describe(200*ms))
		}
	})

	t.Run("over intervals", func(t *testing.T) {
		b := newBudget(3, 1, 100*ms, 0)
		st := func(at time.Duration, k nemKind, i int) *nemStep { return &nemStep{At: at, Kind: k, Inst: i} }
		evs := []budgetEvent{
			{at: 60 * ms, step: st(60*ms, nemResume, 1)},
			{at: 0, step: st(0, nemPause, 0)},
			{at: 10 * ms, step: st(10*ms, nemPause, 1)},
			{at: 50 * ms, step: st(50*ms, nemResume, 0)},
			{at: 300 * ms, step: st(300*ms, nemFlush, 2)},
			{at: 310 * ms, step: st(310*ms, nemPause, 0)},
			{at: 320 * ms, step: st(320*ms, nemResume, 0)},
			{at: 400 * ms, from: 290 * ms, grant: true}, // its attempt may have come before the flush
			{at: 500 * ms, from: 430 * ms, grant: true},
		}
		obs := b.overIntervals(evs, time.Second)
		if len(obs) != 2 || obs[0].from != 10*ms || obs[0].to != 150*ms || obs[1].from != 310*ms || obs[1].to != 420*ms {
			t.Fatalf("over budget: %+v", obs)
		}
		for _, c := range []struct {
			from, to time.Duration
			want     bool
		}{{0, 9 * ms, false}, {0, 10 * ms, true}, {149 * ms, 200 * ms, true}, {150 * ms, 300 * ms, false}, {420 * ms, 900 * ms, false}} {
			if _, got := exceeded(obs, c.from, c.to); got != c.want {
				t.Errorf("exceeded within [%v, %v]: %v, want %v", c.from, c.to, got, c.want)
			}
		}
	})
}

func testGenConfig(limit int) genConfig {
	return genConfig{instances: 5, clients: 4, limit: limit, grace: 750 * ms, recover: 250 * ms,
		length: 1500 * ms, minGap: 20 * ms, maxGap: 300 * ms}
}

func TestNemesisGenerator(t *testing.T) {
	cfg := testGenConfig(2)
	if a, b := generate(7, cfg), generate(7, cfg); !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7 gave two schedules:\n%s\n%s", a, b)
	}
	if a, b := generate(7, cfg), generate(8, cfg); reflect.DeepEqual(a.Steps, b.Steps) {
		t.Errorf("seeds 7 and 8 gave the same schedule")
	}
	t.Logf("seed 7, Redlock(5):\n%s", generate(7, cfg))
	t.Logf("seed 7, one Redis:\n%s", generate(7, genConfig{instances: 1, clients: 4, limit: -1, grace: 750 * ms,
		recover: 250 * ms, length: 1500 * ms, minGap: 20 * ms, maxGap: 300 * ms}))

	for _, cfg := range []genConfig{testGenConfig(2), testGenConfig(1), testGenConfig(-1),
		{instances: 1, clients: 4, limit: -1, grace: 750 * ms, recover: 250 * ms, length: 1500 * ms, minGap: 20 * ms, maxGap: 300 * ms}} {
		kinds := map[nemKind]int{}
		steps := 0
		for seed := uint64(1); seed <= 500; seed++ {
			s := generate(seed, cfg)
			b := newBudget(cfg.instances, cfg.limit, cfg.grace, cfg.recover)
			var prev time.Duration
			for i, st := range s.Steps {
				kinds[st.Kind]++
				steps++
				in := b.insts[st.Inst]
				valid := map[nemKind]bool{
					nemCalm:      true,
					nemPause:     !in.paused && !in.down,
					nemResume:    in.paused,
					nemKill:      !in.down,
					nemRestart:   in.down,
					nemFlush:     !in.paused && !in.down,
					nemPartition: in.parts&(1<<st.Client) == 0,
					nemHeal:      in.parts&(1<<st.Client) != 0,
				}[st.Kind]
				if !valid {
					t.Fatalf("seed %d step %d: %v in state %+v\n%s", seed, i, st, in, s)
				}
				if st.At < prev || st.At > cfg.length {
					t.Fatalf("seed %d step %d at %v after %v (length %v)", seed, i, st.At, prev, cfg.length)
				}
				if st.At < s.Length && st.At-prev < cfg.minGap && i > 0 {
					t.Fatalf("seed %d step %d: %v after the one before", seed, i, st.At-prev)
				}
				prev = st.At
				b.apply(st)
				if cfg.limit >= 0 && b.count(st.At) > cfg.limit {
					t.Fatalf("seed %d step %d (%v): %s impaired, budget %d\n%s", seed, i, st, b.describe(st.At), cfg.limit, s)
				}
			}
			for i, in := range b.insts {
				if in.faulted() {
					t.Fatalf("seed %d ends with %s faulted: %+v\n%s", seed, instName(i), in, s)
				}
			}
		}
		for k := nemCalm; k <= nemHeal; k++ {
			if kinds[k] == 0 {
				t.Errorf("limit %d, %d instances: no %v step in 500 seeds", cfg.limit, cfg.instances, k)
			}
		}
		t.Logf("limit %d, %d instances: 500 seeds, %d steps: %v", cfg.limit, cfg.instances, steps, kinds)
	}
}

// TestNemesisGeneratorCluster: a Cluster's schedules move the lock's slot
// only between two masters that are up and running, from the one it is
// on, never partition (there are no proxies), and use every other kind.
func TestNemesisGeneratorCluster(t *testing.T) {
	cfg := genConfig{instances: 3, clients: 4, limit: -1, grace: 750 * ms, recover: 250 * ms,
		length: 1500 * ms, minGap: 20 * ms, maxGap: 300 * ms, cluster: true}
	t.Logf("seed 7, Cluster:\n%s", generate(7, cfg))
	kinds := map[nemKind]int{}
	for seed := uint64(1); seed <= 500; seed++ {
		s := generate(seed, cfg)
		b := newBudget(cfg.instances, cfg.limit, cfg.grace, cfg.recover)
		owner := 0
		for i, st := range s.Steps {
			kinds[st.Kind]++
			if st.Kind == nemPartition || st.Kind == nemHeal {
				t.Fatalf("seed %d step %d: %v on a Cluster\n%s", seed, i, st, s)
			}
			if st.Kind == nemMigrate {
				from, to := b.insts[owner], b.insts[st.Inst]
				if st.Inst == owner || from.paused || from.down || to.paused || to.down {
					t.Fatalf("seed %d step %d: %v from %s (%+v) to %+v\n%s", seed, i, st, instName(owner), from, to, s)
				}
				owner = st.Inst
			}
			b.apply(st)
		}
	}
	for _, k := range []nemKind{nemCalm, nemPause, nemResume, nemKill, nemRestart, nemFlush, nemMigrate} {
		if kinds[k] == 0 {
			t.Errorf("no %v step in 500 seeds", k)
		}
	}
	t.Logf("500 seeds: %v", kinds)
}

// Command bench measures latchkit side by side with its peers and with the
// physical floor (the two round trips any safe Redis lock costs), on
// redis-server processes it starts itself on loopback:
//
//	cd bench && go run . [-quick]
//
// It prints a Markdown report to stdout: S1 uncontended lock+unlock from
// one goroutine, S2 from 64 goroutines, S3 16 clients contending for one
// key, S4 Redlock over five instances, S5 100,000 waiters over 10,000
// names across 8 processes, and allocations per operation, each beside
// the targets. Contenders run interleaved, round after
// round (each round's order rotated by one), and every figure is the
// median over the rounds (max wait: the worst of them), so that drift of
// the machine during the run cancels out of the ratios.
//
// This is its own module so that users of latchkit never download the
// peers it compares against.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// config is what the flags choose.
type config struct {
	rounds      int           // S3 rounds
	urounds     int           // S1, S2 and S4 rounds
	uncontended time.Duration // per contender per round, S1, S2 and S4
	contended   time.Duration // per contender per round, S3
	goroutines  int           // S2
	clients     int           // S3
	hold        time.Duration // S3
	only        string        // run only this scenario (S1..S5, allocs); empty: all
	scale       scaleConfig   // S5
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run parses the flags, starts the servers, runs the scenarios and prints
// the report. The servers are stopped whatever happens, Ctrl-C included.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a short run (3 uncontended rounds of 0.2 s, 1 contended round of 2 s)")
	cfg := config{goroutines: 64, clients: 16, hold: time.Millisecond}
	fs.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds of S3; figures are medians over them")
	fs.IntVar(&cfg.urounds, "urounds", 9, "interleaved rounds of S1, S2 and S4 (short runs, many rounds: drift cancels better)")
	fs.StringVar(&cfg.only, "only", "", "run only one scenario: S1, S2, S3, S4, S5 or allocs; or S2x (where S2's Redis CPU goes) or S2p (the other primitives beside minimal scripts), run only when asked")
	cfg.scale = scaleConfig{hold: time.Millisecond, timeout: 15 * time.Minute}
	fs.IntVar(&cfg.scale.waiters, "s5.waiters", 100000, "S5: waiters in all")
	fs.IntVar(&cfg.scale.names, "s5.names", 10000, "S5: names they wait on")
	fs.IntVar(&cfg.scale.procs, "s5.procs", 8, "S5: processes (clients standing in for them) the waiters are spread over")
	memNames := fs.Int("memory", 0, "measure instead the memory of this many distinct names, each locked once (M1), and again after their retention")
	topNames := fs.Int("top", 0, "measure instead latchctl top on this many held Mutex names (T1): top -once 3 times, the live view 10 refreshes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.uncontended, cfg.contended = 600*time.Millisecond, 5*time.Second
	if *quick {
		cfg.uncontended, cfg.contended = 200*time.Millisecond, 2*time.Second
		if !flagSet(fs, "rounds") {
			cfg.rounds = 1
		}
		if !flagSet(fs, "urounds") {
			cfg.urounds = 3
		}
		if !flagSet(fs, "s5.waiters") {
			cfg.scale.waiters = 10000
		}
		if !flagSet(fs, "s5.names") {
			cfg.scale.names = 1000
		}
	}
	if cfg.rounds < 1 || cfg.urounds < 1 {
		return fmt.Errorf("-rounds %d, -urounds %d: want at least 1", cfg.rounds, cfg.urounds)
	}

	if *memNames > 0 {
		srv, err := startServer(ctx)
		if err != nil {
			return err
		}
		defer srv.stop()
		res, err := measureMemory(ctx, srv, *memNames, cfg.goroutines, 10*time.Second, func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) })
		if err != nil {
			return err
		}
		res.write(stdout)
		return nil
	}

	if *topNames > 0 {
		srv, err := startServer(ctx)
		if err != nil {
			return err
		}
		defer srv.stop()
		res, err := measureTop(ctx, srv, topConfig{names: *topNames, onces: 3, refreshes: 10}, func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) })
		if err != nil {
			return err
		}
		res.write(stdout)
		return nil
	}

	servers := make([]*server, 0, 5)
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for range 5 {
		s, err := startServer(ctx)
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}
	rep := &report{cfg: cfg, quick: *quick, redisVersion: servers[0].version(ctx)}
	progress := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	if err := measureAll(ctx, cfg, servers, rep, progress); err != nil {
		return err
	}
	rep.write(stdout)
	return nil
}

// flagSet reports whether the flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// rotated is the order of n contenders in a round: each round starts one
// further on, so that no contender always runs first (or right after the
// same other one).
func rotated(n, round int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = (i + round) % n
	}
	return order
}

// measureAll runs the chosen scenarios into rep.
func measureAll(ctx context.Context, cfg config, servers []*server, rep *report, progress func(string, ...any)) error {
	want := func(s string) bool { return cfg.only == "" || cfg.only == s }
	flush := func(ss []*server) error {
		for _, s := range ss {
			if err := s.admin.FlushAll(ctx).Err(); err != nil {
				return fmt.Errorf("FLUSHALL on %s: %w", s.Addr, err)
			}
		}
		return nil
	}
	uncontended := func(title string, cs []contender, ss []*server, g int) (*uncontendedTable, error) {
		t := &uncontendedTable{title: title, goroutines: g, results: make([][]uncontendedResult, len(cs)), contenders: cs}
		for round := range cfg.urounds {
			for _, i := range rotated(len(cs), round) {
				c := cs[i]
				if err := flush(ss); err != nil {
					return nil, err
				}
				progress("%s round %d: %s", title[:2], round+1, c.name)
				r, err := runUncontended(ctx, c, ss, g, cfg.uncontended, fmt.Sprintf("u%d:%d:", round, i))
				if err != nil {
					return nil, err
				}
				t.results[i] = append(t.results[i], r)
			}
		}
		return t, nil
	}
	var err error
	if want("S1") {
		if rep.s1, err = uncontended("S1: uncontended lock+unlock, 1 goroutine, fresh keys", singleContenders(), servers[:1], 1); err != nil {
			return err
		}
	}
	if want("S2") {
		if rep.s2, err = uncontended(fmt.Sprintf("S2: uncontended lock+unlock, %d goroutines on one client, distinct fresh keys", cfg.goroutines), singleContenders(), servers[:1], cfg.goroutines); err != nil {
			return err
		}
	}
	if cfg.only == "S2p" {
		if rep.s2p, err = uncontended(fmt.Sprintf("S2p: latchkit's other primitives beside minimal scripts, %d goroutines on one rueidis client, distinct fresh names", cfg.goroutines), otherContenders(), servers[:1], cfg.goroutines); err != nil {
			return err
		}
	}
	if cfg.only == "S2x" {
		if rep.s2x, err = uncontended(fmt.Sprintf("S2x: where S2's Redis CPU goes, %d goroutines on one rueidis client, distinct fresh keys", cfg.goroutines), breakdownContenders(), servers[:1], cfg.goroutines); err != nil {
			return err
		}
	}
	if want("S3") {
		cs := contendedContenders()
		rep.s3 = &contendedTable{contenders: cs, results: make([][]contendedResult, len(cs))}
		for round := range cfg.rounds {
			for _, i := range rotated(len(cs), round) {
				c := cs[i]
				if err := flush(servers[:1]); err != nil {
					return err
				}
				progress("S3 round %d: %s", round+1, c.name)
				r, err := runContended(ctx, c, servers[0], cfg.clients, cfg.hold, cfg.contended, fmt.Sprintf("contended:%d:%d", round, i))
				if err != nil {
					return err
				}
				rep.s3.results[i] = append(rep.s3.results[i], r)
			}
		}
	}
	if want("S4") {
		if rep.s4, err = uncontended("S4: Redlock over 5 instances, uncontended lock+unlock, 1 goroutine", redlockContenders(), servers, 1); err != nil {
			return err
		}
	}
	if want("S5") {
		if err := flush(servers[:1]); err != nil {
			return err
		}
		progress("S5: %d waiters over %d names across %d processes", cfg.scale.waiters, cfg.scale.names, cfg.scale.procs)
		res, err := runScale(ctx, servers[0], cfg.scale, progress)
		if err != nil {
			return err
		}
		rep.s5 = &res
	}
	if want("allocs") {
		if err := flush(servers[:1]); err != nil {
			return err
		}
		progress("allocs")
		if rep.allocs, err = measureAllocs(ctx, servers[0].Addr); err != nil {
			return err
		}
	}
	return nil
}

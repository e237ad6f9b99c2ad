// Command latchctl runs latchkit against a Redis: the marketplace demo, a
// benchmark, and tools to look into and repair primitives.
//
//	latchctl demo [-addr host:port] [-driver goredis|rueidis|valkey] ...
//	latchctl bench [-addr host:port] [-driver goredis|rueidis|valkey] [-duration d] [-clients n]
//	latchctl inspect NAME [-kind mutex|rwlock|semaphore|fair_semaphore|election|latch] [-addr host:port] [-prefix latch:]
//	latchctl list [-prefix latch:] [-addr host:port]
//	latchctl top [-once] [-interval 1s] [-budget 10000] [-held-over 5m] [-rows 10] [-addr host:port] [-prefix latch:]
//	latchctl release NAME -kind KIND -force -confirm NAME [-addr host:port]
//	latchctl limit NAME N [-kind semaphore|fair_semaphore] [-addr host:port] [-prefix latch:]
//
// Kinds are named as in spans, metrics and logs (latchkit.Kind); -kind
// also takes the older rw, sem and fairsem. Every command takes -v, which
// shows the Redis driver's own log lines (go-redis's connection pool
// retries, ...); without it latchctl prints only its own output and
// errors.
//
// demo and bench without -addr start an embedded Redis (miniredis)
// in-process; the other commands connect to -addr (default localhost:6379).
// inspect shows holders (token prefix, fence, remaining TTL by the server's
// clock, trace id when middleware.Tracing stored one), an RWLock's readers,
// writer and waiting writers, a fair semaphore's queue, an election's
// leader and candidates, a latch's count; list finds primitives with
// SCAN, never KEYS, with the state inspect shows (held, free, remembered,
// a latch's open or closed), and says so when there are none; release
// deletes a stuck primitive's keys, except its finished (or given-back)
// tokens, which keep its highest fence, and a stored limit, and wakes its
// waiters (a released latch is open); limit
// stores a Semaphore's or FairSemaphore's limit
// (Semaphore.SetLimit), which every client of the name then grants by.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// command is one latchctl subcommand.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"demo", "run the marketplace demo and check its invariants", runDemo},
	{"inspect", "show who holds a primitive: clients, since when, fences, TTLs, trace ids", runInspect},
	{"list", "list the primitives under a prefix (by SCAN), with their holders and waiters", runList},
	{"top", "a live view: most waiters, most hand-overs/s, longest held, held past a limit", runTop},
	{"release", "force-release a stuck primitive, keeping its last fence", runRelease},
	{"limit", "store a semaphore's limit in Redis: every client grants by it from then on", runLimit},
	{"bench", "measure latchkit: uncontended vs the floor, and 16 clients on one key", runBench},
}

// errUsage marks bad flags or arguments: exit status 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	stderr = &lockedWriter{w: stderr} // the command's and, with -v, the drivers' goroutines'
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				fmt.Fprintln(stderr, "latchctl:", err)
				return 2
			default:
				fmt.Fprintln(stderr, "latchctl:", err)
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "latchctl: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// newFlagSet makes the flag set of the command name, whose -h prints
// "usage: latchctl name synopsis" and the flags to stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: latchctl %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: latchctl <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'latchctl <command> -h' for the command's flags.")
}

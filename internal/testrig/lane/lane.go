// Package lane tells a test which lane it runs in. The fast lane is plain
// `go test ./...`: every behaviour once, at a small size, in minutes. The
// long lane, `LATCHKIT_LONG=1 go test -timeout 60m ./...`, runs the same
// tests at full size (every driver, every seed, the long durations) and the
// deployments that take minutes to start (Cluster resharding, Sentinel
// failover). A test shortened for the fast lane keeps its assertions: only
// its size changes.
package lane

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Env is the environment variable that turns the long lane on ("1").
const Env = "LATCHKIT_LONG"

// Long reports whether the long lane is on.
func Long() bool { return os.Getenv(Env) == "1" }

// Pick returns fast in the fast lane and long in the long lane.
func Pick[T any](fast, long T) T {
	if Long() {
		return long
	}
	return fast
}

// LongOnly skips t in the fast lane, saying why the test is long and how
// to run it.
func LongOnly(t testing.TB, why string) {
	t.Helper()
	if !Long() {
		t.Skipf("long lane only (%s): run with %s=1", why, Env)
	}
}

// Subset returns the items that the i-th case of a matrix runs with: all
// of them in the long lane; in the fast lane n of them, starting at i*n and
// wrapping, so that a matrix cut down to n items per case still covers
// every item across its cases (case 0 takes items 0..n-1, case 1 the next
// n, ...). The result is a new slice.
func Subset[T any](items []T, i, n int) []T {
	if Long() || n >= len(items) {
		return append([]T(nil), items...)
	}
	out := make([]T, 0, n)
	for k := 0; k < n; k++ {
		out = append(out, items[(i*n+k)%len(items)])
	}
	return out
}

// ParallelFast marks t parallel in the fast lane (t.Parallel): a scenario
// that mostly waits on its own servers runs beside another, halving the
// lane's wall time. The long lane runs them one at a time, as they are
// sized for.
func ParallelFast(t *testing.T) {
	t.Helper()
	if !Long() {
		t.Parallel()
	}
}

// FastParallelism is how many parallel tests the fast lane runs at once in
// a package that widens it (Widen).
const FastParallelism = 8

// Widen lets the fast lane run up to FastParallelism parallel tests at
// once, unless -parallel was given: go test's default is GOMAXPROCS, two
// on a 2-core machine, and the scenarios marked parallel (ParallelFast)
// spend their time waiting on their own servers and timers, not on the
// CPU. The long lane keeps go test's default, and so does a run under the
// race detector: a process slowed several times over, eight scenarios
// wide, starves the timers they pace by (seen on 2 cores: a renewal past
// a 500 ms TTL, a give-back past its budget, in miniredis served by the
// same process). Call it from TestMain, before m.Run.
func Widen() {
	if Long() || raceDetector {
		return
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(FastParallelism))
	}
}

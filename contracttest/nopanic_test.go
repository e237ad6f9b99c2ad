package contracttest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/latchkit/latchkit/contracttest"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
)

// nilHarnessEnv names, in a child process of TestNoPanicOnBadInput, the
// function to call with a nil Harness.
const nilHarnessEnv = "CONTRACTTEST_NIL_HARNESS"

// withNilHarness are the suite's entry points, each called with a nil
// Harness (or harness maker).
var withNilHarness = map[string]func(t *testing.T){
	"Run":                  func(t *testing.T) { contracttest.Run(t, nil) },
	"RunBackend":           func(t *testing.T) { contracttest.RunBackend(t, nil) },
	"RunBatch":             func(t *testing.T) { contracttest.RunBatch(t, nil) },
	"RunElection":          func(t *testing.T) { contracttest.RunElection(t, nil) },
	"RunFair":              func(t *testing.T) { contracttest.RunFair(t, nil) },
	"RunGiveUp":            func(t *testing.T) { contracttest.RunGiveUp(t, nil) },
	"RunGroups":            func(t *testing.T) { contracttest.RunGroups(t, nil, "Mutex") },
	"RunHandOver":          func(t *testing.T) { contracttest.RunHandOver(t, nil) },
	"RunHolder":            func(t *testing.T) { contracttest.RunHolder(t, nil) },
	"RunLatch":             func(t *testing.T) { contracttest.RunLatch(t, nil) },
	"RunMultiLock":         func(t *testing.T) { contracttest.RunMultiLock(t, nil) },
	"RunMutex":             func(t *testing.T) { contracttest.RunMutex(t, nil) },
	"RunRWLock":            func(t *testing.T) { contracttest.RunRWLock(t, nil) },
	"RunReentrant":         func(t *testing.T) { contracttest.RunReentrant(t, nil) },
	"RunReplicaAck":        func(t *testing.T) { contracttest.RunReplicaAck(t, nil) },
	"RunSemaphore":         func(t *testing.T) { contracttest.RunSemaphore(t, nil) },
	"RunWeighted":          func(t *testing.T) { contracttest.RunWeighted(t, nil) },
	"RunDeployments":       func(t *testing.T) { contracttest.RunDeployments(t, nil) },
	"RunDeploymentsExcept": func(t *testing.T) { contracttest.RunDeploymentsExcept(t, nil, nil) },
}

// Issue 38, finding 5: contracttest's exported functions with bad input.
// The suite's entry points take the caller's *testing.T: a nil Harness
// fails that test, saying so, rather than panicking in the suite. Each is
// run in a child process (a failed test cannot be observed from inside
// the same one). SentinelOf of a nil Server reports false. The rest is
// exempt: the Start functions take the test's testing.TB, which the
// testing package never gives nil, and the Harness and Server methods are
// what a driver's harness and the Start functions implement.
func TestNoPanicOnBadInput(t *testing.T) {
	if name := os.Getenv(nilHarnessEnv); name != "" {
		withNilHarness[name](t)
		return
	}
	exempt := func(why string) func(t *testing.T) { return func(t *testing.T) { t.Log("exempt: " + why) } }
	startedByTest := exempt("takes the test's testing.TB, which testing never gives nil")
	implemented := exempt("implemented by a driver's harness, or by the Server a Start function returns")
	cases := map[string]func(t *testing.T){
		"SentinelOf": func(t *testing.T) {
			apicover.Calm(t, "SentinelOf(nil)", func() error {
				if _, ok := contracttest.SentinelOf(nil); ok {
					t.Error("SentinelOf(nil) reports a sentinel")
				}
				return nil
			})
		},
		"StartCluster": startedByTest, "StartMiniredis": startedByTest, "StartRedisServer": startedByTest, "StartSentinel": startedByTest,
		"Harness.AdvanceClock": implemented, "Harness.FlushScripts": implemented, "Harness.KillSubscribers": implemented,
		"Harness.NewClient": implemented, "Harness.Unreachable": implemented,
		"Server.Addrs": implemented, "Server.AdvanceClock": implemented, "Server.FlushScripts": implemented,
		"Server.KillSubscribers": implemented, "Server.Kind": implemented,
	}
	for name := range withNilHarness {
		cases[name] = func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNoPanicOnBadInput$", "-test.count=1")
			cmd.Env = append(os.Environ(), nilHarnessEnv+"="+name)
			out, err := cmd.CombinedOutput()
			switch {
			case strings.Contains(string(out), "panic:"):
				t.Errorf("%s with a nil Harness panicked:\n%s", name, out)
			case err == nil || !strings.Contains(string(out), "nil Harness"):
				t.Errorf("%s with a nil Harness: %v, want the test failed saying so:\n%s", name, err, out)
			}
		}
	}
	apicover.Check(t, ".", cases)
}

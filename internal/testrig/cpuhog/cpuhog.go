// Package cpuhog starves the test process of CPU, the way a busy machine
// does: it starts busy processes beside the test (each spins a core with
// `sh -c 'while :; do :; done'`) and kills them when the test ends. On the
// 2-core machines the tests run on, two of them are enough to make a 20 ms
// deadline fire while a script is in flight.
package cpuhog

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/latchkit/latchkit/internal/testrig/proc"
)

// Start starts n busy processes and kills them (by pid) when t ends.
func Start(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = proc.Attr()
		if err := cmd.Start(); err != nil {
			t.Fatalf("cpuhog: %v", err)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
}

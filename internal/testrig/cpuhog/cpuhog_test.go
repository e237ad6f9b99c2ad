package cpuhog

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestStartKills(t *testing.T) {
	var pids []int
	t.Run("hog", func(t *testing.T) {
		Start(t, 2)
		// Only this process's children: other tests' busy processes
		// (go test runs packages side by side) are not ours to count.
		out, err := exec.Command("pgrep", "-P", strconv.Itoa(os.Getpid()), "-f", "while :; do :; done").Output()
		if err != nil || len(out) == 0 {
			t.Fatalf("no busy process found: %v", err)
		}
		for _, f := range splitLines(string(out)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		if len(pids) != 2 {
			t.Fatalf("found %d busy children, want 2: %q", len(pids), out)
		}
	})
	for _, pid := range pids {
		if err := exec.Command("kill", "-0", strconv.Itoa(pid)).Run(); err == nil {
			t.Errorf("busy process %d still runs after the test ended", pid)
		}
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

package cpuhog

import (
	"os/exec"
	"strconv"
	"testing"
)

func TestStartKills(t *testing.T) {
	var pids []int
	t.Run("hog", func(t *testing.T) {
		Start(t, 2)
		out, err := exec.Command("pgrep", "-f", "while :; do :; done").Output()
		if err != nil || len(out) == 0 {
			t.Fatalf("no busy process found: %v", err)
		}
		for _, f := range splitLines(string(out)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
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

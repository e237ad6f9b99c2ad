package redistest

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A line repeated 1,000 times is printed max times and counted once in
// the summary; a line said once is printed once.
func TestDriverLogPrintsEachLineAtMostMaxTimes(t *testing.T) {
	var buf bytes.Buffer
	l := newDriverLog(&buf, 3)
	for range 1000 {
		l.Printf(context.Background(), "sentinel: new master=%q addr=%q", "latchkit", "127.0.0.1:1")
	}
	l.Printf(context.Background(), "pool: dial failed\n")
	if n := strings.Count(buf.String(), "new master"); n != 3 {
		t.Errorf("printed the repeated line %d times, want 3:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "pool: dial failed"); n != 1 {
		t.Errorf("printed the single line %d times, want 1", n)
	}
	sum := l.Summary()
	if !strings.Contains(sum, "997 repeated log lines dropped") || !strings.Contains(sum, "1000× sentinel: new master") {
		t.Errorf("summary = %q", sum)
	}
	if newDriverLog(&buf, 3).Summary() != "" {
		t.Error("a logger that dropped nothing has a summary")
	}
}

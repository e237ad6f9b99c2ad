package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// On the embedded server, through every driver, bench prints the S1, S2
// and S3 rows with figures, and no error.
func TestBenchEmbedded(t *testing.T) {
	for _, driver := range []string{"goredis", "rueidis", "valkey", "redigo"} {
		t.Run(driver, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"bench", "-driver", driver, "-duration", "150ms", "-clients", "4"}, &out, &errb)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			checkBenchRows(t, out.String())
		})
	}
}

// checkBenchRows wants two S1 and two S2 rows (floor and Mutex) and two S3
// rows (Mutex and FairMutex), each with a positive rate, and no grant
// while another client held the lock.
func checkBenchRows(t *testing.T, out string) {
	t.Helper()
	count := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			continue
		}
		scenario := strings.TrimSpace(cells[1])
		if scenario != "S1" && scenario != "S2" && scenario != "S3" {
			continue
		}
		count[scenario]++
		if scenario == "S3" && strings.TrimSpace(cells[len(cells)-2]) != "0" {
			t.Errorf("exclusion violated: %q", line)
		}
		if rate := strings.TrimSpace(cells[3]); rate == "0" || rate == "" {
			t.Errorf("no progress in %q", line)
		}
	}
	for _, s := range []string{"S1", "S2", "S3"} {
		if count[s] != 2 {
			t.Errorf("%d %s rows, want 2:\n%s", count[s], s, out)
		}
	}
	if !strings.Contains(out, "FairMutex") {
		t.Errorf("no FairMutex row:\n%s", out)
	}
}

// Against a real redis-server the rows carry the server's counts too, and
// the benchmark leaves no key behind (latchkit keeps given-back tokens and
// fences kept while ahead for a while).
func TestBenchRedisServer(t *testing.T) {
	s := redistest.Start(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"bench", "-addr", s.Addr, "-duration", "150ms", "-clients", "4"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	checkBenchRows(t, out.String())
	if strings.Contains(out.String(), "n/a") {
		t.Errorf("a figure is missing on a real Redis:\n%s", out.String())
	}
	n, err := s.Do(context.Background(), "DBSIZE")
	if err != nil || n != int64(0) {
		t.Errorf("%v keys left behind (%v)", n, err)
	}
}

// Bad flags are usage errors: exit status 2.
func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "-driver", "nosuchdriver"},
		{"bench", "-duration", "0s"},
		{"bench", "-clients", "1"},
		{"bench", "-nosuchflag"},
		{"bench", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

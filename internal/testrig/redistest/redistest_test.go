package redistest

import (
	"context"
	"testing"
	"time"
)

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	if _, err := s.Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	s.Kill()
	if _, err := s.Do(ctx, "PING"); err == nil {
		t.Fatal("killed server answers")
	}
	s.Restart(t)
	if s.Pid() == pid || s.Pid() == 0 {
		t.Errorf("pid %d after restart (was %d)", s.Pid(), pid)
	}
	// No persistence: the data went with the process.
	if v, err := s.Do(ctx, "GET", "k"); err == nil || v != nil {
		t.Errorf("after a restart GET k = %v, %v; want nil", v, err)
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	s.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, err := s.Do(ctx, "PING")
	cancel()
	// go-redis reports the deadline as an i/o timeout.
	if err == nil || time.Since(start) > time.Second {
		t.Errorf("paused server: %v after %v, want a failure at the 200ms deadline", err, time.Since(start))
	}
	s.Resume()
	if _, err := s.Do(context.Background(), "PING"); err != nil {
		t.Errorf("after Resume: %v", err)
	}
}

func TestCommandStats(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := s.Do(ctx, "SET", "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.CommandStats(ctx)
	if err != nil || st["set"] != 3 {
		t.Errorf("stats %v, %v: want set=3", st, err)
	}
}

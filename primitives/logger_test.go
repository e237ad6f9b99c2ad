package primitives_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// syncBuffer is a bytes.Buffer safe for the watchdog's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WithLogger logs failed renewals and the loss of the lease (Redis gone),
// with kind, name and fence, and never the token.
func TestWithLoggerLogsRenewalFailuresAndLoss(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	mu, err := primitives.NewMutex(clienttest.For(t, goredis.New(c)), "logged", primitives.WithTTL(300*time.Millisecond), primitives.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.Close() // every renewal fails from now on
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not end with Redis gone")
	}
	out := buf.String()
	for _, want := range []string{"lease renewal failed", "lease lost", "kind=mutex", "name=logged", "fence=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, l.Token()) {
		t.Errorf("the log shows the token:\n%s", out)
	}
}

// slowWriter is a log destination that takes a while to write, as a file
// on a busy disk or a network sink does.
type slowWriter struct{ syncBuffer }

func (s *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(30 * time.Millisecond)
	return s.syncBuffer.Write(p)
}

// The loss is logged before the lease's Context ends: a caller woken by
// the Context (to log its own line, or to exit) finds the library's line
// already written, however slow the log's destination.
func TestLossLoggedBeforeContextEnds(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	var w slowWriter
	mu, err := primitives.NewMutex(clienttest.For(t, goredis.New(c)), "slowlog", primitives.WithTTL(300*time.Millisecond),
		primitives.WithLogger(slog.New(slog.NewTextHandler(&w, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not end with Redis gone")
	}
	if out, want := w.String(), `msg="latchkit: lease lost"`; strings.Count(out, want) != 1 {
		t.Errorf("when the Context ended the log held %d lines saying the lease was lost, want 1:\n%s", strings.Count(out, want), out)
	}
}

// signalWriter is slowWriter that says when it begins writing a line
// holding mark.
type signalWriter struct {
	slowWriter
	mark  string
	begun chan struct{}
	once  sync.Once
}

func (s *signalWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), s.mark) {
		s.once.Do(func() { close(s.begun) })
	}
	return s.slowWriter.Write(p)
}

// A Context first asked for while the loss is being logged ends only once
// the line is written, as one made before does.
func TestLossLoggedBeforeContextMadeDuringIt(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	w := &signalWriter{mark: `msg="latchkit: lease lost"`, begun: make(chan struct{})}
	mu, err := primitives.NewMutex(clienttest.For(t, goredis.New(c)), "midlog", primitives.WithTTL(300*time.Millisecond),
		primitives.WithLogger(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	select {
	case <-w.begun:
	case <-time.After(5 * time.Second):
		t.Fatal("the loss was not logged with Redis gone")
	}
	<-l.Context().Done() // made now, while the line is being written
	if out := w.String(); !strings.Contains(out, w.mark) {
		t.Errorf("a Context made while the loss was logged ended before the line was written:\n%s", out)
	}
}

package adapterkit_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/latchkit/latchkit/internal/adapterkit"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// A call awaits each channel's confirmation; a call given up on is
// forgotten; Drop is told once and never after Close; Err follows.
func TestSubState(t *testing.T) {
	var s adapterkit.SubState
	done := make(chan struct{})
	p, err := s.Expect("subscribe", []string{"a", "b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { s.Confirm("subscribe", "a"); s.Confirm("subscribe", "b") }()
	if err := s.Await(context.Background(), p, done); err != nil {
		t.Fatalf("confirmed: %v", err)
	}
	p, _ = s.Expect("unsubscribe", []string{"c"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.Await(ctx, p, done); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unconfirmed: %v, want DeadlineExceeded", err)
	}
	s.Confirm("unsubscribe", "c") // nobody waits any more: no panic
	lost := &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("EOF")}
	if !s.Drop(lost) || s.Drop(lost) {
		t.Fatal("Drop must report the first loss only")
	}
	p2, err := s.Expect("subscribe", []string{"d"})
	if !errors.Is(err, backend.ErrUnavailable) || p2 != nil {
		t.Fatalf("Expect on a dead subscription: %v", err)
	}
	close(done)
	if !s.Close() || s.Close() || !errors.Is(s.Err(), backend.ErrClosed) {
		t.Fatal("Close must report the first call only, then Err is ErrClosed")
	}
	var c adapterkit.SubState
	c.Close()
	if c.Drop(nil) {
		t.Fatal("Drop after Close must not be reported")
	}
}

func TestNormalizeArray(t *testing.T) {
	norm := func(n int) (backend.Value, error) {
		if n < 0 {
			return nil, errors.New("negative")
		}
		return int64(n), nil
	}
	v, err := adapterkit.NormalizeArray([]int{1, 2}, norm)
	if err != nil || fmt.Sprintf("%#v", v) != fmt.Sprintf("%#v", []backend.Value{int64(1), int64(2)}) {
		t.Errorf("%#v, %v", v, err)
	}
	if v, err := adapterkit.NormalizeArray([]int{1, -1}, norm); err == nil || v != nil {
		t.Errorf("%#v, %v: want the element's error", v, err)
	}
}

package backend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/latchkit/latchkit/backend"
)

// TestAwait: a call that finishes in time gives its result; one that
// outlives its context is abandoned at the context's end with an error
// matching it, and its result goes to cleanup once it finishes; a done
// context runs nothing.
func TestAwait(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	errBoom := errors.New("boom")
	v, err := backend.Await(ctx, func() (int, error) { return 7, errBoom }, func(int, error) { t.Error("cleanup of a call that was not abandoned") })
	if v != 7 || err != errBoom {
		t.Errorf("finished call: %v, %v", v, err)
	}

	release := make(chan struct{})
	cleaned := make(chan int, 1)
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	v, err = backend.Await(short, func() (int, error) { <-release; return 8, nil }, func(v int, _ error) { cleaned <- v })
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("abandoned after %v", took)
	}
	if v != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("abandoned call: %v, %v, want 0 and DeadlineExceeded", v, err)
	}
	close(release)
	select {
	case v := <-cleaned:
		if v != 8 {
			t.Errorf("cleanup got %v", v)
		}
	case <-time.After(5 * time.Second):
		t.Error("the abandoned call's result never reached cleanup")
	}

	canceled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	_, err = backend.Await(canceled, func() (int, error) { t.Error("ran with a done context"); return 0, nil }, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("done context: %v", err)
	}
	if v, err := backend.Await(context.Background(), func() (int, error) { return 9, nil }, nil); v != 9 || err != nil {
		t.Errorf("background context: %v, %v", v, err)
	}
}

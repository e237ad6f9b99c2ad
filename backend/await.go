package backend

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// errAbandoned is the cause of the error Await returns for a call it gave
// up on.
var errAbandoned = errors.New("backend: call abandoned when its context ended; it may still run on the server")

// Abandoned is the error of a call given up on at the end of ctx (which
// must be done) while it may still run: it matches ctx.Err() and says the
// outcome is unknown. Await returns it; an adapter that bounds its calls
// by other means returns it too. For a nil ctx it is ErrNilContext.
func Abandoned(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	return &Error{Class: ctx.Err(), Cause: errAbandoned}
}

// ErrNilContext is the error of a backend call given a nil context: it
// matches ErrInvalid, and nothing was sent.
var ErrNilContext = fmt.Errorf("%w: nil context (give context.Background() for none)", ErrInvalid)

// Await runs call and returns its result or, if ctx ends first, returns
// at once Abandoned(ctx), an error matching ctx.Err(); the call runs on
// and its result goes to cleanup, when cleanup is not nil. call must not
// write to anything the caller owns once Await has returned (give it
// copies). A ctx already done returns its error without running call. A
// nil ctx or call is refused with an error matching ErrInvalid.
func Await[T any](ctx context.Context, call func() (T, error), cleanup func(T, error)) (T, error) {
	var zero T
	switch {
	case ctx == nil:
		return zero, ErrNilContext
	case call == nil:
		return zero, fmt.Errorf("%w: nil call", ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		return call()
	}
	f := &flight[T]{done: make(chan struct{})}
	go func() {
		f.v, f.err = call()
		close(f.done)
		if !f.state.CompareAndSwap(running, finished) && cleanup != nil {
			cleanup(f.v, f.err) // abandoned: nobody else will see the result
		}
	}()
	select {
	case <-f.done:
		return f.v, f.err
	case <-ctx.Done():
	}
	if f.state.CompareAndSwap(running, abandoned) {
		return zero, Abandoned(ctx)
	}
	<-f.done // the call finished as ctx ended: its result stands
	return f.v, f.err
}

// flight is one call run by Await. Whichever of the call's goroutine
// (finished) and the caller (abandoned) moves state from running first
// owns the result.
type flight[T any] struct {
	done  chan struct{} // closed once v and err are set
	state atomic.Int32
	v     T
	err   error
}

const (
	running int32 = iota
	finished
	abandoned
)

package rueidis

import (
	"context"
	"sync/atomic"

	"github.com/latchkit/latchkit/backend"
)

// evalCall is an Eval run on a goroutine of its own, so that its caller
// returns at its context's end even while rueidis holds the call where the
// context is not watched (see Backend.Eval). It is what backend.Await
// does, without Await's allocations on this hot path: evalCalls are
// pooled in their Backend, and whichever of the caller and the goroutine
// is the last to use one puts it back.
type evalCall struct {
	b     *Backend
	ctx   context.Context
	s     *backend.Script
	strs  []string // the keys, then the args: copies, the call may outlive Eval
	nkeys int
	v     backend.Value
	err   error
	state atomic.Int32
	done  chan struct{} // a token once v and err are set, unless abandoned
}

// An evalCall's state: whichever of the goroutine (finished) and the
// caller (abandoned) moves it from running first owns the result.
const (
	running int32 = iota
	finished
	abandoned
)

// maxPooledStrs bounds the key and argument buffer a pooled evalCall keeps.
const maxPooledStrs = 64

func (c *evalCall) run() {
	c.v, c.err = c.b.eval(c.ctx, c.s, c.strs[:c.nkeys], c.strs[c.nkeys:])
	if c.state.CompareAndSwap(running, finished) {
		c.done <- struct{}{} // the caller takes it from here
		return
	}
	c.b.putCall(c) // abandoned: nobody waits for the result
}

// boundedEval is Eval on a goroutine of its own, returning at ctx's end
// with backend.Abandoned(ctx) if the call has not returned by then.
func (b *Backend) boundedEval(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	c, _ := b.calls.Get().(*evalCall)
	if c == nil {
		c = &evalCall{b: b, done: make(chan struct{}, 1)}
	}
	c.ctx, c.s, c.nkeys = ctx, s, len(keys)
	c.strs = append(append(c.strs[:0], keys...), args...)
	c.state.Store(running)
	go c.run()
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(running, abandoned) {
			return nil, backend.Abandoned(ctx)
		}
		<-c.done // the call finished as ctx ended: its result stands
	}
	v, err := c.v, c.err
	b.putCall(c)
	return v, err
}

// putCall clears c and returns it to the pool.
func (b *Backend) putCall(c *evalCall) {
	clear(c.strs)
	if cap(c.strs) > maxPooledStrs {
		c.strs = nil
	}
	c.ctx, c.s, c.v, c.err = nil, nil, nil, nil
	b.calls.Put(c)
}

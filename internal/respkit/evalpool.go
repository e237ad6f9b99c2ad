package respkit

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/latchkit/latchkit/backend"
)

// evalCall is an Eval run on a goroutine of its own, so that its caller
// returns at its context's end even while the driver holds the call where
// the context is not watched (see RESP). It is what Await does, without
// Await's allocations on this hot path: evalCalls are pooled, and
// whichever of the caller and the goroutine is the last to use one puts
// it back.
type evalCall struct {
	pool  *evalPool
	ctx   context.Context
	s     *backend.Script
	strs  []string // the keys, then the args: copies, the call may outlive Eval
	nkeys int
	v     backend.Value
	err   error
	state atomic.Int32
	done  chan struct{} // a token once v and err are set, unless abandoned
}

// maxPooledStrs bounds the key and argument buffer a pooled evalCall keeps.
const maxPooledStrs = 64

func (c *evalCall) run() {
	c.v, c.err = c.pool.eval(c.ctx, c.s, c.strs[:c.nkeys], c.strs[c.nkeys:])
	if c.state.CompareAndSwap(running, finished) {
		c.done <- struct{}{} // the caller takes it from here
		return
	}
	c.put() // abandoned: nobody waits for the result
}

// evalPool runs eval calls bounded by their context, each on a goroutine
// of its own, with pooled evalCalls.
type evalPool struct {
	eval  func(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error)
	calls sync.Pool // *evalCall
}

// run runs eval on a goroutine of its own, returning at ctx's end with
// Abandoned(ctx) if the call has not returned by then.
func (p *evalPool) run(ctx context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	c, _ := p.calls.Get().(*evalCall)
	if c == nil {
		c = &evalCall{pool: p, done: make(chan struct{}, 1)}
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
	c.put()
	return v, err
}

// put clears c and returns it to its pool.
func (c *evalCall) put() {
	clear(c.strs)
	if cap(c.strs) > maxPooledStrs {
		c.strs = nil
	}
	c.ctx, c.s, c.v, c.err = nil, nil, nil, nil
	c.pool.calls.Put(c)
}

// The states of a pooled call, as backend.Await's: the call (finished)
// and the caller (abandoned) race to move it from running.
const (
	running int32 = iota
	finished
	abandoned
)

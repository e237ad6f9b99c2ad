// Package adapterkit is what latchkit's own adapters (backend/goredis,
// backend/redigo, and internal/respkit for rueidis and valkey-go) share
// beyond the backend contract: batches with the NOSCRIPT fallback, the
// acknowledged eval, subscription bookkeeping, array normalization. A
// third-party adapter implements backend.Backend with backend.Wrap and
// backend.Await.
package adapterkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// errNilScript is the error of a call without a script.
var errNilScript = fmt.Errorf("%w: nil script", backend.ErrInvalid)

// CheckCall is why an adapter refuses a script call before sending it: a
// nil ctx (backend.ErrNilContext) or a nil script, both matching
// backend.ErrInvalid; nil when it may go.
func CheckCall(ctx context.Context, s *backend.Script) error {
	switch {
	case ctx == nil:
		return backend.ErrNilContext
	case s == nil:
		return errNilScript
	}
	return nil
}

// CheckAck is CheckCall for an EvalAck, which also refuses a negative
// count of replicas or timeout (WAIT would).
func CheckAck(ctx context.Context, s *backend.Script, replicas int, timeout time.Duration) error {
	if err := CheckCall(ctx, s); err != nil {
		return err
	}
	if replicas < 0 || timeout < 0 {
		return fmt.Errorf("%w: WAIT %d replicas within %v", backend.ErrInvalid, replicas, timeout)
	}
	return nil
}

// Pipeline is what an adapter provides for RunBatch: it sends calls in one
// round trip (a pipeline), each by EVALSHA, or by EVAL when source is set,
// and fills in each call's Value and Err exactly as Eval would return them.
type Pipeline func(ctx context.Context, calls []backend.Call, source bool)

// RunBatch is the EvalBatch of an adapter (see Batcher): calls go out by
// EVALSHA in one round trip, then those the server answered NOSCRIPT by
// EVAL in a second. With bounded set it returns by ctx's end whatever the
// driver does: the batch runs on copies of the calls (see Await), and the
// calls get the context's error when it is abandoned. A done ctx fails
// every call without sending any, and so does a nil ctx
// (backend.ErrNilContext); a call without a script, or whose keys check
// refuses (when check is not nil: CheckSlots, for a cluster client), gets
// an error matching backend.ErrInvalid, and the others go out.
func RunBatch(ctx context.Context, calls []backend.Call, bounded bool, pipe Pipeline, check func(keys []string) error) {
	if len(calls) == 0 {
		return
	}
	if ctx == nil {
		FailCalls(calls, backend.ErrNilContext)
		return
	}
	refused := func(c backend.Call) error {
		if c.Script == nil {
			return errNilScript
		}
		if check != nil {
			return check(c.Keys)
		}
		return nil
	}
	if slices.ContainsFunc(calls, func(c backend.Call) bool { return refused(c) != nil }) {
		var send []int
		for i := range calls {
			if err := refused(calls[i]); err != nil {
				calls[i].Value, calls[i].Err = nil, err
			} else {
				send = append(send, i)
			}
		}
		sub := make([]backend.Call, len(send))
		for j, i := range send {
			sub[j] = calls[i]
		}
		RunBatch(ctx, sub, bounded, pipe, nil)
		for j, i := range send {
			calls[i] = sub[j]
		}
		return
	}
	if err := ctx.Err(); err != nil {
		FailCalls(calls, err)
		return
	}
	if !bounded {
		runBatch(ctx, calls, pipe)
		return
	}
	// The batch runs on copies: once abandoned, it must not write to
	// calls, which the caller owns again.
	own := make([]backend.Call, len(calls))
	for i, c := range calls {
		own[i] = backend.Call{Script: c.Script, Keys: slices.Clone(c.Keys), Args: slices.Clone(c.Args)}
	}
	if _, err := backend.Await(ctx, func() (struct{}, error) { runBatch(ctx, own, pipe); return struct{}{}, nil }, nil); err != nil {
		FailCalls(calls, err)
		return
	}
	for i := range calls {
		calls[i].Value, calls[i].Err = own[i].Value, own[i].Err
	}
}

// runBatch is RunBatch on the caller's goroutine.
func runBatch(ctx context.Context, calls []backend.Call, pipe Pipeline) {
	pipe(ctx, calls, false)
	var missing []int
	for i := range calls {
		if IsNoScript(calls[i].Err) {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return
	}
	again := make([]backend.Call, len(missing))
	for j, i := range missing {
		again[j] = backend.Call{Script: calls[i].Script, Keys: calls[i].Keys, Args: calls[i].Args}
	}
	pipe(ctx, again, true)
	for j, i := range missing {
		calls[i].Value, calls[i].Err = again[j].Value, again[j].Err
	}
}

// IsNoScript reports whether err is the server's NOSCRIPT reply: EVALSHA of
// a script it does not have.
func IsNoScript(err error) bool {
	if err == nil {
		return false // and nothing escapes to the heap on the common path
	}
	var re *backend.ReplyError
	return errors.As(err, &re) && strings.HasPrefix(re.Msg, "NOSCRIPT")
}

// RunAck is the EvalAck of an adapter (see ReplicaAcker) around run, the
// script and its WAIT on one connection: with bounded set it returns by
// ctx's end whatever the driver does, run going on with copies of keys and
// args (see Await).
func RunAck(ctx context.Context, bounded bool, keys, args []string, run func(keys, args []string) (backend.Value, int, error)) (backend.Value, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if !bounded {
		return run(keys, args)
	}
	keys, args = slices.Clone(keys), slices.Clone(args) // the call may outlive this one
	type acked struct {
		v backend.Value
		n int
	}
	r, err := backend.Await(ctx, func() (acked, error) {
		v, n, err := run(keys, args)
		return acked{v, n}, err
	}, nil)
	return r.v, r.n, err
}

// FailCalls gives every call of a batch that cannot be sent (its context is
// done, its client closed) the same error and no value.
func FailCalls(calls []backend.Call, err error) {
	for i := range calls {
		calls[i].Value, calls[i].Err = nil, err
	}
}

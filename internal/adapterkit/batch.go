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
	"github.com/latchkit/latchkit/backend"
	"slices"
	"strings"
)

// Pipeline is what an adapter provides for RunBatch: it sends calls in one
// round trip (a pipeline), each by EVALSHA, or by EVAL when source is set,
// and fills in each call's Value and Err exactly as Eval would return them.
type Pipeline func(ctx context.Context, calls []backend.Call, source bool)

// RunBatch is the EvalBatch of an adapter (see Batcher): calls go out by
// EVALSHA in one round trip, then those the server answered NOSCRIPT by
// EVAL in a second. With bounded set it returns by ctx's end whatever the
// driver does: the batch runs on copies of the calls (see Await), and the
// calls get the context's error when it is abandoned. A done ctx fails
// every call without sending any.
func RunBatch(ctx context.Context, calls []backend.Call, bounded bool, pipe Pipeline) {
	if len(calls) == 0 {
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

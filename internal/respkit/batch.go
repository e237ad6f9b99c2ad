package respkit

import (
	"context"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/adapterkit"
)

// EvalBatch runs calls with one DoMulti of EVALSHA commands, then the
// calls the server answered NOSCRIPT with a second DoMulti of EVAL (see
// Batcher and RunBatch). These drivers pipeline a DoMulti on one
// connection and, on a Cluster, split it by slot, so calls may name keys
// of any slot (each call's own keys must share one slot). It returns by
// ctx's end (see RESP); calls it gave up on all get an error matching
// ctx.Err().
func (r *RESP[C, R, M, P, E]) EvalBatch(ctx context.Context, calls []backend.Call) {
	adapterkit.RunBatch(ctx, calls, ctx != nil && ctx.Done() != nil, r.pipeline, r.checkSlots())
}

// pipeline sends calls in one DoMulti (see Pipeline).
func (r *RESP[C, R, M, P, E]) pipeline(ctx context.Context, calls []backend.Call, source bool) {
	cmds := make([]C, len(calls))
	for i, c := range calls {
		cmds[i] = r.d.script(c.Script, c.Keys, c.Args, source)
	}
	for i, res := range r.doMulti(ctx, calls, cmds) {
		calls[i].Value, calls[i].Err = r.result(ctx, res)
	}
}

// doMulti sends cmds, the commands of calls, by DoMulti. A cluster client
// refuses a DoMulti that mixes keyless commands with commands of several
// slots, so the keyless ones go in a DoMulti of their own.
func (r *RESP[C, R, M, P, E]) doMulti(ctx context.Context, calls []backend.Call, cmds []C) []R {
	keyless := func(j int) bool { return len(calls[j].Keys) == 0 }
	var none, some []C
	for j, c := range cmds {
		if keyless(j) {
			none = append(none, c)
		} else {
			some = append(some, c)
		}
	}
	if len(none) == 0 || len(some) == 0 {
		return r.d.doMulti(ctx, cmds...)
	}
	rn, rs := r.d.doMulti(ctx, none...), r.d.doMulti(ctx, some...)
	res := make([]R, len(cmds))
	for j := range cmds {
		if keyless(j) {
			res[j], rn = rn[0], rn[1:]
		} else {
			res[j], rs = rs[0], rs[1:]
		}
	}
	return res
}

// EvalAck runs s and then WAIT replicas timeout (see ReplicaAcker) in one
// DoMulti on one connection taken from the client's pool, which the pair
// holds until both replied, so WAIT counts the script's writes and nothing
// else. On a Cluster it is a connection to the master of the keys' slot in
// the client's slot map, and a redirect is not followed: a slot that moved
// is answered MOVED (the driver then refreshes its map) and migrating ASK
// or TRYAGAIN, each of which EvalAck returns as ErrUnavailable, having run
// nothing. A DoMulti of the client itself would follow the script's MOVED
// alone to the slot's new master, while the old master answered WAIT for a
// connection that wrote nothing there: every replica, for a grant that no
// replica may have. A NOSCRIPT answer to EVALSHA sends the pair again with
// EVAL on the same connection. It returns by ctx's end (see RESP).
func (r *RESP[C, R, M, P, E]) EvalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Value, int, error) {
	if err := adapterkit.CheckAck(ctx, s, replicas, timeout); err != nil {
		return nil, 0, err
	}
	if err := r.slots(keys); err != nil {
		return nil, 0, err
	}
	return adapterkit.RunAck(ctx, ctx.Done() != nil, keys, args, func(keys, args []string) (backend.Value, int, error) {
		return r.evalAck(ctx, s, keys, args, replicas, timeout)
	})
}

// evalAck is EvalAck on the caller's goroutine.
func (r *RESP[C, R, M, P, E]) evalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (v backend.Value, n int, err error) {
	r.d.pinned(func(doMulti func(ctx context.Context, cmds ...C) []R) {
		v, n, err = r.ackOn(ctx, doMulti, s, keys, args, replicas, timeout)
	})
	return v, n, err
}

// ackOn is evalAck on one connection's doMulti.
func (r *RESP[C, R, M, P, E]) ackOn(ctx context.Context, doMulti func(ctx context.Context, cmds ...C) []R, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Value, int, error) {
	send := func(source bool) []R {
		// Commands are built anew for each DoMulti: the driver recycles
		// those it sent.
		wait := r.d.wait(int64(replicas), max(timeout.Milliseconds(), 1))
		return doMulti(ctx, r.d.script(s, keys, args, source), wait)
	}
	res := send(false)
	if adapterkit.IsNoScript(r.wrap(ctx, res[0].Error())) {
		res = send(true)
	}
	msg, err := res[0].ToMessage()
	if err != nil && !r.isNil(err) {
		return nil, 0, r.wrap(ctx, err)
	}
	n, err := res[1].AsInt64()
	if err != nil {
		return nil, 0, r.wrap(ctx, err)
	}
	v, err := NormalizeRESP[M, P](&msg) // a nil reply normalizes to nil
	return v, int(n), err
}

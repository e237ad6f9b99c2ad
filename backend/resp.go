package backend

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"
)

// This file is the part of an adapter that does not depend on which driver
// of the rueidis family it wraps. github.com/redis/rueidis and its fork
// github.com/valkey-io/valkey-go have one shape under other names
// (RedisMessage and ValkeyMessage, RedisResult and ValkeyResult, ...):
// RESP holds what an adapter over either does, generic over the driver's
// types, and each adapter only says how its driver builds and sends
// commands (RESPDriver).

// RESPMessage is the method set of a reply of a driver of the rueidis
// family, met by P, a pointer to the driver's message type M.
type RESPMessage[M any] interface {
	*M
	IsNil() bool
	Error() error
	IsInt64() bool
	AsInt64() (int64, error)
	IsString() bool
	ToString() (string, error)
	IsArray() bool
	ToArray() ([]M, error)
	IsMap() bool
	AsMap() (map[string]M, error)
	IsBool() bool
	ToBool() (bool, error)
	IsFloat64() bool
	ToFloat64() (float64, error)
	ToAny() (any, error)
}

// RESPResult is the method set of the result of a command of a driver of
// the rueidis family, whose reply is an M.
type RESPResult[M any] interface {
	ToMessage() (M, error)
	Error() error
	AsInt64() (int64, error)
}

// RESPError is the method set of the driver's error reply type (a pointer
// to it), whose nil reply (IsNil) is an error too.
type RESPError interface {
	error
	IsNil() bool
}

// errUnexpected is the cause of a reply NormalizeRESP cannot place.
var errUnexpected = errors.New("backend: unexpected reply type")

// NormalizeRESP turns a reply of a driver of the rueidis family into a
// Value. RESP3 replies outside Value are converted: a boolean to 1 or nil,
// a double to its string form, a map to a flat key, value array sorted by
// key. An error reply, anywhere in the reply, is returned as an error
// wrapping a *ReplyError (and the driver's error), with a nil Value.
func NormalizeRESP[M any, P RESPMessage[M]](m P) (Value, error) {
	if m.IsNil() {
		return nil, nil
	}
	if err := m.Error(); err != nil {
		return nil, &Error{Class: &ReplyError{Msg: err.Error()}, Cause: err}
	}
	switch {
	case m.IsInt64():
		return m.AsInt64()
	case m.IsString():
		return m.ToString()
	case m.IsArray():
		a, err := m.ToArray()
		if err != nil {
			return nil, badReply(err)
		}
		out := make([]Value, len(a))
		for i := range a {
			if out[i], err = NormalizeRESP[M, P](&a[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	case m.IsMap():
		mp, err := m.AsMap()
		if err != nil {
			return nil, badReply(err)
		}
		keys := make([]string, 0, len(mp))
		for k := range mp {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make([]Value, 0, 2*len(keys))
		for _, k := range keys {
			e := mp[k]
			v, err := NormalizeRESP[M, P](&e)
			if err != nil {
				return nil, err
			}
			out = append(out, k, v)
		}
		return out, nil
	case m.IsBool():
		if v, _ := m.ToBool(); v {
			return int64(1), nil
		}
		return nil, nil
	case m.IsFloat64():
		f, err := m.ToFloat64()
		if err != nil {
			return nil, badReply(err)
		}
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	}
	v, err := m.ToAny() // verbatim strings, big numbers
	if s, ok := v.(string); ok && err == nil {
		return s, nil
	}
	return nil, badReply(err)
}

// badReply is the error of a reply outside what NormalizeRESP can place.
func badReply(err error) error {
	if err == nil {
		err = errUnexpected
	}
	return &Error{Class: &ReplyError{Msg: "unexpected reply: " + err.Error()}, Cause: err}
}

// RESPDriver is what an adapter over a driver of the rueidis family says
// about its client: how to send commands, how to build the few it needs,
// and which errors mean the client was closed. C is the driver's command
// type (Completed), R its result.
type RESPDriver[C, R any] struct {
	// Do sends one command (the client's Do).
	Do func(ctx context.Context, cmd C) R
	// DoMulti sends commands in one pipeline (the client's DoMulti).
	DoMulti func(ctx context.Context, cmds ...C) []R
	// Script builds EVALSHA of s's hash, or EVAL of its source when
	// source is set, with keys and args.
	Script func(s *Script, keys, args []string, source bool) C
	// Wait builds WAIT replicas timeout, timeout in milliseconds.
	Wait func(replicas, timeout int64) C
	// Ping builds PING.
	Ping func() C
	// Channels builds SUBSCRIBE channels, or UNSUBSCRIBE channels when
	// unsubscribe is set.
	Channels func(unsubscribe bool, channels []string) C
	// Dedicate opens a connection of its own for a subscription: it
	// hands every message received on it to deliver, and reports the
	// connection's end on ended. Do sends commands on it; Close closes it.
	Dedicate func(deliver func(Message)) (conn RESPConn[C, R], ended <-chan error)
	// Closed are the driver's errors for a closed client (matched with
	// errors.Is): they are classified as ErrClosed.
	Closed []error
}

// RESPConn is a dedicated connection (see RESPDriver.Dedicate).
type RESPConn[C, R any] struct {
	Do    func(ctx context.Context, cmd C) R
	Close func()
}

// RESP is the driver-independent part of an adapter over a client of the
// rueidis family: Eval, EvalBatch, EvalAck and Subscribe, made once for
// every such driver. Type parameters: C is the driver's command type, R
// its result, M its message (reply) type and P a pointer to it, E (a
// pointer to) its error reply type. Build it with NewRESP.
//
// Every call returns by its context's deadline or cancellation. These
// drivers honour contexts on an open connection, but not everywhere
// around a dial: a call that finds its connection being dialed by another
// call waits for that dial (bounded by the other call's context, or by the
// dial timeout, 5 s by default); a dial's handshake ignores a cancellation
// without a deadline until the dial timeout; and a dedicated connection (a
// subscription's) is dialed without the caller's context. So a call whose
// context can end runs on a goroutine of its own, and returns at the
// context's end, abandoning the call (see Await). Eval does this at the
// cost of one allocation (the goroutine's; the state it shares with the
// caller is pooled); a call with a context that can never end
// (context.Background()) is made directly.
type RESP[C any, R RESPResult[M], M any, P RESPMessage[M], E RESPError] struct {
	d     RESPDriver[C, R]
	calls evalPool
}

// NewRESP returns the shared part of an adapter over a driver described
// by d, whose functions must all be set.
func NewRESP[C any, R RESPResult[M], M any, P RESPMessage[M], E RESPError](d RESPDriver[C, R]) *RESP[C, R, M, P, E] {
	r := &RESP[C, R, M, P, E]{d: d}
	r.calls.eval = r.eval
	return r
}

// isNil reports whether err is the driver's nil reply.
func (r *RESP[C, R, M, P, E]) isNil(err error) bool {
	e, ok := err.(E)
	return ok && e.IsNil()
}

// wrap classifies a driver error (see Wrap): an error reply of the driver
// as a *ReplyError, the errors of a closed client as ErrClosed, anything
// else as ErrUnavailable.
func (r *RESP[C, R, M, P, E]) wrap(ctx context.Context, err error) error {
	return Wrap(ctx, err,
		func(err error) bool {
			return slices.ContainsFunc(r.d.Closed, func(c error) bool { return errors.Is(err, c) })
		},
		func(err error) (string, bool) {
			if e, ok := err.(E); ok && !e.IsNil() {
				return e.Error(), true
			}
			return "", false
		})
}

// result is the Value and error of a finished script command, as Eval and
// EvalBatch return them.
func (r *RESP[C, R, M, P, E]) result(ctx context.Context, res R) (Value, error) {
	msg, err := res.ToMessage()
	if err != nil {
		if r.isNil(err) {
			return nil, nil
		}
		return nil, r.wrap(ctx, err)
	}
	return NormalizeRESP[M, P](&msg)
}

// Eval runs s by EVALSHA, then by EVAL when the server answers NOSCRIPT
// (see Backend). It returns by ctx's end (see RESP).
func (r *RESP[C, R, M, P, E]) Eval(ctx context.Context, s *Script, keys []string, args []string) (Value, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ctx.Done() == nil {
		return r.eval(ctx, s, keys, args)
	}
	return r.calls.run(ctx, s, keys, args)
}

// eval is Eval on the caller's goroutine.
func (r *RESP[C, R, M, P, E]) eval(ctx context.Context, s *Script, keys []string, args []string) (Value, error) {
	v, err := r.result(ctx, r.d.Do(ctx, r.d.Script(s, keys, args, false)))
	if IsNoScript(err) {
		return r.result(ctx, r.d.Do(ctx, r.d.Script(s, keys, args, true)))
	}
	return v, err
}

// EvalBatch runs calls with one DoMulti of EVALSHA commands, then the
// calls the server answered NOSCRIPT with a second DoMulti of EVAL (see
// Batcher and RunBatch). These drivers pipeline a DoMulti on one
// connection and, on a Cluster, split it by slot, so calls may name keys
// of any slot (each call's own keys must share one slot). It returns by
// ctx's end (see RESP); calls it gave up on all get an error matching
// ctx.Err().
func (r *RESP[C, R, M, P, E]) EvalBatch(ctx context.Context, calls []Call) {
	RunBatch(ctx, calls, ctx.Done() != nil, r.pipeline)
}

// pipeline sends calls in one DoMulti (see Pipeline).
func (r *RESP[C, R, M, P, E]) pipeline(ctx context.Context, calls []Call, source bool) {
	cmds := make([]C, len(calls))
	for i, c := range calls {
		cmds[i] = r.d.Script(c.Script, c.Keys, c.Args, source)
	}
	for i, res := range r.doMulti(ctx, calls, cmds) {
		calls[i].Value, calls[i].Err = r.result(ctx, res)
	}
}

// doMulti sends cmds, the commands of calls, by DoMulti. A cluster client
// refuses a DoMulti that mixes keyless commands with commands of several
// slots, so the keyless ones go in a DoMulti of their own.
func (r *RESP[C, R, M, P, E]) doMulti(ctx context.Context, calls []Call, cmds []C) []R {
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
		return r.d.DoMulti(ctx, cmds...)
	}
	rn, rs := r.d.DoMulti(ctx, none...), r.d.DoMulti(ctx, some...)
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

// EvalAck runs s and then WAIT replicas timeout with DoMulti (see
// ReplicaAcker): these drivers send a batch holding a blocking command
// (WAIT) on one dedicated connection, so WAIT counts the script's writes.
// On a Cluster the keyless WAIT follows the script's slot to its master. A
// NOSCRIPT answer to EVALSHA sends the pair again with EVAL. It returns by
// ctx's end (see RESP).
func (r *RESP[C, R, M, P, E]) EvalAck(ctx context.Context, s *Script, keys, args []string, replicas int, timeout time.Duration) (Value, int, error) {
	return RunAck(ctx, ctx.Done() != nil, keys, args, func(keys, args []string) (Value, int, error) {
		return r.evalAck(ctx, s, keys, args, replicas, timeout)
	})
}

// evalAck is EvalAck on the caller's goroutine.
func (r *RESP[C, R, M, P, E]) evalAck(ctx context.Context, s *Script, keys, args []string, replicas int, timeout time.Duration) (Value, int, error) {
	send := func(source bool) []R {
		// Commands are built anew for each DoMulti: the driver recycles
		// those it sent.
		wait := r.d.Wait(int64(replicas), max(timeout.Milliseconds(), 1))
		return r.d.DoMulti(ctx, r.d.Script(s, keys, args, source), wait)
	}
	res := send(false)
	if IsNoScript(r.wrap(ctx, res[0].Error())) {
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

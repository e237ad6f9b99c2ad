// Package respkit is the adapter of the rueidis family of drivers
// (github.com/redis/rueidis and its fork github.com/valkey-io/valkey-go),
// written once, generic over the driver's types: backend/rueidis and
// backend/valkey are each a NewRESP of their client. It is internal: a
// third-party adapter implements backend.Backend with the helpers the
// backend package exports for it.
package respkit

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/adapterkit"
)

// This file is the part of an adapter that does not depend on which driver
// of the rueidis family it wraps. github.com/redis/rueidis and its fork
// github.com/valkey-io/valkey-go have one shape under other names
// (RedisMessage and ValkeyMessage, RedisResult and ValkeyResult, ...):
// RESP holds what an adapter over either does, generic over the driver's
// types, which NewRESP infers from the client's methods.

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
func NormalizeRESP[M any, P RESPMessage[M]](m P) (backend.Value, error) {
	if m.IsNil() {
		return nil, nil
	}
	if err := m.Error(); err != nil {
		return nil, &backend.Error{Class: &backend.ReplyError{Msg: err.Error()}, Cause: err}
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
		out := make([]backend.Value, len(a))
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
		out := make([]backend.Value, 0, 2*len(keys))
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
	return &backend.Error{Class: &backend.ReplyError{Msg: "unexpected reply: " + err.Error()}, Cause: err}
}

// RESPClient is the method set of a client of the rueidis family (its
// Client interface) that RESP drives: B is its command builder, C its
// command type (Completed), R its result, D its dedicated connection, Mode
// its ClientMode.
type RESPClient[B, C, R, D any, Mode ~string] interface {
	B() B
	Do(ctx context.Context, cmd C) R
	DoMulti(ctx context.Context, multi ...C) []R
	Dedicate() (client D, cancel func())
	Mode() Mode
}

// RESPBuilder is the method set of the client's command builder used
// here: A is its arbitrary command, S and U its SUBSCRIBE and UNSUBSCRIBE
// (which its arbitrary commands refuse).
type RESPBuilder[A, S, U any] interface {
	Arbitrary(token ...string) A
	Subscribe() S
	Unsubscribe() U
}

// RESPArbitrary is the method set of an arbitrary command of the builder,
// completed as a C.
type RESPArbitrary[A, C any] interface {
	Keys(keys ...string) A
	Args(args ...string) A
	Build() C
	Blocking() C
}

// RESPChannels is SUBSCRIBE or UNSUBSCRIBE of the builder, given its
// channels as X.
type RESPChannels[X any] interface {
	Channel(channel ...string) X
}

// RESPBuild is a command of the builder that is complete: Build returns
// it as a C.
type RESPBuild[C any] interface {
	Build() C
}

// RESPDedicated is the method set of the client's dedicated connection
// used here; H is its PubSubHooks.
type RESPDedicated[C, R, H any] interface {
	Do(ctx context.Context, cmd C) R
	DoMulti(ctx context.Context, multi ...C) []R
	SetPubSubHooks(hooks H) <-chan error
	Close()
}

// respDriver is how RESP sends and builds the commands it needs, made by
// NewRESP from the client.
type respDriver[C, R any] struct {
	do       func(ctx context.Context, cmd C) R
	doMulti  func(ctx context.Context, cmds ...C) []R
	script   func(s *backend.Script, keys, args []string, source bool) C // EVALSHA, or EVAL with source
	wait     func(replicas, timeout int64) C                             // WAIT, timeout in ms
	ping     func() C
	channels func(unsubscribe bool, channels []string) C // SUBSCRIBE, or UNSUBSCRIBE
	// dedicate opens a connection for a subscription, delivering its
	// messages, and reports its end on ended.
	dedicate func(deliver func(backend.Message)) (conn respConn[C, R], ended <-chan error)
	// pinned calls f with a DoMulti on one connection taken from the
	// client's pool (on a Cluster, to the master of the first keyed
	// command's slot, following no redirect), and puts it back.
	pinned  func(f func(doMulti func(ctx context.Context, cmds ...C) []R))
	closed  []error // the driver's errors for a closed client
	cluster func() bool
	as      func(target any) bool
}

// respConn is a dedicated connection: do sends on it, close closes it.
type respConn[C, R any] struct {
	do    func(ctx context.Context, cmd C) R
	close func()
}

// RESP is what an adapter over a client of the rueidis family does,
// written once for every such driver: Eval, EvalBatch (Batcher), EvalAck
// (ReplicaAcker), Subscribe, As (Unwrapper) and Cluster. An adapter's
// Backend is an alias of RESP instantiated with its driver's types, and
// its New returns NewRESP of the client. Type parameters:
// C is the driver's command type, R its result, M its message (reply)
// type and P a pointer to it, E (a pointer to) its error reply type.
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
	d     respDriver[C, R]
	isErr func(error) (E, bool)
	calls evalPool
}

// NewRESP returns the RESP of client c, a client of the rueidis family
// (rueidis.Client, valkey.Client of valkey-go): every type parameter is
// inferred from c's methods and the other arguments. isErr is the
// driver's test for an error reply (rueidis.IsRedisErr,
// valkey.IsValkeyErr), hooks makes the driver's pub/sub hooks that hand
// every message to deliver, and closed are the driver's errors for a
// closed client (classified as ErrClosed).
//
// Commands are built with the builder's arbitrary commands, flagged as
// its typed builders flag them (WAIT blocking), but for SUBSCRIBE and
// UNSUBSCRIBE, which need the typed builders.
func NewRESP[
	Cl RESPClient[B, C, R, D, Mode], B RESPBuilder[A, S, U], A RESPArbitrary[A, C],
	S RESPChannels[SC], SC RESPBuild[C], U RESPChannels[UC], UC RESPBuild[C],
	C any, R RESPResult[M], M any, P RESPMessage[M], E RESPError,
	D RESPDedicated[C, R, H], H any, Mode ~string,
](c Cl, isErr func(error) (E, bool), hooks func(deliver func(backend.Message)) H, closed ...error) *RESP[C, R, M, P, E] {
	r := &RESP[C, R, M, P, E]{d: respDriver[C, R]{
		do:      c.Do,
		doMulti: c.DoMulti,
		script: func(s *backend.Script, keys, args []string, source bool) C {
			cmd, body := "EVALSHA", s.Hash()
			if source {
				cmd, body = "EVAL", s.Source()
			}
			return c.B().Arbitrary(cmd, body, strconv.Itoa(len(keys))).Keys(keys...).Args(args...).Build()
		},
		wait: func(replicas, timeout int64) C {
			return c.B().Arbitrary("WAIT", strconv.FormatInt(replicas, 10), strconv.FormatInt(timeout, 10)).Blocking()
		},
		ping: func() C { return c.B().Arbitrary("PING").Build() },
		channels: func(unsubscribe bool, channels []string) C {
			if unsubscribe {
				return c.B().Unsubscribe().Channel(channels...).Build()
			}
			return c.B().Subscribe().Channel(channels...).Build()
		},
		dedicate: func(deliver func(backend.Message)) (respConn[C, R], <-chan error) {
			dc, cancel := c.Dedicate()
			ended := dc.SetPubSubHooks(hooks(deliver))
			return respConn[C, R]{do: dc.Do, close: func() { dc.Close(); cancel() }}, ended
		},
		pinned: func(f func(doMulti func(ctx context.Context, cmds ...C) []R)) {
			dc, cancel := c.Dedicate()
			defer cancel()
			f(dc.DoMulti)
		},
		closed:  closed,
		cluster: func() bool { return c.Mode() == "cluster" },
		as: func(target any) bool {
			t, ok := target.(*Cl)
			if ok && t != nil {
				*t = c
			}
			return ok && t != nil
		},
	}, isErr: isErr}
	r.calls.eval = r.eval
	return r
}

// As sets target, which must be a pointer to the client's type (a
// *rueidis.Client, a *valkey.Client), to the wrapped client (see
// Unwrapper).
func (r *RESP[C, R, M, P, E]) As(target any) bool { return r.d.as(target) }

// Cluster reports whether the client spreads keys over a Cluster (see
// Cluster).
func (r *RESP[C, R, M, P, E]) Cluster() bool { return r.d.cluster() }

// checkSlots is the check of a script call's keys (adapterkit.CheckSlots)
// on a cluster client, nil on another.
func (r *RESP[C, R, M, P, E]) checkSlots() func(keys []string) error {
	if r.d.cluster() {
		return adapterkit.CheckSlots
	}
	return nil
}

// slots refuses keys of several hash slots on a cluster client, whose
// command builder would panic on them.
func (r *RESP[C, R, M, P, E]) slots(keys []string) error {
	if check := r.checkSlots(); check != nil {
		return check(keys)
	}
	return nil
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
	return backend.Wrap(ctx, err,
		func(err error) bool {
			return slices.ContainsFunc(r.d.closed, func(c error) bool { return errors.Is(err, c) })
		},
		func(err error) (string, bool) {
			if e, ok := r.isErr(err); ok {
				return e.Error(), true
			}
			return "", false
		})
}

// result is the Value and error of a finished script command, as Eval and
// EvalBatch return them.
func (r *RESP[C, R, M, P, E]) result(ctx context.Context, res R) (backend.Value, error) {
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
func (r *RESP[C, R, M, P, E]) Eval(ctx context.Context, s *backend.Script, keys []string, args []string) (backend.Value, error) {
	if err := adapterkit.CheckCall(ctx, s); err != nil {
		return nil, err
	}
	if err := r.slots(keys); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ctx.Done() == nil {
		return r.eval(ctx, s, keys, args)
	}
	return r.calls.run(ctx, s, keys, args)
}

// eval is Eval on the caller's goroutine.
func (r *RESP[C, R, M, P, E]) eval(ctx context.Context, s *backend.Script, keys []string, args []string) (backend.Value, error) {
	v, err := r.result(ctx, r.d.do(ctx, r.d.script(s, keys, args, false)))
	if adapterkit.IsNoScript(err) {
		return r.result(ctx, r.d.do(ctx, r.d.script(s, keys, args, true)))
	}
	return v, err
}

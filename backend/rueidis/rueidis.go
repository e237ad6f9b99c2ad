// Package rueidis adapts github.com/redis/rueidis to backend.Backend.
//
// Every call returns by its context's deadline or cancellation. rueidis
// honours contexts on an open connection, but not everywhere around a
// dial: a call that finds its connection being dialed by another call
// waits for that dial (bounded by the other call's context, or by the
// dial timeout, 5 s by default); a dial's handshake ignores a cancellation
// without a deadline until the dial timeout; and a dedicated connection
// (a subscription's) is dialed without the caller's context. So a call
// whose context can end runs on a goroutine of its own, and returns at the
// context's end, abandoning the call: it runs on in the background until
// rueidis's own timeouts end it, and may still run on the server, which
// latchkit already treats as an unknown outcome. Eval does this at the
// cost of one allocation (the goroutine's; the state it shares with the
// caller is pooled); a call with a context that can never end
// (context.Background()) is made directly.
//
// Note that without a deadline a read-only command to an unreachable
// server may be retried indefinitely: give latchkit calls a context with a
// deadline.
//
// Against miniredis (the embedded default of the demo and tests) the client
// needs DisableCache: true (miniredis has no CLIENT TRACKING) and
// AlwaysRESP2: true (with RESP3 a connection that ran SUBSCRIBE refuses
// other commands on miniredis). A real Redis needs neither.
package rueidis

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/backend"
)

// Backend is a backend.Backend over a rueidis client.
type Backend struct {
	c       rd.Client
	scripts sync.Map  // *backend.Script -> *rd.Lua
	calls   sync.Pool // *evalCall
}

// New returns a Backend over c. The caller keeps ownership of c: closing
// the Backend does not close the client.
func New(c rd.Client) *Backend { return &Backend{c: c} }

// As sets target, which must be a *rueidis.Client, to the wrapped client.
func (b *Backend) As(target any) bool {
	t, ok := target.(*rd.Client)
	if ok {
		*t = b.c
	}
	return ok
}

// Cluster reports whether the client spreads keys over a Redis Cluster.
func (b *Backend) Cluster() bool { return b.c.Mode() == rd.ClientModeCluster }

func (b *Backend) script(s *backend.Script) *rd.Lua {
	if v, ok := b.scripts.Load(s); ok {
		return v.(*rd.Lua)
	}
	v, _ := b.scripts.LoadOrStore(s, rd.NewLuaScript(s.Source()))
	return v.(*rd.Lua)
}

// Eval runs s by EVALSHA, falling back to EVAL on NOSCRIPT (rueidis's Lua
// does this). It returns by ctx's end (see the package doc).
func (b *Backend) Eval(ctx context.Context, s *backend.Script, keys []string, args []string) (backend.Value, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ctx.Done() == nil {
		return b.eval(ctx, s, keys, args)
	}
	return b.boundedEval(ctx, s, keys, args)
}

// eval is Eval on the caller's goroutine.
func (b *Backend) eval(ctx context.Context, s *backend.Script, keys []string, args []string) (backend.Value, error) {
	return result(ctx, b.script(s).Exec(ctx, b.c, keys, args))
}

// result is the backend.Value and error of a finished script command, as
// Eval and EvalBatch return them.
func result(ctx context.Context, r rd.RedisResult) (backend.Value, error) {
	msg, err := r.ToMessage()
	if err != nil {
		if rd.IsRedisNil(err) {
			return nil, nil
		}
		return nil, wrap(ctx, err)
	}
	return Normalize(msg)
}

// EvalBatch runs calls with one DoMulti of EVALSHA commands, then the calls
// the server answered NOSCRIPT with a second DoMulti of EVAL. rueidis
// pipelines a DoMulti on its connection and, on a Cluster, splits it by
// slot, so calls may name keys of any slot (each call's own keys must share
// one slot). It returns by ctx's end (see the package doc); calls it gave
// up on all get an error matching ctx.Err().
func (b *Backend) EvalBatch(ctx context.Context, calls []backend.Call) {
	backend.RunBatch(ctx, calls, ctx.Done() != nil, b.pipeline)
}

// pipeline sends calls in one DoMulti (see backend.Pipeline).
func (b *Backend) pipeline(ctx context.Context, calls []backend.Call, source bool) {
	cmds := make(rd.Commands, len(calls))
	for i := range calls {
		c := &calls[i]
		if source {
			cmds[i] = b.c.B().Eval().Script(c.Script.Source()).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
		} else {
			cmds[i] = b.c.B().Evalsha().Sha1(c.Script.Hash()).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
		}
	}
	for i, r := range b.doMulti(ctx, calls, cmds) {
		calls[i].Value, calls[i].Err = result(ctx, r)
	}
}

// Normalize turns a rueidis reply into a backend.Value. RESP3 replies
// outside backend.Value are converted: a boolean to 1 or nil, a double to
// its string form, a map to a flat key, value array sorted by key.
func Normalize(m rd.RedisMessage) (backend.Value, error) {
	if err := m.Error(); err != nil {
		if rd.IsRedisNil(err) {
			return nil, nil
		}
		if re, ok := rd.IsRedisErr(err); ok {
			return nil, &backend.Error{Class: &backend.ReplyError{Msg: re.Error()}, Cause: err}
		}
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
			if out[i], err = Normalize(a[i]); err != nil {
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
			v, err := Normalize(mp[k])
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

var errUnexpected = errors.New("rueidis: unexpected reply type")

func badReply(err error) error {
	if err == nil {
		err = errUnexpected
	}
	return &backend.Error{Class: &backend.ReplyError{Msg: "unexpected reply: " + err.Error()}, Cause: err}
}

func wrap(ctx context.Context, err error) error {
	return backend.Wrap(ctx, err,
		func(err error) bool {
			return errors.Is(err, rd.ErrClosing) || errors.Is(err, rd.ErrDedicatedClientRecycled)
		},
		func(err error) (string, bool) {
			if re, ok := rd.IsRedisErr(err); ok {
				return re.Error(), true
			}
			return "", false
		})
}

// EvalAck runs s and then WAIT replicas timeout with DoMulti: rueidis sends
// a batch holding a blocking command (WAIT) on one dedicated connection, so
// WAIT counts the script's writes. On a Cluster the keyless WAIT follows the
// script's slot to its master. A NOSCRIPT answer to EVALSHA sends the pair
// again with EVAL. It returns by ctx's end (see the package doc).
func (b *Backend) EvalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Value, int, error) {
	return backend.RunAck(ctx, ctx.Done() != nil, keys, args, func(keys, args []string) (backend.Value, int, error) {
		return b.evalAck(ctx, s, keys, args, replicas, timeout)
	})
}

// evalAck is EvalAck on the caller's goroutine.
func (b *Backend) evalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Value, int, error) {
	wait := b.c.B().Wait().Numreplicas(int64(replicas)).Timeout(max(timeout.Milliseconds(), 1)).Build()
	res := b.c.DoMulti(ctx,
		b.c.B().Evalsha().Sha1(s.Hash()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(),
		wait)
	if re, ok := rd.IsRedisErr(res[0].Error()); ok && re.IsNoScript() {
		wait = b.c.B().Wait().Numreplicas(int64(replicas)).Timeout(max(timeout.Milliseconds(), 1)).Build()
		res = b.c.DoMulti(ctx,
			b.c.B().Eval().Script(s.Source()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(),
			wait)
	}
	msg, err := res[0].ToMessage()
	if err != nil && !rd.IsRedisNil(err) {
		return nil, 0, wrap(ctx, err)
	}
	n, err := res[1].AsInt64()
	if err != nil {
		return nil, 0, wrap(ctx, err)
	}
	v, err := Normalize(msg) // a nil reply normalizes to nil
	return v, int(n), err
}

// doMulti sends cmds, the commands of calls, by DoMulti. A cluster client refuses a
// DoMulti that mixes keyless commands with commands of several slots, so
// the keyless ones go in a DoMulti of their own.
func (b *Backend) doMulti(ctx context.Context, calls []backend.Call, cmds rd.Commands) []rd.RedisResult {
	keyless := func(j int) bool { return len(calls[j].Keys) == 0 }
	var none, some rd.Commands
	for j, c := range cmds {
		if keyless(j) {
			none = append(none, c)
		} else {
			some = append(some, c)
		}
	}
	if len(none) == 0 || len(some) == 0 {
		return b.c.DoMulti(ctx, cmds...)
	}
	rn, rs := b.c.DoMulti(ctx, none...), b.c.DoMulti(ctx, some...)
	res := make([]rd.RedisResult, len(cmds))
	for j := range cmds {
		if keyless(j) {
			res[j], rn = rn[0], rn[1:]
		} else {
			res[j], rs = rs[0], rs[1:]
		}
	}
	return res
}

var _ backend.Batcher = (*Backend)(nil)

package redigo

import (
	"context"
	"errors"
	"github.com/latchkit/latchkit/internal/adapterkit"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/redigoreply"
)

// adapter is the backend.Backend over a redigo pool that New returns.
// Besides backend.Backend it implements backend.Batcher,
// backend.ReplicaAcker, backend.Unwrapper and backend.Validator (see the
// assertions at the end of this file).
type adapter struct {
	pool   *redis.Pool
	health time.Duration
}

// Option configures the backend New returns.
type Option func(*adapter)

// WithHealthCheck sets how often a subscription's connection is sent a
// PING; a connection that answers nothing for twice as long is taken as
// dead and the subscription reports itself dropped. Default 5s.
func WithHealthCheck(d time.Duration) Option {
	return func(b *adapter) {
		if d > 0 {
			b.health = d
		}
	}
}

// New returns a backend.Backend over pool, which also implements
// backend.Batcher, backend.ReplicaAcker, backend.Unwrapper (As takes a
// **redis.Pool) and backend.Validator. The caller keeps ownership of
// pool: the backend never closes it. New(nil) returns nil, which every
// constructor of package primitives refuses with an error matching
// latchkit.ErrInvalid.
func New(pool *redis.Pool, opts ...Option) backend.Backend {
	if pool == nil {
		return nil // refused by every constructor of package primitives (ErrInvalid)
	}
	b := &adapter{pool: pool, health: 5 * time.Second}
	for _, o := range opts {
		if o != nil {
			o(b)
		}
	}
	return b
}

// As sets target, which must be a **redis.Pool, to the wrapped pool.
func (b *adapter) As(target any) bool {
	t, ok := target.(**redis.Pool)
	if ok && t != nil {
		*t = b.pool
	}
	return ok && t != nil
}

// Validate refuses an adapter without a pool.
func (b *adapter) Validate() error {
	if b == nil || b.pool == nil {
		return errNoPool
	}
	return nil
}

var errNoPool = errors.New("redigo: the Backend has no *redis.Pool")

// Eval runs s by EVALSHA, then by EVAL when the server answers NOSCRIPT,
// on one connection of the pool. It returns by ctx's end (see the package
// doc).
func (b *adapter) Eval(ctx context.Context, s *backend.Script, keys []string, args []string) (backend.Value, error) {
	if err := adapterkit.CheckCall(ctx, s); err != nil {
		return nil, err
	}
	keys, args = slices.Clone(keys), slices.Clone(args) // the call may outlive this one
	return backend.Await(ctx, func() (backend.Value, error) {
		var v backend.Value
		err := b.withConn(ctx, func(c redis.Conn) error {
			r, err := redis.DoContext(c, ctx, "EVALSHA", evalArgs(s.Hash(), keys, args)...)
			if adapterkit.IsNoScript(wrap(ctx, err)) {
				r, err = redis.DoContext(c, ctx, "EVAL", evalArgs(s.Source(), keys, args)...)
			}
			if err != nil {
				return err
			}
			v, err = redigoreply.Normalize(r)
			return err
		})
		return v, err
	}, nil)
}

// withConn runs fn on a connection of the pool, then gives the connection
// back: to the pool, or, when a command on it failed or was cut short by
// ctx's end, closed (redigo's pool discards a connection whose Err is
// set). The error is wrapped.
func (b *adapter) withConn(ctx context.Context, fn func(c redis.Conn) error) error {
	if b.pool == nil {
		return errNoPool
	}
	c, err := b.pool.GetContext(ctx)
	if err != nil {
		return wrap(ctx, err)
	}
	defer c.Close()
	if err := ctx.Err(); err != nil {
		return err // the connection came too late: it goes back unused
	}
	return wrap(ctx, fn(c))
}

// evalArgs are the arguments of EVALSHA or EVAL: the script's hash or
// source, the key count, the keys, the arguments.
func evalArgs(script string, keys, args []string) []any {
	a := make([]any, 0, 2+len(keys)+len(args))
	a = append(a, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	return a
}

// EvalBatch runs calls in one pipeline of EVALSHA commands on one
// connection, then the calls the server answered NOSCRIPT in a second
// pipeline of EVAL. It returns by ctx's end (see the package doc); calls it
// gave up on all get an error matching ctx.Err().
func (b *adapter) EvalBatch(ctx context.Context, calls []backend.Call) {
	adapterkit.RunBatch(ctx, calls, ctx != nil && ctx.Done() != nil, b.pipeline, nil)
}

// pipeline sends calls in one pipeline (see adapterkit.Pipeline).
func (b *adapter) pipeline(ctx context.Context, calls []backend.Call, source bool) {
	err := b.withConn(ctx, func(c redis.Conn) error {
		for i := range calls {
			cl := &calls[i]
			cmd, script := "EVALSHA", cl.Script.Hash()
			if source {
				cmd, script = "EVAL", cl.Script.Source()
			}
			if err := c.Send(cmd, evalArgs(script, cl.Keys, cl.Args)...); err != nil {
				return err
			}
		}
		replies, err := flush(ctx, c, len(calls))
		if err != nil {
			return err
		}
		for i, r := range replies {
			calls[i].Value, calls[i].Err = redigoreply.Normalize(r)
		}
		return nil
	})
	if err != nil {
		adapterkit.FailCalls(calls, err)
	}
}

// flush sends the commands queued on c by Send and reads their n replies
// (an error reply as a redis.Error value among them), bounded by ctx.
func flush(ctx context.Context, c redis.Conn, n int) ([]any, error) {
	r, err := redis.DoContext(c, ctx, "")
	if err != nil {
		return nil, err
	}
	replies, ok := r.([]any)
	if !ok || len(replies) != n {
		return nil, redigoreply.BadReply(errPipeline)
	}
	return replies, nil
}

var errPipeline = errors.New("redigo: a pipeline's replies do not match its commands")

// EvalAck runs s and then WAIT replicas timeout in one pipeline on one
// connection, so that WAIT counts the script's writes. A NOSCRIPT answer
// to EVALSHA sends the pair again with EVAL. It returns by ctx's end (see
// the package doc).
func (b *adapter) EvalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Value, int, error) {
	if err := adapterkit.CheckAck(ctx, s, replicas, timeout); err != nil {
		return nil, 0, err
	}
	return adapterkit.RunAck(ctx, ctx.Done() != nil, keys, args, func(keys, args []string) (backend.Value, int, error) {
		var v backend.Value
		var n int64
		err := b.withConn(ctx, func(c redis.Conn) error {
			run := func(cmd, script string) ([]any, error) {
				if err := c.Send(cmd, evalArgs(script, keys, args)...); err != nil {
					return nil, err
				}
				if err := c.Send("WAIT", replicas, max(timeout.Milliseconds(), 1)); err != nil {
					return nil, err
				}
				return flush(ctx, c, 2)
			}
			r, err := run("EVALSHA", s.Hash())
			if err == nil && adapterkit.IsNoScript(wrap(ctx, replyErr(r[0]))) {
				r, err = run("EVAL", s.Source())
			}
			if err != nil {
				return err
			}
			if v, err = redigoreply.Normalize(r[0]); err != nil {
				return err
			}
			n, err = redis.Int64(r[1], nil)
			return err
		})
		return v, int(n), err
	})
}

// replyErr is the error of a pipelined reply: the redis.Error it is, or
// nil.
func replyErr(r any) error {
	if e, ok := r.(redis.Error); ok {
		return e
	}
	return nil
}

// errPoolClosed is the message of redigo's (unexported) error for a Get on
// a closed pool.
const errPoolClosed = "redigo: get on closed pool"

func wrap(ctx context.Context, err error) error {
	return backend.Wrap(ctx, err,
		func(err error) bool { return strings.Contains(err.Error(), errPoolClosed) },
		func(err error) (string, bool) {
			var re redis.Error
			if errors.As(err, &re) {
				return redigoreply.Msg(re), true
			}
			return "", false
		})
}

var (
	_ backend.Backend      = (*adapter)(nil)
	_ backend.Batcher      = (*adapter)(nil)
	_ backend.ReplicaAcker = (*adapter)(nil)
	_ backend.Unwrapper    = (*adapter)(nil)
	_ backend.Validator    = (*adapter)(nil)
)

package goredis

import (
	"context"
	"errors"
	"github.com/latchkit/latchkit/internal/adapterkit"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/nilness"
)

// adapter is the backend.Backend over a go-redis client that New returns.
// Besides backend.Backend it implements backend.Batcher,
// backend.ReplicaAcker, backend.Unwrapper, backend.Validator and
// backend.Cluster (see the assertions at the end of this file).
type adapter struct {
	c      redis.UniversalClient
	boxes  *boxCache // see args.go
	health time.Duration
	// direct: the client bounds every call by its context itself
	// (ContextTimeoutEnabled), so calls are made on the caller's goroutine.
	direct bool
	// dials: the outcome of the client's latest dial (see dials.go); nil
	// for a client that is not watched.
	dials *dialWatch
}

// Option configures the backend New returns.
type Option func(*adapter)

// WithHealthCheck sets how long a subscription may stay silent before it
// sends a PING; a PING unanswered for as long again means the connection is
// dead and the subscription reports itself dropped. Default 5s.
func WithHealthCheck(d time.Duration) Option {
	return func(b *adapter) {
		if d > 0 {
			b.health = d
		}
	}
}

// New returns the backend for primitives.NewClient over c, which the
// caller keeps and closes; nil for a nil c, a typed nil included (which
// NewClient refuses). It is a backend.Batcher, ReplicaAcker, Validator,
// Cluster and Unwrapper (As takes a *redis.UniversalClient, *redis.Cmdable,
// **redis.Client or **redis.ClusterClient). It adds a hook to c that
// watches its dials (see the package doc).
func New(c redis.UniversalClient, opts ...Option) backend.Backend {
	if nilness.Is(c) {
		return nil // refused by primitives.NewClient (ErrInvalid)
	}
	b := &adapter{c: c, boxes: newBoxCache(), health: 5 * time.Second, direct: honoursContext(c), dials: watchDials(c)}
	for _, o := range opts {
		if o != nil {
			o(b)
		}
	}
	return b
}

// honoursContext reports whether c is known to end every call at its
// context's deadline: one of go-redis's own clients created with
// ContextTimeoutEnabled. Any other client (a wrapper, a fake) is not known
// to, whatever it wraps.
func honoursContext(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// As sets target, which must be a *redis.UniversalClient, *redis.Cmdable or
// a pointer to the concrete client type, to the wrapped client.
func (b *adapter) As(target any) bool {
	if nilness.Is(target) {
		return false
	}
	switch t := target.(type) {
	case *redis.UniversalClient:
		*t = b.c
	case *redis.Cmdable:
		*t = b.c
	case **redis.Client:
		c, ok := b.c.(*redis.Client)
		if !ok {
			return false
		}
		*t = c
	case **redis.ClusterClient:
		c, ok := b.c.(*redis.ClusterClient)
		if !ok {
			return false
		}
		*t = c
	default:
		return false
	}
	return true
}

// Validate reports a client latchkit cannot serve correctly: a *redis.Ring
// (see the package doc). The primitives' constructors refuse such a
// backend with an error wrapping latchkit.ErrInvalid.
func (b *adapter) Validate() error {
	if b == nil || nilness.Is(b.c) {
		return errNoClient
	}
	if _, ok := b.c.(*redis.Ring); ok {
		return errRing
	}
	return nil
}

var errNoClient = errors.New("goredis: the Backend has no client")

var errRing = errors.New("goredis: a *redis.Ring cannot serve latchkit: it shards keys by hash without a Cluster's redirects or pub/sub that follows the keys (a MultiLock over two shards would hold nothing on one, release messages would miss waiters); use a Redis Cluster, or a Redlock over independent servers")

// Cluster reports whether the client is a *redis.ClusterClient.
func (b *adapter) Cluster() bool {
	_, ok := b.c.(*redis.ClusterClient)
	return ok
}

// Eval runs s by EVALSHA, falling back to EVAL on NOSCRIPT (as go-redis's
// Script.Run does). It returns by ctx's end (see the package doc).
func (b *adapter) Eval(ctx context.Context, s *backend.Script, keys []string, args []string) (backend.Value, error) {
	if err := adapterkit.CheckCall(ctx, s); err != nil {
		return nil, err
	}
	start := time.Now()
	var v backend.Value
	var err error
	if b.direct {
		v, err = result(ctx, b.run(ctx, b.c, s, keys, args))
	} else {
		keys, args = slices.Clone(keys), slices.Clone(args) // the call may outlive this one
		v, err = backend.Await(ctx, func() (backend.Value, error) {
			return result(ctx, b.run(ctx, b.c, s, keys, args))
		}, nil)
	}
	if err != nil {
		return nil, b.unreached(ctx, start, err)
	}
	return v, nil
}

// result is the backend.Value and error of a finished script command, as
// Eval and EvalBatch return them.
func result(ctx context.Context, cmd *redis.Cmd) (backend.Value, error) {
	v, err := cmd.Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return nil, wrap(ctx, err)
	}
	return normalize(v)
}

// EvalBatch runs calls in one pipeline of EVALSHA commands, then the calls
// the server answered NOSCRIPT in a second pipeline of EVAL. go-redis
// routes a ClusterClient's pipelined commands by slot (one pipeline per
// node) and a Ring's by shard, so calls may name keys of any slot. It
// returns by ctx's end (see the package doc); calls it gave up on all get
// an error matching ctx.Err().
func (b *adapter) EvalBatch(ctx context.Context, calls []backend.Call) {
	if ctx == nil {
		adapterkit.RunBatch(ctx, calls, false, nil, nil) // fails them all
		return
	}
	start := time.Now()
	adapterkit.RunBatch(ctx, calls, !b.direct, b.pipeline, nil)
	for i := range calls {
		calls[i].Err = b.unreached(ctx, start, calls[i].Err)
	}
}

// pipeline sends calls in one go-redis pipeline (see adapterkit.Pipeline).
func (b *adapter) pipeline(ctx context.Context, calls []backend.Call, source bool) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := b.c.Pipeline()
	for i := range calls {
		c := &calls[i]
		cmds[i] = b.evalCmd(ctx, c.Script, c.Keys, c.Args, source)
		_ = pipe.Process(ctx, cmds[i]) // queued
	}
	_, _ = pipe.Exec(ctx) // the errors are read per command below
	for i, cmd := range cmds {
		calls[i].Value, calls[i].Err = result(ctx, cmd)
	}
}

// normalize turns a go-redis reply into a backend.Value. Replies of types
// outside backend.Value (RESP3 doubles, booleans, maps) are converted: a
// boolean to 1 or nil, a double to its string form, a map to a flat array.
func normalize(v any) (backend.Value, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case int64:
		return x, nil
	case string:
		return x, nil
	case []byte:
		return string(x), nil
	case bool:
		if x {
			return int64(1), nil
		}
		return nil, nil
	case []any:
		out := make([]backend.Value, len(x))
		for i, e := range x {
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case map[any]any:
		out := make([]backend.Value, 0, 2*len(x))
		for k, e := range x {
			nk, err := normalize(k)
			if err != nil {
				return nil, err
			}
			ne, err := normalize(e)
			if err != nil {
				return nil, err
			}
			out = append(out, nk, ne)
		}
		return out, nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case redis.Error:
		return nil, &backend.Error{Class: &backend.ReplyError{Msg: x.Error()}, Cause: x}
	case error:
		return nil, &backend.Error{Class: &backend.ReplyError{Msg: x.Error()}, Cause: x}
	default:
		return nil, &backend.Error{Class: &backend.ReplyError{Msg: "unexpected reply type"}, Cause: errUnexpected}
	}
}

var errUnexpected = errors.New("goredis: unexpected reply type")

func wrap(ctx context.Context, err error) error {
	return backend.Wrap(ctx, err,
		func(err error) bool { return errors.Is(err, redis.ErrClosed) },
		func(err error) (string, bool) {
			var re redis.Error
			if errors.As(err, &re) {
				return strings.TrimSpace(re.Error()), true
			}
			return "", false
		})
}

// EvalAck runs s and then WAIT replicas timeout in one pipeline, so both go
// out on one connection (WAIT counts only that connection's writes). On a
// ClusterClient the pipeline goes to the master of keys[0]'s slot in the
// client's slot map, which follows no redirect: a slot that moved is
// answered MOVED, which makes the client reload its slot map (go-redis
// otherwise reloads it only every minute), as does a master that cannot
// be reached; a migrating slot is answered ASK or TRYAGAIN. EvalAck
// returns each as ErrUnavailable (a redirect, having run nothing). A
// NOSCRIPT answer to EVALSHA sends the pair again with EVAL. It returns by
// ctx's end (see the package doc).
func (b *adapter) EvalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Value, int, error) {
	if err := adapterkit.CheckAck(ctx, s, replicas, timeout); err != nil {
		return nil, 0, err
	}
	start := time.Now()
	v, n, err := adapterkit.RunAck(ctx, !b.direct, keys, args, func(keys, args []string) (backend.Value, int, error) {
		return b.evalAck(ctx, s, keys, args, replicas, timeout)
	})
	return v, n, b.unreached(ctx, start, err)
}

// evalAck is EvalAck on the caller's goroutine.
func (b *adapter) evalAck(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Value, int, error) {
	var c redis.Cmdable = b.c
	cc, _ := b.c.(*redis.ClusterClient)
	if cc != nil && len(keys) > 0 {
		m, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, wrap(ctx, err)
		}
		c = m
	}
	run := func(eval bool) (*redis.Cmd, *redis.Cmd) {
		pipe := c.Pipeline()
		cmd := b.evalCmd(ctx, s, keys, args, eval)
		_ = pipe.Process(ctx, cmd) // queued
		// Pipeliner has no Wait method; Do sends it as is.
		wait := pipe.Do(ctx, "WAIT", replicas, max(timeout.Milliseconds(), 1))
		_, _ = pipe.Exec(ctx) // the errors are read per command below
		return cmd, wait
	}
	cmd, wait := run(false)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait = run(true)
	}
	v, err := cmd.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		var re redis.Error
		if cc != nil && (redis.HasErrorPrefix(err, "MOVED") || !errors.As(err, &re)) {
			// The slot moved, or its master in the map cannot be
			// reached (it may have failed over): the plain client of
			// MasterForKey follows nothing, so the map must catch up.
			cc.ReloadState(ctx)
		}
		return nil, 0, wrap(ctx, err)
	}
	n, err := wait.Int64()
	if err != nil {
		return nil, 0, wrap(ctx, err)
	}
	nv, err := normalize(v)
	return nv, int(n), err
}

var (
	_ backend.Backend      = (*adapter)(nil)
	_ backend.Batcher      = (*adapter)(nil)
	_ backend.ReplicaAcker = (*adapter)(nil)
	_ backend.Unwrapper    = (*adapter)(nil)
	_ backend.Validator    = (*adapter)(nil)
	_ backend.Cluster      = (*adapter)(nil)
)

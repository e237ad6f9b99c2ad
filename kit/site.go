package kit

import (
	"context"
	"fmt"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	engine "github.com/latchkit/latchkit/internal/kit"
)

// Site is the primitive of one name: its Client, options, keys and
// release channel. It is safe for concurrent use.
type Site struct {
	l       *Layout
	name    string
	cfg     engine.Config
	b       backend.Backend
	keys    []string // the layout's keys, in its order
	channel string
	chans   []string // {channel}
}

// NewSite returns the primitive named name of layout l on cl, with opts
// (the lock family's options of package primitives: WithPrefix, WithRetry,
// WithMiddleware, ...). A nil Client, an empty name or one longer than
// 1024 bytes, a bad option and a layout that is not valid are refused with
// an error matching latchkit.ErrInvalid, a closed Client with one matching
// latchkit.ErrClosed; nothing is sent.
func NewSite(cl *Client, l *Layout, name string, opts ...Option) (*Site, error) {
	var kind latchkit.Kind
	if l != nil {
		kind = l.Kind
	}
	if err := l.check(); err != nil {
		return nil, engine.Invalid("new", kind, name, "%v", err)
	}
	cfg, err := engine.NewConfig(kind, core(cl), name, []string{name}, func(c *engine.Config) { engine.ApplyOptions(opts, c) })
	if err != nil {
		return nil, err
	}
	s := &Site{l: l, name: name, cfg: cfg, b: engine.BackendOf(core(cl))}
	all := keyspace.Join(keyspace.KeyBase(cfg.Prefix, name), "", l.Keys, func(k Key) string { return k.Suffix }, l.channel())
	s.keys, s.channel = all[:len(l.Keys):len(l.Keys)], all[len(l.Keys)]
	s.chans = []string{s.channel}
	return s, nil
}

// Name is the primitive's name ("" for a nil Site).
func (s *Site) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Key is the Redis key of the layout's key named name ("" if it has none).
func (s *Site) Key(name string) string {
	if s == nil {
		return ""
	}
	if i := s.l.index(name); i >= 0 {
		return s.keys[i]
	}
	return ""
}

// errNilSite is the error of a call op on a nil Site.
func errNilSite(op string) error {
	return &latchkit.OpError{Op: op, Err: fmt.Errorf("%w: a nil Site", latchkit.ErrInvalid)}
}

// keysOf are sc's KEYS at s; sc must be of s's layout.
func (s *Site) keysOf(sc *Script) ([]string, error) {
	if sc == nil || sc.l != s.l {
		return nil, fmt.Errorf("%w: a script of another layout, or none", latchkit.ErrInvalid)
	}
	if n := len(sc.keys); sc.lead {
		return s.keys[:n:n], nil
	}
	keys := make([]string, len(sc.keys))
	for i, k := range sc.keys {
		keys[i] = s.keys[k]
	}
	return keys, nil
}

// keyErr is err, a script's at sc, with a key of another type named (see
// engine.KeyErrTypes), the types being the layout's.
func (s *Site) keyErr(ctx context.Context, sc *Script, keys []string, err error) error {
	types := make([]string, len(sc.keys))
	for i, k := range sc.keys {
		types[i] = s.l.Keys[k].Type
	}
	return engine.KeyErrTypes(ctx, s.b, keys, types, err)
}

// Eval runs sc once at s with ARGV the call header (a new call id, the
// release channel, the retention ms), then args, and returns its reply. op
// names the call in errors ("count"). A key of another type, and an
// argument the script refuses with the invalid block, give an error
// matching latchkit.ErrInvalid that names the key; Redis unreachable,
// latchkit.ErrUnavailable (the script may have run); a closed Client,
// latchkit.ErrClosed. Every error is a *latchkit.OpError.
func (s *Site) Eval(ctx context.Context, op string, sc *Script, args ...string) (backend.Value, error) {
	return s.call(ctx, op, sc, args, false)
}

// Do is Eval retried while Redis cannot be reached, paced by the retry
// policy, until it gets an answer, ctx ends (an error matching ctx's) or
// the Client closes (latchkit.ErrClosed): every try carries the same call
// id (ARGV[1]), so that a script that remembers the ids it applied applies
// a call once however many tries got through.
func (s *Site) Do(ctx context.Context, op string, sc *Script, args ...string) (backend.Value, error) {
	return s.call(ctx, op, sc, args, true)
}

// call is Eval, or with retried Do: one call of the Client, its ARGV the
// call header then args, its error a *latchkit.OpError of op.
func (s *Site) call(ctx context.Context, op string, sc *Script, args []string, retried bool) (backend.Value, error) {
	if s == nil {
		return nil, errNilSite(op)
	}
	if err := s.cfg.BeginCall(ctx); err != nil {
		return nil, engine.OpErr(op, s.l.Kind, s.name, err)
	}
	defer s.cfg.End()
	argv := append(make([]string, 0, 3+len(args)), s.cfg.NewToken(), s.channel, s.cfg.RetArg)
	argv = append(argv, args...)
	var v backend.Value
	var err error
	if retried {
		v, err = s.cfg.Idempotent(ctx, func(ctx context.Context) (backend.Value, error) { return s.eval(ctx, sc, argv) })
	} else {
		v, err = s.eval(ctx, sc, argv)
	}
	if err != nil {
		return nil, engine.OpErr(op, s.l.Kind, s.name, err)
	}
	return v, nil
}

// eval runs sc at s with argv, a key of another type named.
func (s *Site) eval(ctx context.Context, sc *Script, argv []string) (backend.Value, error) {
	keys, err := s.keysOf(sc)
	if err != nil {
		return nil, err
	}
	v, err := s.b.Eval(ctx, sc.s, keys, argv)
	if err != nil {
		return nil, s.keyErr(ctx, sc, keys, err)
	}
	return v, nil
}

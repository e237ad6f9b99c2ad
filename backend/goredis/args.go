package goredis

import (
	"context"
	"hash/maphash"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
)

// go-redis takes a command's arguments as []any, and boxing a string in an
// interface allocates. A primitive sends the same strings again and again:
// its keys and settings on every call, a lease's token at its acquire,
// renewals and release. So the adapter boxes through a small cache of
// recently boxed strings: a hit costs a hash and a comparison, no
// allocation.

// boxSlots is the size of a Backend's cache of boxed strings (a power of
// two): about as many keys and arguments as a few hundred leases in use at
// once send.
const boxSlots = 4096

// boxCache maps strings to their boxed form, direct-mapped by hash: a new
// string evicts whatever shared its slot. Entries are immutable and
// published atomically, so lookups take no lock.
type boxCache struct {
	seed  maphash.Seed
	slots [boxSlots]atomic.Pointer[boxEntry]
}

type boxEntry struct {
	s string
	v any // s boxed
}

func newBoxCache() *boxCache { return &boxCache{seed: maphash.MakeSeed()} }

// box returns s as an interface value, from the cache when it holds s.
func (c *boxCache) box(s string) any {
	slot := &c.slots[maphash.String(c.seed, s)&(boxSlots-1)]
	if e := slot.Load(); e != nil && e.s == s {
		return e.v
	}
	e := &boxEntry{s: s, v: s}
	slot.Store(e)
	return e.v
}

// evalArgs are the arguments of EVALSHA s (EVAL with its source when
// source is set) over keys and args, in one slice.
func (b *adapter) evalArgs(s *backend.Script, keys, args []string, source bool) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	if source {
		a = append(a, "eval", b.boxes.box(s.Source()))
	} else {
		a = append(a, "evalsha", b.boxes.box(s.Hash()))
	}
	if len(keys) == 0 {
		a = append(a, "0") // go-redis reads a "0" here as a command without keys
	} else {
		a = append(a, len(keys))
	}
	for _, k := range keys {
		a = append(a, b.boxes.box(k))
	}
	for _, v := range args {
		a = append(a, b.boxes.box(v))
	}
	return a
}

// evalCmd makes the command of evalArgs, routed by its first key (as
// go-redis's own Eval does).
func (b *adapter) evalCmd(ctx context.Context, s *backend.Script, keys, args []string, source bool) *redis.Cmd {
	cmd := redis.NewCmd(ctx, b.evalArgs(s, keys, args, source)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// run runs s over keys and args on c: EVALSHA, then EVAL on NOSCRIPT.
func (b *adapter) run(ctx context.Context, c interface {
	Process(context.Context, redis.Cmder) error
}, s *backend.Script, keys, args []string) *redis.Cmd {
	cmd := b.evalCmd(ctx, s, keys, args, false)
	_ = c.Process(ctx, cmd) // the error is the command's
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = b.evalCmd(ctx, s, keys, args, true)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

package primitives

import (
	"context"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// acquisition describes one logical Lock or Acquire of a primitive.
type acquisition struct {
	op    string // "lock" or "acquire", for errors
	kind  latchkit.Kind
	name  string
	chans []string // release channels (read-only, may be shared)
	try   bool
	// attempt makes one attempt for token: a lease, or ErrNotAcquired with
	// req.WaitHint set.
	attempt func(ctx context.Context, req *latchkit.Request, token string) (latchkit.Lease, error)
	// abandon, when set, runs after a waiting acquisition that made
	// attempts gave up: it takes back a place its attempts queued, rather
	// than let it hold others up until it times out.
	abandon func(ctx context.Context, token string)
}

// acquire runs a through the primitive's middleware chain with a new
// token: the same token for every attempt, so that an attempt whose reply
// was lost is recognized by the next one.
func (c *config) acquire(ctx context.Context, b backend.Backend, a acquisition) (latchkit.Lease, error) {
	req := &latchkit.Request{
		Name: a.name, Kind: a.kind, TTL: c.ttl, Backend: b,
		Channels: a.chans, Try: a.try, Owner: ownerFrom(ctx),
	}
	token := newToken()
	l, err := c.chain(func(ctx context.Context, req *latchkit.Request) (latchkit.Lease, error) {
		return a.attempt(ctx, req, token)
	})(ctx, req)
	if err != nil {
		if a.abandon != nil && !a.try && req.Attempts > 0 {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			a.abandon(actx, token)
			cancel()
		}
		return nil, opErr(a.op, a.kind, a.name, err)
	}
	return l, nil
}

// scriptAttempt is the attempt of a primitive whose acquire is one script
// over fixed keys, with ARGV the token then args, replying {1, fence} or
// {0, hint ms}.
func scriptAttempt(b backend.Backend, s *backend.Script, keys, args []string, h holder, cfg *config) func(context.Context, *latchkit.Request, string) (latchkit.Lease, error) {
	return func(ctx context.Context, req *latchkit.Request, token string) (latchkit.Lease, error) {
		req.Attempts++
		start := time.Now()
		v, err := b.Eval(ctx, s, keys, append([]string{token}, args...))
		if err != nil {
			return nil, scriptErr(err)
		}
		return grant(ctx, req, v, h, token, start, *cfg)
	}
}

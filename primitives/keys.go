package primitives

import (
	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
)

// site is where a semaphore lives: its backend, kind, name and options, its
// keys in the layout's order, and its release channel.
type site struct {
	b       backend.Backend
	kind    latchkit.Kind
	name    string
	cfg     config
	keys    []string
	channel string
	chans   []string // {channel}
}

// newSite checks a semaphore's options and limit (ErrInvalid otherwise)
// and lays out its keys.
func newSite(l keyspace.Layout, kind latchkit.Kind, cl *Client, name string, limit int, opts []Option) (site, error) {
	cfg, err := newConfig(kind, cl, name, opts)
	if err != nil {
		return site{}, err
	}
	if limit < 1 {
		return site{}, invalid("new", kind, name, "limit %d is below 1", limit)
	}
	names := l.Names(cfg.prefix, name)
	keys, channel := names[:len(l.Keys):len(l.Keys)], names[len(l.Keys)]
	return site{b: cl.b, kind: kind, name: name, cfg: cfg,
		keys: keys, channel: channel, chans: names[len(l.Keys):]}, nil
}

// checkPermits refuses a number of permits below 1 (ErrInvalid): nothing
// is sent. One above the limit is refused by the acquire script, which
// knows the limit SetLimit stored.
func (s *site) checkPermits(n int) error {
	if n < 1 {
		return invalid("acquire", s.kind, s.name, "%d permits asked for: at least 1", n)
	}
	return nil
}

// checkLimit refuses a limit below 1 for SetLimit (ErrInvalid): nothing is
// sent.
func (s *site) checkLimit(limit int) error {
	if limit < 1 {
		return invalid("set_limit", s.kind, s.name, "limit %d is below 1", limit)
	}
	return nil
}

package kit

import (
	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
)

// Site is where a semaphore lives: its backend, kind, name and options, its
// keys in the layout's order, and its release channel.
type Site struct {
	B       backend.Backend
	Kind    latchkit.Kind
	Name    string
	Cfg     Config
	Keys    []string
	Channel string
	Chans   []string // {channel}
}

// NewSite checks a semaphore's limit (ErrInvalid otherwise) and lays out
// its keys; cfg is its checked configuration.
func NewSite(l keyspace.Layout, kind latchkit.Kind, cfg Config, name string, limit int) (Site, error) {
	if limit < 1 {
		return Site{}, Invalid("new", kind, name, "limit %d is below 1", limit)
	}
	names := l.Names(cfg.Prefix, name)
	keys, channel := names[:len(l.Keys):len(l.Keys)], names[len(l.Keys)]
	return Site{B: cfg.Cl.b, Kind: kind, Name: name, Cfg: cfg,
		Keys: keys, Channel: channel, Chans: names[len(l.Keys):]}, nil
}

// CheckPermits refuses a number of permits below 1 (ErrInvalid): nothing
// is sent. One above the limit is refused by the acquire script, which
// knows the limit SetLimit stored.
func (s *Site) CheckPermits(n int) error {
	if n < 1 {
		return Invalid("acquire", s.Kind, s.Name, "%d permits asked for: at least 1", n)
	}
	return nil
}

// CheckLimit refuses a limit below 1 for SetLimit (ErrInvalid): nothing is
// sent.
func (s *Site) CheckLimit(limit int) error {
	if limit < 1 {
		return Invalid("set_limit", s.Kind, s.Name, "limit %d is below 1", limit)
	}
	return nil
}

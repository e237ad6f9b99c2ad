package kittest

import (
	"context"
	"fmt"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// noChannels is a redis-server whose ACL grants the default user every
// key and command and no pub/sub channel: a deployment that gives a
// service its keys alone.
var noChannels = []string{"--user", "default", "on", "nopass", "~*", "resetchannels", "+@all"}

// checkACL: on a server whose ACL refuses every channel, grants and
// releases work, twice over (the releases freed what the grants took): a
// script's PUBLISH is by redis.pcall, so that a refused one fails nothing
// the script wrote. MustLoad refuses a PUBLISH by redis.call it can read;
// this finds one it cannot (a call through another name). redis-server
// only (miniredis has no ACL on channels).
func checkACL(ctx context.Context, e *env, s Subject) error {
	if !e.real {
		e.t.Skip("channel ACLs are redis-server's alone")
	}
	ae := newEnv(e.t, redistest.Start(e.t, noChannels...).Addr, true, e.newB)
	for round := 1; round <= 2; round++ {
		var leases []latchkit.Lease
		for i := 0; i < s.Limit; i++ {
			l, err := ae.acquire(ctx, s, ae.client(nil), "acl", true)
			if err != nil {
				return fmt.Errorf("round %d, grant %d, on a server whose ACL refuses every channel: %w", round, i+1, err)
			}
			if l == nil {
				return nil // takes: nothing released
			}
			leases = append(leases, l)
		}
		for _, l := range leases {
			if err := l.Release(ctx); err != nil {
				return fmt.Errorf("round %d: a release on a server whose ACL refuses every channel: %w (a PUBLISH by redis.call fails its script)", round, err)
			}
		}
	}
	return nil
}

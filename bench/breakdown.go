package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/internal/floor"
	"github.com/latchkit/latchkit/primitives"
)

// S2x says where S2's Redis CPU goes: the fenced floor, then the fenced
// floor plus each command that latchkit's uncontended Mutex scripts run
// beyond it, one at a time, beside the floor and latchkit itself, all on
// rueidis (whose client costs least, so that Redis's work shows). Each
// variant's scripts run the commands latchkit's do, on keys named as
// latchkit names them, and nothing else; what latchkit costs beyond the
// sum is its scripts' Lua (shared functions, more arguments).
//
// The added commands:
//   - given-back check: ZSCORE of the token in the set of tokens given
//     back, which refuses a late copy of an abandoned attempt (no grant
//     nobody holds);
//   - queue check: ZCARD of the wait queue on release, which a hand-over
//     needs;
//   - release marker: SET of the released token for a minute, which lets
//     a retried release whose reply was lost report success.
//
// And one fence written another way: the counter set to the server's
// clock with SET … GET, its previous value read by the same command, and
// raised past it only when the clock is behind (no INCR): what dropping
// the INCR from the fence would save.
func breakdownContenders() []contender {
	const (
		givenBack = "if redis.call('ZSCORE', KEYS[5], ARGV[1]) then return false end\n"
		release   = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
		queue     = "redis.pcall('ZCARD', KEYS[6])\n"
		marker    = "redis.call('SET', KEYS[3], ARGV[1], 'PX', 60000)\n"
		del       = "redis.call('DEL', KEYS[1])\nreturn 1"
		// noIncr is the fenced floor's acquire with the fence raised as
		// described above (KEYS[2] the counter, ARGV[3] its retention).
		noIncr = `if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = tonumber(redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3], 'GET'))
if old and old >= f then
  f = old + 1
  redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
end
return f`
	)
	variant := func(name, acquire, rel string) contender {
		return contender{name: name, driver: "rueidis", floor: floorRueidis,
			open: openScripted(rd.NewLuaScript(acquire), rd.NewLuaScript(rel))}
	}
	fenced := floor.FencedAcquireSource
	return []contender{
		{name: floorRueidis, driver: "rueidis", open: openFloorRueidis},
		variant("fenced floor", fenced, release+del),
		variant("fenced floor, fence by TIME + SET…GET (no INCR)", noIncr, release+del),
		variant("fenced floor + given-back check (ZSCORE)", givenBack+fenced, release+del),
		variant("fenced floor + queue check (ZCARD)", fenced, release+queue+del),
		variant("fenced floor + release marker (SET)", fenced, release+marker+del),
		variant("fenced floor + all three", givenBack+fenced, release+queue+marker+del),
		{name: "latchkit Mutex, rueidis", driver: "rueidis", floor: floorRueidis,
			open: openLatchkit(rueidisBackend, primitives.NewMutex)},
	}
}

// openScripted is a lock of one acquire and one release script on the
// Mutex's key layout (lock, fence, marker, annotation, given back, queue,
// liveness), with latchkit's arguments: the acquire gets the token, the
// TTL and the retention and replies false when the lock is held.
func openScripted(acquire, release *rd.Lua) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
	return func(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
		c, err := newRueidis(rueidisOption(addrs[0]), sent)
		if err != nil {
			return nil, fmt.Errorf("rueidis client: %w", err)
		}
		ms := strconv.FormatInt(ttl.Milliseconds(), 10)
		return &lockClient{
			try: func(ctx context.Context, key string) (unlockFunc, error) {
				base := "latch:{" + key + "}"
				keys := []string{base, base + ":fence", base + ":released", base + ":who", base + ":gone", base + ":q", base + ":qlive"}
				tok := newToken()
				err := acquire.Exec(ctx, c, keys, []string{tok, ms, fenceRetentionMs}).Error()
				if rd.IsRedisNil(err) {
					return nil, errBusy
				}
				if err != nil {
					return nil, fmt.Errorf("acquire %s: %w", key, err)
				}
				return func(ctx context.Context) error {
					n, err := release.Exec(ctx, c, keys, []string{tok}).AsInt64()
					if err != nil {
						return fmt.Errorf("release %s: %w", key, err)
					}
					if n != 1 {
						return errors.New("release " + key + ": not held")
					}
					return nil
				}, nil
			},
			close: c.Close,
		}, nil
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
//
// Then the bounds and designs of issue 29 (one key per idle name):
//   - bounds: the acquire as a script doing only SET NX PX (with the
//     layout's seven keys declared, and with one), and TIME + SET NX PX
//     with the fence in the lock's value and nothing remembered: what any
//     fenced lock whose acquire is a script costs at least;
//   - design A (latchkit's since): the fence in the lock's value ("token
//     fence"), the finished tokens in one zset (:gone) by server ms, the
//     last fence beside them (member "#") only while it may be ahead of
//     the clock; the same declaring only the lock, :gone and the queue;
//   - design B: as A, the tokens scored by their fence (no TIME on
//     release) and trimmed on one release in sixteen;
//   - design C: as A, the last fence written on every release.
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
	// The designs of issue 29: the lock's value is "token fence", the
	// fence the server's clock in µs (one more than a remembered fence
	// still ahead of it); one key beside the lock, :gone, a zset holding
	// the tokens that finished and, under the member "#", the last fence
	// while it may still be ahead of the clock.
	const designAcquire = `local g = redis.call('ZMSCORE', KEYS[5], ARGV[1], '#')
if g[1] then return false end
local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
if g[2] and tonumber(g[2]) >= f then f = tonumber(g[2]) + 1 end
if not redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', f), 'NX', 'PX', ARGV[2]) then return false end
return f`
	const designAcquireBare = `local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
if not redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', f), 'NX', 'PX', ARGV[2]) then return false end
return f`
	const designHead = `local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local sp = string.find(v, ' ', 1, true)
if not sp or string.sub(v, 1, sp - 1) ~= ARGV[1] then return 0 end
redis.pcall('ZCARD', KEYS[6])
local f = tonumber(string.sub(v, sp + 1))
`
	const designRelease = designHead + `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if f >= tonumber(t[1]) * 1000000 + tonumber(t[2]) then
  redis.call('ZADD', KEYS[5], now, ARGV[1], f, '#')
else
  redis.call('ZADD', KEYS[5], now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - 60000)
redis.call('PEXPIRE', KEYS[5], 60000)
redis.call('DEL', KEYS[1])
return 1`
	const designReleaseNoTime = designHead + `redis.call('ZADD', KEYS[5], f, ARGV[1])
if f % 16 == 0 then redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', f - 60000000) end
redis.call('PEXPIRE', KEYS[5], 60000)
redis.call('DEL', KEYS[1])
return 1`
	const designReleaseAlways = designHead + `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[5], now, ARGV[1], f, '#')
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - 60000)
redis.call('PEXPIRE', KEYS[5], 60000)
redis.call('DEL', KEYS[1])
return 1`
	variant := func(name, acquire, rel string) contender {
		return contender{name: name, driver: "rueidis", floor: floorRueidis,
			open: openScripted(rd.NewLuaScript(acquire), rd.NewLuaScript(rel))}
	}
	slim := func(name, acquire, rel string) contender {
		return contender{name: name, driver: "rueidis", floor: floorRueidis,
			open: openScriptedKeys(rd.NewLuaScript(acquire), rd.NewLuaScript(rel), []int{0, 4, 5})}
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
		variant("bound: SET NX PX in a script, no fence", "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or false", release+del),
		variant("bound: TIME + SET NX PX (fence in the value), nothing remembered", designAcquireBare, designHead+del),
		slim("bound: SET NX PX in a script, no fence, one key declared", "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or false", release+del),
		slim("design A, declaring only the lock, :gone and the queue", strings.ReplaceAll(designAcquire, "KEYS[5]", "KEYS[2]"), strings.ReplaceAll(strings.ReplaceAll(designRelease, "KEYS[5]", "KEYS[2]"), "KEYS[6]", "KEYS[3]")),
		variant("design A: fence in the lock's value, one :gone zset (tokens by ms, the fence when ahead)", designAcquire, designRelease),
		variant("design B: as A, the tokens scored by their fence (no TIME on release), trimmed lazily", designAcquire, designReleaseNoTime),
		variant("design C: as A, the last fence always written (no ahead test)", designAcquire, designReleaseAlways),
		{name: "latchkit Mutex, rueidis", driver: "rueidis", floor: floorRueidis,
			open: openLatchkit(rueidisBackend, primitives.NewMutex)},
	}
}

// openScripted is a lock of one acquire and one release script on the
// Mutex's key layout (lock, fence, marker, annotation, given back, queue,
// liveness), with latchkit's arguments: the acquire gets the token, the
// TTL and the retention and replies false when the lock is held.
func openScripted(acquire, release *rd.Lua) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
	return openScriptedKeys(acquire, release, nil)
}

// openScriptedKeys is openScripted declaring only the keys of the layout
// at the given places (all seven when pick is nil).
func openScriptedKeys(acquire, release *rd.Lua, pick []int) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
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
				if pick != nil {
					all := keys
					keys = nil
					for _, i := range pick {
						keys = append(keys, all[i])
					}
				}
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

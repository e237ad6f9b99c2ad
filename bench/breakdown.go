package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/primitives"
)

// S2x says where S2's Redis CPU goes, and what each design of the fenced
// lock costs (issue 39), all on rueidis (whose client costs least, so that
// Redis's work shows), beside the floor and latchkit itself. Each variant's
// scripts run exactly the commands named, on keys named as latchkit names
// them (the Mutex layout's seven declared), and nothing else.
//
//   - minimal fenced lock: acquire TIME and SET NX PX with "token fence"
//     as the value; release GET, ZCARD of the wait queue, DEL; nothing
//     remembered. What a scripted, fenced, queue-aware lock costs.
//   - design D: the minimal lock, plus ZMSCORE of the token and of the
//     kept fence in :gone on acquire (a late copy of a given-up attempt
//     refused; a fence kept while ahead of the clock raised past), and
//     TIME on release (the lock's fence kept when the clock has not moved
//     past it). Seven commands.
//   - design D without the release's TIME: six commands; fences then
//     strictly increase only while the server's clock moves between two
//     grants of a name (a clock that stands still, as a test's may, or
//     steps back, gives the next grant an equal fence).
//   - design E: what the rare paths need rides in the lock key's value
//     (flags written only on those paths: a waiter queued, a token given
//     back, a fence ahead of the clock), so the acquire is TIME and SET NX
//     PX, and the release GET and SET of a free marker "~ fence" for a
//     millisecond (which keeps fences increasing on a clock that stands
//     still). Four commands, every promise kept; but SET of a key with an
//     expiry costs more than DEL.
//   - design E' (latchkit's): as E, the release GET, TIME and DEL (the
//     marker only when the clock has not passed the fence). Five
//     commands, every promise kept.
//   - design E with DEL: as E, the release GET and DEL: four commands;
//     fences then strictly increase only on a clock that moves between a
//     grant and the name's next.
//   - design E' as Redis Functions: the same two scripts in a library
//     loaded once (FUNCTION LOAD), called by FCALL instead of EVALSHA.
//   - plain SET NX PX acquire (no script) and the queue-aware release: the
//     shape a fence computed on demand while the lease is held would take
//     (Fence then a call of its own); refusing a late copy of a given-up
//     attempt and keeping a fence ahead of the clock are then impossible
//     at the acquire.
func breakdownContenders() []contender {
	const (
		minimalAcquire = `local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
if not redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', f), 'NX', 'PX', ARGV[2]) then return false end
return f`
		designAcquire = `local g = redis.call('ZMSCORE', KEYS[5], ARGV[1], '#')
if g[1] then return false end
local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
if g[2] and tonumber(g[2]) >= f then f = tonumber(g[2]) + 1 end
if not redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', f), 'NX', 'PX', ARGV[2]) then return false end
return f`
		releaseHead = `local v = redis.call('GET', KEYS[1])
local sp = v and string.find(v, ' ', 1, true)
if not sp or string.sub(v, 1, sp - 1) ~= ARGV[1] then return 0 end
if redis.pcall('ZCARD', KEYS[6]) ~= 0 then return 0 end
`
		keepIfStill = `local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local f = tonumber(string.sub(v, sp + 1))
if f >= us then
  redis.pcall('ZADD', KEYS[5], f, '#')
  redis.pcall('PEXPIRE', KEYS[5], 60000)
end
`
		del           = "redis.call('DEL', KEYS[1], KEYS[4])\nreturn 1"
		markerRelease = `local v = redis.call('GET', KEYS[1])
if not v or string.match(v, '^(%S+) %d+$') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], '~' .. string.sub(v, #ARGV[1] + 1), 'PX', 1)
return 1`
		timeRelease = `local v = redis.call('GET', KEYS[1])
if not v or string.match(v, '^(%S+) %d+$') ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
if tonumber(string.sub(v, #ARGV[1] + 2)) >= tonumber(t[1]) * 1000000 + tonumber(t[2]) then
  redis.call('SET', KEYS[1], '~' .. string.sub(v, #ARGV[1] + 1), 'PX', 1)
else
  redis.call('DEL', KEYS[1])
end
return 1`
		delRelease = `local v = redis.call('GET', KEYS[1])
if not v or string.match(v, '^(%S+) %d+$') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1`
		plainValue = `local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then return 0 end
if redis.pcall('ZCARD', KEYS[6]) ~= 0 then return 0 end
`
	)
	variant := func(name, acquire, rel string) contender {
		return contender{name: name, driver: "rueidis", floor: floorRueidis,
			open: openScripted(rd.NewLuaScript(acquire), rd.NewLuaScript(rel))}
	}
	return []contender{
		{name: floorRueidis, driver: "rueidis", open: openFloorRueidis},
		variant("minimal fenced lock (TIME + SET NX PX; GET, ZCARD, DEL)", minimalAcquire, releaseHead+del),
		variant("design D (ZMSCORE + TIME + SET NX PX; GET, ZCARD, TIME, DEL)", designAcquire, releaseHead+keepIfStill+del),
		variant("design D without the release's TIME (6 commands)", designAcquire, releaseHead+del),
		variant("design E (TIME + SET NX PX; GET, SET marker PX 1)", minimalAcquire, markerRelease),
		variant("design E', latchkit's (TIME + SET NX PX; GET, TIME, DEL)", minimalAcquire, timeRelease),
		variant("design E with DEL (TIME + SET NX PX; GET, DEL)", minimalAcquire, delRelease),
		{name: "design E' as Redis Functions (FCALL; FUNCTION LOAD once)", driver: "rueidis", floor: floorRueidis,
			open: openFunctions(functionLib)},
		{name: "plain SET NX PX; GET, ZCARD, DEL (fence on demand)", driver: "rueidis", floor: floorRueidis,
			open: openPlainQueued(rd.NewLuaScript(plainValue + del))},
		{name: "latchkit Mutex, rueidis", driver: "rueidis", floor: floorRueidis,
			open: openLatchkit(rueidisBackend, primitives.NewMutex)},
		{name: "latchkit Mutex.Lock, rueidis", driver: "rueidis", floor: floorRueidis,
			open: waitingTry(openLatchkit(rueidisBackend, primitives.NewMutex))},
	}
}

// openPlainQueued takes the lock with a plain SET NX PX command (no
// script) and releases it with release on the Mutex's key layout.
func openPlainQueued(release *rd.Lua) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
	ms := ttl.Milliseconds()
	return openMutexLayout(func(ctx context.Context, c rd.Client, keys []string, tok string) error {
		return c.Do(ctx, c.B().Set().Key(keys[0]).Value(tok).Nx().PxMilliseconds(ms).Build()).Error()
	}, func(ctx context.Context, c rd.Client, keys []string, tok string) (int64, error) {
		return release.Exec(ctx, c, keys, []string{tok}).AsInt64()
	})
}

// openScripted is a lock of one acquire and one release script on the
// Mutex's key layout: the acquire gets the token and the TTL and replies
// false when the lock is held; the release gets the token.
func openScripted(acquire, release *rd.Lua) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	return openMutexLayout(func(ctx context.Context, c rd.Client, keys []string, tok string) error {
		return acquire.Exec(ctx, c, keys, []string{tok, ms}).Error()
	}, func(ctx context.Context, c rd.Client, keys []string, tok string) (int64, error) {
		return release.Exec(ctx, c, keys, []string{tok}).AsInt64()
	})
}

// openMutexLayout is a lock on the Mutex's key layout (lock, two reserved,
// annotation, given back, queue, liveness) on one rueidis client: acquire
// sends the acquisition of a new token (a nil reply: held), release its
// release (1: released).
func openMutexLayout(acquire func(ctx context.Context, c rd.Client, keys []string, tok string) error,
	release func(ctx context.Context, c rd.Client, keys []string, tok string) (int64, error)) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
	return func(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
		c, err := newRueidis(rueidisOption(addrs[0]), sent)
		if err != nil {
			return nil, fmt.Errorf("rueidis client: %w", err)
		}
		return &lockClient{
			try: func(ctx context.Context, key string) (unlockFunc, error) {
				base := "latch:{" + key + "}"
				keys := []string{base, base + ":fence", base + ":released", base + ":who", base + ":gone", base + ":q", base + ":qlive"}
				tok := newToken()
				err := acquire(ctx, c, keys, tok)
				if rd.IsRedisNil(err) {
					return nil, errBusy
				}
				if err != nil {
					return nil, fmt.Errorf("acquire %s: %w", key, err)
				}
				return func(ctx context.Context) error {
					n, err := release(ctx, c, keys, tok)
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

// functionLib is design E' (minimalAcquire, timeRelease) as a Redis
// Functions library: lk_acquire(keys; token, ttl ms), lk_release(keys;
// token).
const functionLib = `#!lua name=latchkitbench
redis.register_function('lk_acquire', function(keys, args)
  local t = redis.call('TIME')
  local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if not redis.call('SET', keys[1], args[1] .. ' ' .. string.format('%.0f', f), 'NX', 'PX', args[2]) then return false end
  return f
end)
redis.register_function('lk_release', function(keys, args)
  local v = redis.call('GET', keys[1])
  if not v or string.match(v, '^(%S+) %d+$') ~= args[1] then return 0 end
  local t = redis.call('TIME')
  if tonumber(string.sub(v, #args[1] + 2)) >= tonumber(t[1]) * 1000000 + tonumber(t[2]) then
    redis.call('SET', keys[1], '~' .. string.sub(v, #args[1] + 1), 'PX', 1)
  else
    redis.call('DEL', keys[1])
  end
  return 1
end)`

// openFunctions is openScripted with the functions lk_acquire and
// lk_release of lib, a Functions library loaded (FUNCTION LOAD REPLACE)
// when a client opens, called by FCALL.
func openFunctions(lib string) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	open := openMutexLayout(func(ctx context.Context, c rd.Client, keys []string, tok string) error {
		return c.Do(ctx, c.B().Fcall().Function("lk_acquire").Numkeys(int64(len(keys))).Key(keys...).Arg(tok, ms).Build()).Error()
	}, func(ctx context.Context, c rd.Client, keys []string, tok string) (int64, error) {
		return c.Do(ctx, c.B().Fcall().Function("lk_release").Numkeys(int64(len(keys))).Key(keys...).Arg(tok).Build()).AsInt64()
	})
	return func(ctx context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
		lc, err := open(ctx, addrs, sent)
		if err != nil {
			return nil, err
		}
		c, err := rd.NewClient(rueidisOption(addrs[0])) // not counted: set-up
		if err != nil {
			lc.close()
			return nil, fmt.Errorf("rueidis client: %w", err)
		}
		defer c.Close()
		if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(lib).Build()).Error(); err != nil {
			lc.close()
			return nil, fmt.Errorf("FUNCTION LOAD: %w", err)
		}
		return lc, nil
	}
}

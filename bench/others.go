package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/primitives"
)

// S2p puts latchkit's other primitives beside a minimal script doing the
// same job, uncontended, on fresh names, all on rueidis (issue 29, item
// 5): a Semaphore's TryAcquire+Release, an RWLock's TryRLock+Release and a
// Latch's TrySetCount(1)+CountDown. The minimal scripts keep no fence, no
// memory of finished tokens and no waiter's place: what latchkit costs
// beyond them is what its promises cost.
func otherContenders() []contender {
	const (
		semMin = "minimal semaphore (expired holders trimmed, ZCARD < limit, ZADD; ZREM)"
		rwMin  = "minimal read lock (no writer, ZADD; ZREM)"
		latMin = "minimal latch (HSET count 1; HINCRBY -1 when above 0)"
	)
	// KEYS[1] the holders (zset token -> expiry ms); ARGV 1 token, 2
	// limit, 3 ttl ms.
	semAcquire := rd.NewLuaScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return false end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)
	// KEYS[1] the readers, KEYS[2] the writer; ARGV 1 token, 3 ttl ms.
	rwAcquire := rd.NewLuaScript(`if redis.call('EXISTS', KEYS[2]) == 1 then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)
	zrem := rd.NewLuaScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)
	latchSet := rd.NewLuaScript(`if redis.call('EXISTS', KEYS[1]) == 1 then return false end
redis.call('HSET', KEYS[1], 'count', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)
	latchDown := rd.NewLuaScript(`local c = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
if c > 0 then redis.call('HINCRBY', KEYS[1], 'count', -1) end
return c`)
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	minimal := func(name string, keys func(string) []string, acquire *rd.Lua, args func(tok string) []string, release *rd.Lua) contender {
		return contender{name: name, driver: "rueidis", open: func(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
			c, err := newRueidis(rueidisOption(addrs[0]), sent)
			if err != nil {
				return nil, fmt.Errorf("rueidis client: %w", err)
			}
			return &lockClient{
				try: func(ctx context.Context, key string) (unlockFunc, error) {
					ks, tok := keys(key), newToken()
					err := acquire.Exec(ctx, c, ks, args(tok)).Error()
					if rd.IsRedisNil(err) {
						return nil, errBusy
					}
					if err != nil {
						return nil, err
					}
					return func(ctx context.Context) error {
						return release.Exec(ctx, c, ks, []string{tok}).Error()
					}, nil
				},
				close: c.Close,
			}, nil
		}}
	}
	lk := func(name, floor string, take func(ctx context.Context, cl *primitives.Client, key string) (unlockFunc, error)) contender {
		return contender{name: name, driver: "rueidis", floor: floor, open: func(ctx context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
			b, closeFn, err := rueidisBackend(ctx, addrs[0], sent)
			if err != nil {
				return nil, err
			}
			cl, closeAll, err := latchkitClientOf(b, closeFn)
			if err != nil {
				return nil, err
			}
			return &lockClient{
				try:   func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, cl, key) },
				close: closeAll,
			}, nil
		}}
	}
	lease := func(l latchkit.Lease, err error) (unlockFunc, error) {
		if errors.Is(err, latchkit.ErrNotAcquired) {
			return nil, fmt.Errorf("%w: %w", errBusy, err)
		}
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
	return []contender{
		minimal(semMin, func(k string) []string { return []string{"sem:{" + k + "}"} }, semAcquire,
			func(tok string) []string { return []string{tok, "5", ms} }, zrem),
		lk("latchkit Semaphore(5) TryAcquire+Release", semMin, func(ctx context.Context, cl *primitives.Client, key string) (unlockFunc, error) {
			s, err := primitives.NewSemaphore(cl, key, 5)
			if err != nil {
				return nil, err
			}
			return lease(s.TryAcquire(ctx))
		}),
		minimal(rwMin, func(k string) []string { return []string{"rw:{" + k + "}:r", "rw:{" + k + "}:w"} }, rwAcquire,
			func(tok string) []string { return []string{tok, "", ms} }, zrem),
		lk("latchkit RWLock TryRLock+Release", rwMin, func(ctx context.Context, cl *primitives.Client, key string) (unlockFunc, error) {
			rw, err := primitives.NewRWLock(cl, key)
			if err != nil {
				return nil, err
			}
			return lease(rw.TryRLock(ctx))
		}),
		minimal(latMin, func(k string) []string { return []string{"latch:{" + k + "}"} }, latchSet,
			func(string) []string { return []string{"1", ms} }, latchDown),
		lk("latchkit Latch TrySetCount(1)+CountDown", latMin, func(ctx context.Context, cl *primitives.Client, key string) (unlockFunc, error) {
			l, err := primitives.NewLatch(cl, key)
			if err != nil {
				return nil, err
			}
			if ok, err := l.TrySetCount(ctx, 1); err != nil || !ok {
				return nil, fmt.Errorf("TrySetCount: %v, %w", ok, err)
			}
			return l.CountDown, nil
		}),
	}
}

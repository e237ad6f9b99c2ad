package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	lrueidis "github.com/latchkit/latchkit/backend/rueidis"
	"github.com/latchkit/latchkit/internal/floor"
	"github.com/latchkit/latchkit/primitives"
)

// ttl is the lease time every contender asks for where it takes one.
const ttl = 10 * time.Second

// errBusy is a try that found the lock held.
var errBusy = errors.New("lock is held")

// unlockFunc gives a granted lock back.
type unlockFunc func(ctx context.Context) error

// lockClient is one client of one library, with its own driver client and
// connections, as a separate process would have.
type lockClient struct {
	// try makes one attempt on key: errBusy (possibly wrapped) when held.
	try func(ctx context.Context, key string) (unlockFunc, error)
	// lock waits for key until granted, ctx ends, or the library gives up.
	lock  func(ctx context.Context, key string) (unlockFunc, error)
	close func()
}

// contender is a lock implementation under test.
type contender struct {
	name   string
	driver string // "go-redis", "rueidis", "valkey-go" or "redigo"
	// floor names the floor contender the ratio is taken against; empty
	// for the floors themselves.
	floor    string
	latchkit bool // the targets apply to it
	// open makes one client over addrs (one address, or several for
	// Redlock); sent counts the commands it sends.
	open func(ctx context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error)
}

const (
	fencedGoRedis = "fenced floor (EVALSHA TIME + SET NX PX; EVALSHA GET, ZCARD, DEL), go-redis"
	fencedRueidis = "fenced floor (EVALSHA TIME + SET NX PX; EVALSHA GET, ZCARD, DEL), rueidis"
	floorGoRedis  = "floor (SET NX PX + EVALSHA del), go-redis"
	floorRueidis  = "floor (SET NX PX + EVALSHA del), rueidis"
	floorRedlock  = "floor (5x parallel SET NX PX + del), go-redis"
)

// singleContenders run S1 and S2 (and, but for the floors, S3).
func singleContenders() []contender {
	return append([]contender{
		{name: floorGoRedis, driver: "go-redis", open: openFloorGoRedis},
		{name: fencedGoRedis, driver: "go-redis", floor: floorGoRedis, open: openFencedGoRedis},
		{name: "latchkit Mutex, go-redis", driver: "go-redis", floor: floorGoRedis, latchkit: true,
			open: openLatchkit(goredisBackend, primitives.NewMutex)},
		{name: "latchkit Mutex.Lock, go-redis", driver: "go-redis", floor: floorGoRedis, latchkit: true,
			open: waitingTry(openLatchkit(goredisBackend, primitives.NewMutex))},
		{name: "redsync", driver: "go-redis", floor: floorGoRedis, open: openRedsync},
		{name: "bsm/redislock", driver: "go-redis", floor: floorGoRedis, open: openRedislock},
		{name: floorRueidis, driver: "rueidis", open: openFloorRueidis},
		{name: fencedRueidis, driver: "rueidis", floor: floorRueidis, open: openFencedRueidis},
		{name: "latchkit Mutex, rueidis", driver: "rueidis", floor: floorRueidis, latchkit: true,
			open: openLatchkit(rueidisBackend, primitives.NewMutex)},
		{name: "latchkit Mutex.Lock, rueidis", driver: "rueidis", floor: floorRueidis, latchkit: true,
			open: waitingTry(openLatchkit(rueidisBackend, primitives.NewMutex))},
		{name: "rueidislock", driver: "rueidis", floor: floorRueidis, open: openRueidislock},
		{name: floorRedigo, driver: "redigo", open: openFloorRedigo},
		{name: "latchkit Mutex, redigo", driver: "redigo", floor: floorRedigo, latchkit: true,
			open: openLatchkit(redigoBackend, primitives.NewMutex)},
	}, valkeyContenders()...)
}

// contendedContenders run S3: every lock that can wait, FairMutex included.
func contendedContenders() []contender {
	var cs []contender
	for _, c := range singleContenders() {
		if c.floor == "" || strings.HasPrefix(c.name, "fenced floor") {
			continue // the floors cannot wait
		}
		if strings.Contains(c.name, "Mutex.Lock") {
			continue // S3 waits with Lock anyway
		}
		cs = append(cs, c)
		if c.name == "latchkit Mutex, go-redis" {
			cs = append(cs, contender{name: "latchkit FairMutex, go-redis", driver: "go-redis", latchkit: true,
				open: openLatchkit(goredisBackend, primitives.NewFairMutex)})
		}
		if c.name == "latchkit Mutex, rueidis" {
			cs = append(cs, contender{name: "latchkit FairMutex, rueidis", driver: "rueidis", latchkit: true,
				open: openLatchkit(rueidisBackend, primitives.NewFairMutex)})
		}
		if c.name == "latchkit Mutex, redigo" {
			cs = append(cs, contender{name: "latchkit FairMutex, redigo", driver: "redigo", latchkit: true,
				open: openLatchkit(redigoBackend, primitives.NewFairMutex)})
		}
	}
	return cs
}

// redlockContenders run S4 over five instances.
func redlockContenders() []contender {
	return []contender{
		{name: floorRedlock, driver: "go-redis", open: openFloorRedlock},
		{name: "latchkit NewRedlock, go-redis", driver: "go-redis", floor: floorRedlock, latchkit: true, open: openLatchkitRedlock},
		{name: "redsync, 5 pools", driver: "go-redis", floor: floorRedlock, open: openRedsync},
	}
}

// casDelGoRedis is the floor's release, run by EVALSHA.
var casDelGoRedis = redis.NewScript(floor.CasDelSource)

func openFloorGoRedis(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	c := newGoRedis(addrs[0], sent)
	return &lockClient{
		try: func(ctx context.Context, key string) (unlockFunc, error) {
			return floorTryGoRedis(ctx, c, key)
		},
		close: func() { c.Close() },
	}, nil
}

// floorTryGoRedis is the two round trips any safe lock costs, on go-redis.
func floorTryGoRedis(ctx context.Context, c *redis.Client, key string) (unlockFunc, error) {
	tok := newToken()
	ok, err := c.SetNX(ctx, key, tok, ttl).Result()
	if err != nil {
		return nil, fmt.Errorf("SET NX %s: %w", key, err)
	}
	if !ok {
		return nil, errBusy
	}
	return func(ctx context.Context) error {
		if err := casDelGoRedis.Run(ctx, c, []string{key}, tok).Err(); err != nil {
			return fmt.Errorf("compare-and-delete %s: %w", key, err)
		}
		return nil
	}, nil
}

var casDelRueidis = rd.NewLuaScript(floor.CasDelSource)

// The fenced floor: the least a fenced, queue-aware lock costs (see
// floor.FencedAcquireSource and FencedReleaseSource). Beside the floor it
// shows what the fence and the queue check cost; beside latchkit, what the
// rest does.
var (
	fencedGoRedisScript  = redis.NewScript(floor.FencedAcquireSource)
	fencedRueidisScript  = rd.NewLuaScript(floor.FencedAcquireSource)
	fencedGoRedisRelease = redis.NewScript(floor.FencedReleaseSource)
	fencedRueidisRelease = rd.NewLuaScript(floor.FencedReleaseSource)
)

func openFencedGoRedis(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	c := newGoRedis(addrs[0], sent)
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	return &lockClient{
		try: func(ctx context.Context, key string) (unlockFunc, error) {
			tok := newToken()
			err := fencedGoRedisScript.Run(ctx, c, []string{key}, tok, ms).Err()
			if errors.Is(err, redis.Nil) {
				return nil, errBusy
			}
			if err != nil {
				return nil, fmt.Errorf("fenced acquire %s: %w", key, err)
			}
			return func(ctx context.Context) error {
				if err := fencedGoRedisRelease.Run(ctx, c, []string{key, key + ":q"}, tok).Err(); err != nil {
					return fmt.Errorf("fenced release %s: %w", key, err)
				}
				return nil
			}, nil
		},
		close: func() { c.Close() },
	}, nil
}

func openFencedRueidis(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	c, err := newRueidis(rueidisOption(addrs[0]), sent)
	if err != nil {
		return nil, fmt.Errorf("rueidis client: %w", err)
	}
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	return &lockClient{
		try: func(ctx context.Context, key string) (unlockFunc, error) {
			tok := newToken()
			err := fencedRueidisScript.Exec(ctx, c, []string{key}, []string{tok, ms}).Error()
			if rd.IsRedisNil(err) {
				return nil, errBusy
			}
			if err != nil {
				return nil, fmt.Errorf("fenced acquire %s: %w", key, err)
			}
			return func(ctx context.Context) error {
				if err := fencedRueidisRelease.Exec(ctx, c, []string{key, key + ":q"}, []string{tok}).Error(); err != nil {
					return fmt.Errorf("fenced release %s: %w", key, err)
				}
				return nil
			}, nil
		},
		close: c.Close,
	}, nil
}

func openFloorRueidis(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	c, err := newRueidis(rueidisOption(addrs[0]), sent)
	if err != nil {
		return nil, fmt.Errorf("rueidis client: %w", err)
	}
	ms := ttl.Milliseconds()
	return &lockClient{
		try: func(ctx context.Context, key string) (unlockFunc, error) {
			tok := newToken()
			err := c.Do(ctx, c.B().Set().Key(key).Value(tok).Nx().PxMilliseconds(ms).Build()).Error()
			if rd.IsRedisNil(err) {
				return nil, errBusy
			}
			if err != nil {
				return nil, fmt.Errorf("SET NX %s: %w", key, err)
			}
			return func(ctx context.Context) error {
				if err := casDelRueidis.Exec(ctx, c, []string{key}, []string{tok}).Error(); err != nil {
					return fmt.Errorf("compare-and-delete %s: %w", key, err)
				}
				return nil
			}, nil
		},
		close: c.Close,
	}, nil
}

// openFloorRedlock is the least a Redlock can do: SET NX PX on every
// instance in parallel, a majority wins, compare-and-delete everywhere.
func openFloorRedlock(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = newGoRedis(a, sent)
	}
	each := func(f func(c *redis.Client) bool) int {
		var n atomic.Int64
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if f(c) {
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return int(n.Load())
	}
	return &lockClient{
		try: func(ctx context.Context, key string) (unlockFunc, error) {
			tok := newToken()
			release := func(ctx context.Context) error {
				each(func(c *redis.Client) bool { return casDelGoRedis.Run(ctx, c, []string{key}, tok).Err() == nil })
				return nil
			}
			got := each(func(c *redis.Client) bool { ok, err := c.SetNX(ctx, key, tok, ttl).Result(); return err == nil && ok })
			if got < len(cs)/2+1 {
				_ = release(ctx)
				return nil, errBusy
			}
			return release, nil
		},
		close: func() {
			for _, c := range cs {
				c.Close()
			}
		},
	}, nil
}

func goredisBackend(_ context.Context, addr string, sent *atomic.Int64) (backend.Backend, func(), error) {
	c := newGoRedis(addr, sent)
	return goredis.New(c), func() { c.Close() }, nil
}

func rueidisBackend(_ context.Context, addr string, sent *atomic.Int64) (backend.Backend, func(), error) {
	c, err := newRueidis(rueidisOption(addr), sent)
	if err != nil {
		return nil, nil, fmt.Errorf("rueidis client: %w", err)
	}
	return lrueidis.New(c), c.Close, nil
}

// closeTimeout bounds a latchkit Client's Close: it releases what is
// still held and ends the Client's goroutines, a round trip or so each.
const closeTimeout = 10 * time.Second

// latchkitClients makes a latchkit Client over each of bs, as a program
// makes one per Redis (a pub/sub subscription and a renewer of its own),
// and the function that closes them together, within closeTimeout, and
// then calls closers (the driver clients' closes). When a Client cannot be
// made, the closers are called at once.
func latchkitClients(bs []backend.Backend, closers ...func()) ([]*primitives.Client, func(), error) {
	closeDrivers := func() {
		for _, c := range closers {
			c()
		}
	}
	cls := make([]*primitives.Client, len(bs))
	for i, b := range bs {
		cl, err := primitives.NewClient(b)
		if err != nil {
			closeLatchkit(cls[:i])
			closeDrivers()
			return nil, nil, err
		}
		cls[i] = cl
	}
	return cls, func() {
		closeLatchkit(cls)
		closeDrivers()
	}, nil
}

// latchkitClientOf is latchkitClients of one backend.
func latchkitClientOf(b backend.Backend, closeFn func()) (*primitives.Client, func(), error) {
	cls, closeAll, err := latchkitClients([]backend.Backend{b}, closeFn)
	if err != nil {
		return nil, nil, err
	}
	return cls[0], closeAll, nil
}

// closeLatchkit closes cls in parallel within closeTimeout; what it could
// not do is reported on stderr (the figures stand: it comes after them).
func closeLatchkit(cls []*primitives.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, cl := range cls {
		wg.Go(func() {
			if err := cl.Close(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "bench: close a latchkit client:", err)
			}
		})
	}
	wg.Wait()
}

// openLatchkit makes a contender of a latchkit mutex constructor with its
// default options (auto-extend on, as users get it): each client is a
// driver client and a latchkit Client over it.
func openLatchkit(
	mkBackend func(context.Context, string, *atomic.Int64) (backend.Backend, func(), error),
	newMutex func(*primitives.Client, string, ...primitives.Option) (primitives.Mutex, error),
) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
	return func(ctx context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
		b, closeFn, err := mkBackend(ctx, addrs[0], sent)
		if err != nil {
			return nil, err
		}
		cl, closeAll, err := latchkitClientOf(b, closeFn)
		if err != nil {
			return nil, err
		}
		mk := func(key string) (primitives.Mutex, error) { return newMutex(cl, key) }
		return latchkitClient(mk, closeAll), nil
	}
}

// openLatchkitRedlock is a Redlock client: a driver client and a latchkit
// Client for each instance.
func openLatchkitRedlock(ctx context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	bs := make([]backend.Backend, len(addrs))
	closers := make([]func(), 0, len(addrs))
	for i, a := range addrs {
		b, closeFn, err := goredisBackend(ctx, a, sent)
		if err != nil {
			for _, c := range closers {
				c()
			}
			return nil, err
		}
		bs[i], closers = b, append(closers, closeFn)
	}
	cls, closeAll, err := latchkitClients(bs, closers...)
	if err != nil {
		return nil, err
	}
	mk := func(key string) (primitives.Mutex, error) { return primitives.NewRedlock(cls, key) }
	return latchkitClient(mk, closeAll), nil
}

// waitingTry makes a contender whose uncontended operation is a waiting
// Lock on a fresh name (as code that waits writes it: NewMutex, then Lock),
// not a TryLock.
func waitingTry(open func(context.Context, []string, *atomic.Int64) (*lockClient, error)) func(context.Context, []string, *atomic.Int64) (*lockClient, error) {
	return func(ctx context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
		lc, err := open(ctx, addrs, sent)
		if err != nil {
			return nil, err
		}
		lc.try = lc.lock
		return lc, nil
	}
}

func latchkitClient(mk func(key string) (primitives.Mutex, error), closeFn func()) *lockClient {
	take := func(ctx context.Context, key string, wait bool) (unlockFunc, error) {
		m, err := mk(key)
		if err != nil {
			return nil, err
		}
		var l latchkit.Lease
		if wait {
			l, err = m.Lock(ctx)
		} else {
			l, err = m.TryLock(ctx)
		}
		if errors.Is(err, latchkit.ErrNotAcquired) {
			return nil, fmt.Errorf("%w: %w", errBusy, err)
		}
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
	return &lockClient{
		try:   func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, false) },
		lock:  func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, true) },
		close: closeFn,
	}
}

// openRedsync uses redsync with its defaults (expiry 8 s, up to 32 tries
// 50-250 ms apart) over one pool per address.
func openRedsync(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	cs := make([]*redis.Client, len(addrs))
	pools := make([]rsredis.Pool, len(addrs))
	for i, a := range addrs {
		cs[i] = newGoRedis(a, sent)
		pools[i] = rsgoredis.NewPool(cs[i])
	}
	rs := redsync.New(pools...)
	take := func(ctx context.Context, key string, wait bool) (unlockFunc, error) {
		m := rs.NewMutex(key)
		var err error
		if wait {
			err = m.LockContext(ctx)
		} else {
			err = m.TryLockContext(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("redsync lock %s: %w", key, err)
		}
		return func(ctx context.Context) error {
			if _, err := m.UnlockContext(ctx); err != nil {
				return fmt.Errorf("redsync unlock %s: %w", key, err)
			}
			return nil
		}, nil
	}
	return &lockClient{
		try:  func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, false) },
		lock: func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, true) },
		close: func() {
			for _, c := range cs {
				c.Close()
			}
		},
	}, nil
}

// redislockRetry is the retry strategy bsm/redislock is given when it must
// wait (by default it does not): backoff from 1 ms doubling up to 5 ms.
func redislockRetry() redislock.RetryStrategy {
	return redislock.ExponentialBackoff(time.Millisecond, 5*time.Millisecond)
}

func openRedislock(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	c := newGoRedis(addrs[0], sent)
	rl := redislock.New(c)
	take := func(ctx context.Context, key string, opt *redislock.Options) (unlockFunc, error) {
		l, err := rl.Obtain(ctx, key, ttl, opt)
		if errors.Is(err, redislock.ErrNotObtained) {
			return nil, fmt.Errorf("%w: %w", errBusy, err)
		}
		if err != nil {
			return nil, fmt.Errorf("redislock obtain %s: %w", key, err)
		}
		return l.Release, nil
	}
	return &lockClient{
		try: func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, nil) },
		lock: func(ctx context.Context, key string) (unlockFunc, error) {
			return take(ctx, key, &redislock.Options{RetryStrategy: redislockRetry()})
		},
		close: func() { c.Close() },
	}, nil
}

// openRueidislock uses rueidislock with its defaults (a majority of 2 of 3
// keys, 5 s validity, client-side-caching invalidations to wake waiters).
func openRueidislock(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:  rueidisOption(addrs[0]),
		ClientBuilder: func(o rd.ClientOption) (rd.Client, error) { return newRueidis(o, sent) },
	})
	if err != nil {
		return nil, fmt.Errorf("rueidislock: %w", err)
	}
	take := func(ctx context.Context, key string, wait bool) (unlockFunc, error) {
		var (
			cancel context.CancelFunc
			err    error
		)
		if wait {
			_, cancel, err = lk.WithContext(ctx, key)
		} else {
			_, cancel, err = lk.TryWithContext(ctx, key)
		}
		if errors.Is(err, rueidislock.ErrNotLocked) {
			return nil, fmt.Errorf("%w: %w", errBusy, err)
		}
		if err != nil {
			return nil, fmt.Errorf("rueidislock %s: %w", key, err)
		}
		return func(context.Context) error { cancel(); return nil }, nil
	}
	return &lockClient{
		try:   func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, false) },
		lock:  func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, true) },
		close: lk.Close,
	}, nil
}

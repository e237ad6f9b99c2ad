package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	rd "github.com/redis/rueidis"
)

// The drivers' clients, built the same way for every contender, with a hook
// that counts the commands each client sends. SUBSCRIBE-family commands go
// over dedicated pub/sub connections that neither driver's hook sees; they
// are taken from INFO commandstats instead (scripts cannot run them, so
// every one of them was sent by a client).

// newGoRedis opens a go-redis client whose commands are counted in sent.
func newGoRedis(addr string, sent *atomic.Int64) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true, // otherwise go-redis ignores ctx deadlines
		PoolSize:              128,  // S2 runs 64 goroutines on one client
	})
	c.AddHook(countHook{sent})
	return c
}

// countHook counts commands going through a go-redis client.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// rueidisOption is the client option every rueidis-based contender uses.
func rueidisOption(addr string) rd.ClientOption {
	return rd.ClientOption{InitAddress: []string{addr}}
}

// newRueidis opens a rueidis client whose commands are counted in sent.
func newRueidis(opt rd.ClientOption, sent *atomic.Int64) (rd.Client, error) {
	c, err := rd.NewClient(opt)
	if err != nil {
		return nil, err
	}
	return countedRueidis{Client: c, n: sent}, nil
}

// countedRueidis counts the commands sent through a rueidis client.
type countedRueidis struct {
	rd.Client
	n *atomic.Int64
}

func (c countedRueidis) Do(ctx context.Context, cmd rd.Completed) rd.RedisResult {
	c.count(1, cmd.Commands())
	return c.Client.Do(ctx, cmd)
}

func (c countedRueidis) DoMulti(ctx context.Context, cmds ...rd.Completed) []rd.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countedRueidis) DoCache(ctx context.Context, cmd rd.Cacheable, ttl time.Duration) rd.RedisResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countedRueidis) DoMultiCache(ctx context.Context, multi ...rd.CacheableTTL) []rd.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMultiCache(ctx, multi...)
}

// count adds n unless the command is a subscription command (those are
// counted from INFO commandstats for every driver alike).
func (c countedRueidis) count(n int64, words []string) {
	if len(words) > 0 && strings.HasSuffix(strings.ToUpper(words[0]), "SUBSCRIBE") {
		return
	}
	c.n.Add(n)
}

// newToken is 128 random bits in hex, as a safe lock's owner token needs.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend"
	lvalkey "github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/internal/floor"
	"github.com/latchkit/latchkit/primitives"
)

// floorValkey is the floor the valkey-go contenders are measured against.
const floorValkey = "floor (SET NX PX + EVALSHA del), valkey-go"

// valkeyContenders are the floor on valkey-go and latchkit over it.
func valkeyContenders() []contender {
	return []contender{
		{name: floorValkey, driver: "valkey-go", open: openFloorValkey},
		{name: "latchkit Mutex, valkey-go", driver: "valkey-go", floor: floorValkey, latchkit: true,
			open: openLatchkit(valkeyBackend, primitives.NewMutex)},
	}
}

var casDelValkey = vk.NewLuaScript(floor.CasDelSource)

// openFloorValkey is the two round trips any safe lock costs, on
// valkey-go.
func openFloorValkey(_ context.Context, addrs []string, sent *atomic.Int64) (*lockClient, error) {
	c, err := newValkey(addrs[0], sent)
	if err != nil {
		return nil, err
	}
	ms := ttl.Milliseconds()
	return &lockClient{
		try: func(ctx context.Context, key string) (unlockFunc, error) {
			tok := newToken()
			err := c.Do(ctx, c.B().Set().Key(key).Value(tok).Nx().PxMilliseconds(ms).Build()).Error()
			if vk.IsValkeyNil(err) {
				return nil, errBusy
			}
			if err != nil {
				return nil, fmt.Errorf("SET NX %s: %w", key, err)
			}
			return func(ctx context.Context) error {
				if err := casDelValkey.Exec(ctx, c, []string{key}, []string{tok}).Error(); err != nil {
					return fmt.Errorf("compare-and-delete %s: %w", key, err)
				}
				return nil
			}, nil
		},
		close: c.Close,
	}, nil
}

func valkeyBackend(_ context.Context, addr string, sent *atomic.Int64) (backend.Backend, func(), error) {
	c, err := newValkey(addr, sent)
	if err != nil {
		return nil, nil, err
	}
	return lvalkey.New(c), c.Close, nil
}

// newValkey opens a valkey-go client with its defaults whose commands are
// counted in sent.
func newValkey(addr string, sent *atomic.Int64) (vk.Client, error) {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, fmt.Errorf("valkey-go client: %w", err)
	}
	return countedValkey{Client: c, n: sent}, nil
}

// countedValkey counts the commands sent through a valkey-go client, but
// for subscription commands (see countedRueidis.count).
type countedValkey struct {
	vk.Client
	n *atomic.Int64
}

func (c countedValkey) Do(ctx context.Context, cmd vk.Completed) vk.ValkeyResult {
	countedRueidis{n: c.n}.count(1, cmd.Commands())
	return c.Client.Do(ctx, cmd)
}

func (c countedValkey) DoMulti(ctx context.Context, cmds ...vk.Completed) []vk.ValkeyResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countedValkey) DoCache(ctx context.Context, cmd vk.Cacheable, ttl time.Duration) vk.ValkeyResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countedValkey) DoMultiCache(ctx context.Context, multi ...vk.CacheableTTL) []vk.ValkeyResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMultiCache(ctx, multi...)
}

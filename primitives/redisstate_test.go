package primitives

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/internal/keyspace"
)

// The helpers here are exported for the tests of both packages
// (primitives and primitives_test), which check that a refused call
// changed nothing in Redis.

// RedisState is every key matching pattern with its type, its value (in
// a form that compares: a hash's fields and a zset's members sorted) and
// whether it has an expiry: what an attempt that changes nothing leaves
// as it found it.
func RedisState(t *testing.T, ctx context.Context, c *redis.Client, pattern string) map[string]string {
	t.Helper()
	keys, err := c.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keyspace.WithoutClientRecords(keys) { // a Client's record is not a primitive's state
		typ := c.Type(ctx, k).Val()
		var v any
		switch typ {
		case "string":
			v = c.Get(ctx, k).Val()
		case "list":
			v = c.LRange(ctx, k, 0, -1).Val()
		case "hash":
			h := c.HGetAll(ctx, k).Val()
			fs := make([]string, 0, len(h))
			for f, x := range h {
				fs = append(fs, f+"="+x)
			}
			slices.Sort(fs)
			v = fs
		case "zset":
			v = c.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "set":
			v = c.SMembers(ctx, k).Val()
		}
		expiry := "no expiry"
		if c.PTTL(ctx, k).Val() > 0 {
			expiry = "expiry"
		}
		out[k] = fmt.Sprintf("%s %v %s", typ, v, expiry)
	}
	return out
}

// CheckUnchanged fails t when the keys matching pattern differ from before.
func CheckUnchanged(t *testing.T, ctx context.Context, c *redis.Client, pattern string, before map[string]string, what string) {
	t.Helper()
	after := RedisState(t, ctx, c, pattern)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed %s: %q, was %q", what, k, after[k], v)
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s wrote %s: %q", what, k, v)
		}
	}
}

// LockHolder is the token holding a Mutex-layout lock whose value is v
// ("token fence[ flags]"; "" for a free marker), and the fence.
func LockHolder(v string) (token string, fence int64) {
	l := keyspace.ParseLock(v)
	return l.Owner, l.Fence
}

// HolderTokens is the tokens among the members of a holders zset (a
// Semaphore's holders, an RWLock's readers): every member but the fence
// members ("#" and a token, scored by its fence; see fence_member in
// internal/kit/lua/prelude.lua).
func HolderTokens(members []string) []string {
	return slices.DeleteFunc(slices.Clone(members), func(m string) bool { return strings.HasPrefix(m, "#") })
}

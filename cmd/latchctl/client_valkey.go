package main

import (
	"context"
	"fmt"

	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend"
	lvalkey "github.com/latchkit/latchkit/backend/valkey"
)

// valkeyClient is target.client for -driver valkey: a valkey-go client,
// set up for miniredis when the server is the embedded one.
func (t *target) valkeyClient() (backend.Backend, func(context.Context, ...string) (any, error), func(), error) {
	c, err := vk.NewClient(vk.ClientOption{
		InitAddress:  []string{t.address()},
		DisableCache: t.mini != nil, // miniredis: no CLIENT TRACKING
		AlwaysRESP2:  t.mini != nil, // miniredis: RESP3 pub/sub quirk
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to %s: %w", t.address(), err)
	}
	do := func(ctx context.Context, args ...string) (any, error) {
		v, err := c.Do(ctx, c.B().Arbitrary(args...).Build()).ToAny()
		if vk.IsValkeyNil(err) {
			return nil, nil
		}
		return v, err
	}
	return lvalkey.New(c), do, c.Close, nil
}

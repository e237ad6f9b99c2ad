package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/kit"
	"github.com/latchkit/latchkit/kit/kittest"
)

// The rate limiter keeps the rules of a kit primitive (kittest.Run), on
// every driver.
func TestKitRules(t *testing.T) {
	kittest.Run(t, kittest.Subject{Layout: &layout, Limit: 3,
		Acquire: func(ctx context.Context, cl *kit.Client, name string, try bool, opts ...kit.Option) (latchkit.Lease, error) {
			l, err := New(cl, name, 3, time.Minute, opts...)
			if err != nil {
				return nil, err
			}
			return nil, l.take(ctx, try)
		}})
}

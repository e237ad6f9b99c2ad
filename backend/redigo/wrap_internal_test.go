package redigo

import (
	"context"
	"errors"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
)

// TestWrapClusterNodeIsPermanent: a Cluster node's redirect reaching this
// single-server adapter is a pool that can never work, a *ReplyError
// saying so, while a reply that a failing-over server gives (READONLY,
// LOADING) is Redis unavailable for now.
func TestWrapClusterNodeIsPermanent(t *testing.T) {
	ctx := context.Background()
	for _, msg := range []string{"MOVED 3999 127.0.0.1:7001", "ASK 3999 127.0.0.1:7001", "CROSSSLOT Keys in request don't hash to the same slot"} {
		err := wrap(ctx, redis.Error(msg))
		var re *backend.ReplyError
		if !errors.As(err, &re) || errors.Is(err, backend.ErrUnavailable) {
			t.Errorf("%q: %v, want a *ReplyError, not ErrUnavailable", msg, err)
		}
	}
	for _, msg := range []string{"READONLY You can't write against a read only replica.", "LOADING Redis is loading the dataset in memory"} {
		if err := wrap(ctx, redis.Error(msg)); !errors.Is(err, backend.ErrUnavailable) {
			t.Errorf("%q: %v, want ErrUnavailable", msg, err)
		}
	}
}

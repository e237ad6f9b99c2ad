package valkey_test

import (
	"context"
	"net"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/resptest"
)

// FuzzNormalize checks backend.NormalizeRESP on the replies a real valkey-go
// connection parses from arbitrary RESP2/RESP3 bytes (see
// resptest.FuzzNormalize).
func FuzzNormalize(f *testing.F) {
	resptest.FuzzNormalize(f, func(t *testing.T, addr string, resp2 bool, payload string) resptest.Fetched {
		c, err := vk.NewClient(vk.ClientOption{
			InitAddress: []string{addr}, DisableCache: true, AlwaysRESP2: resp2,
			ForceSingleClient: true, DisableRetry: true, Dialer: net.Dialer{Timeout: 5 * time.Second},
		})
		if err != nil {
			t.Fatalf("handshake with the fake server: %v", err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res := c.Do(ctx, c.B().Arbitrary("FUZZ").Args(payload).Build())
		if res.NonValkeyError() != nil {
			return resptest.Fetched{NoReply: true}
		}
		msg, merr := res.ToMessage()
		v, err := backend.NormalizeRESP(&msg)
		return resptest.Fetched{Value: v, Err: err, Nil: vk.IsValkeyNil(merr), ErrReply: merr != nil && !vk.IsValkeyNil(merr)}
	})
}

package valkey_test

import (
	"net"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/internal/testrig/resptest"
)

// FuzzNormalize checks the normalization of the replies a real valkey-go
// connection parses from arbitrary RESP2/RESP3 bytes (see
// resptest.FuzzNormalize).
func FuzzNormalize(f *testing.F) {
	resptest.FuzzNormalize(f, resptest.FetchWith(func(addr string, resp2 bool) (vk.Client, error) {
		return vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysRESP2: resp2,
			ForceSingleClient: true, DisableRetry: true, Dialer: net.Dialer{Timeout: 5 * time.Second}})
	}, vk.IsValkeyErr))
}

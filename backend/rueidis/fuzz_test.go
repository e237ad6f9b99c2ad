package rueidis_test

import (
	"net"
	"testing"
	"time"

	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/internal/testrig/resptest"
)

// FuzzNormalize checks the normalization of the replies a real rueidis
// connection parses from arbitrary RESP2/RESP3 bytes (see
// resptest.FuzzNormalize).
func FuzzNormalize(f *testing.F) {
	resptest.FuzzNormalize(f, resptest.FetchWith(func(addr string, resp2 bool) (rd.Client, error) {
		return rd.NewClient(rd.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysRESP2: resp2,
			ForceSingleClient: true, DisableRetry: true, Dialer: net.Dialer{Timeout: 5 * time.Second}})
	}, rd.IsRedisErr))
}

package valkey_test

import (
	"net"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	lvalkey "github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/internal/testrig/resptest"
)

// TestDeadlines: every call returns by its context's end, whatever the
// server or the dial does (see resptest.RunDeadlines).
func TestDeadlines(t *testing.T) {
	resptest.RunDeadlines(t, resptest.Driver{New: newBackend, Race: raceEnabled})
}

// newBackend is a resptest.Driver's New.
func newBackend(t testing.TB, addr string, dial resptest.Dialer, dialTimeout time.Duration) resptest.Backend {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DialCtxFn: dial, Dialer: net.Dialer{Timeout: dialTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return lvalkey.New(c).(resptest.Backend)
}

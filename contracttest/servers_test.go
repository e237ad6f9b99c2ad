package contracttest_test

import (
	"testing"

	"github.com/latchkit/latchkit/contracttest"
)

// A server's address stays readable after its test ended: a call that was
// abandoned when its context ended may dial it later from the background
// (CI saw a redigo Subscribe dial panic in miniredis's Addr once the
// server was closed), and must get a refused connection, not a panic.
func TestMiniredisAddrsAfterClose(t *testing.T) {
	var s contracttest.Server
	t.Run("server", func(t *testing.T) {
		s = contracttest.StartMiniredis(t)
	})
	if a := s.Addrs(); len(a) != 1 || a[0] == "" {
		t.Fatalf("Addrs after the server's test ended: %v", a)
	}
}

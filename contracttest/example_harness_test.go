package contracttest_test

import (
	"testing"

	"github.com/latchkit/latchkit/contracttest"
	"github.com/latchkit/latchkit/internal/testrig/lane"
)

// TestDocumentedHarness runs the suite through the harness that the
// package Example shows, so that the harness it teaches is one that
// passes: the driver contract in the fast lane, the whole suite (about a
// minute on miniredis) in the long lane.
func TestDocumentedHarness(t *testing.T) {
	t.Parallel()
	h := harness{contracttest.StartMiniredis(t)}
	if lane.Long() {
		contracttest.Run(t, h)
		return
	}
	contracttest.RunGroups(t, h, "Backend")
}

package primitives

import (
	"os/exec"
	"strings"
	"testing"
)

// The primitives link no OpenTelemetry package: tracing is middleware that
// only programs that trace import.
func TestNoOpenTelemetryInTheCore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/latchkit/latchkit/primitives").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.opentelemetry.io/") {
			t.Errorf("primitives depends on %s", p)
		}
	}
}

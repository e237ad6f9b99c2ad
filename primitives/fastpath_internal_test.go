package primitives

import (
	"strings"
	"testing"
)

// The Mutex's acquire and release start with their fast paths, in front of
// every prelude function: an uncontended lock+unlock makes no closure
// (see scripts.go). Moving the "--@slow" line, or the loader's placing of
// it, back behind the prelude fails here.
func TestFastPathsBeforePrelude(t *testing.T) {
	for name, s := range map[string]string{"mutex_acquire": mutexAcquire.Source(), "mutex_release": mutexRelease.Source()} {
		fn := strings.Index(s, "local function ")
		fast := strings.Index(s, "redis.call(")
		if fn < 0 || fast < 0 || fast > fn {
			t.Errorf("%s: first redis.call at %d, first local function at %d: want the fast path first", name, fast, fn)
		}
		if strings.Contains(s, "--@slow") {
			t.Errorf("%s: the --@slow marker was left in the script", name)
		}
	}
}

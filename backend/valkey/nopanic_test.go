package valkey_test

import (
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend/valkey"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
)

// Issue 38, finding 5: New of a nil client never panics: it gives a nil
// Backend (documented), which primitives.NewClient refuses. The Backend's
// methods are backend's (backend/nopanic_test.go).
func TestNoPanicOnBadInput(t *testing.T) {
	apicover.Check(t, ".", map[string]func(t *testing.T){
		"New": func(t *testing.T) {
			apicover.Calm(t, "New(nil)", func() error {
				var c vk.Client
				if b := valkey.New(c); b != nil {
					t.Errorf("New(nil) = %v, want nil", b)
				}
				return nil
			})
		},
	})
}

package redigo_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	redigolib "github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
)

// Issue 38, finding 5: redigo's exported functions with bad input (nil
// clients, nil options, zero and negative durations) never panic; a nil
// client gives a nil Backend (documented), which primitives.NewClient
// refuses. The Backend's methods are backend's (backend/nopanic_test.go).
func TestNoPanicOnBadInput(t *testing.T) {
	m := miniredis.RunT(t)
	c := &redigolib.Pool{Dial: func() (redigolib.Conn, error) { return redigolib.Dial("tcp", m.Addr()) }}
	t.Cleanup(func() { c.Close() })
	apicover.Check(t, ".", map[string]func(t *testing.T){
		"New": func(t *testing.T) {
			apicover.Calm(t, "New(nil)", func() error {
				if b := redigo.New(nil); b != nil {
					t.Errorf("New(nil) = %v, want nil", b)
				}
				var typed *redigolib.Pool
				if b := redigo.New(typed); b != nil {
					t.Errorf("New(typed nil) = %v, want nil", b)
				}
				return nil
			})
			apicover.Calm(t, "New(c, nil option)", func() error { _ = redigo.New(c, nil, redigo.WithHealthCheck(0)); return nil })
		},
		"WithHealthCheck": func(t *testing.T) {
			for _, d := range []int64{0, -1, -1 << 63} {
				apicover.Calm(t, "WithHealthCheck", func() error { _ = redigo.New(c, redigo.WithHealthCheck(time.Duration(d))); return nil })
			}
		},
	})
}

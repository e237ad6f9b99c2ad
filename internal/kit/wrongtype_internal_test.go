package kit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// hungEval is a backend whose every Eval waits for its context to end, as
// on a server that stopped answering.
type hungEval struct{ backend.Backend }

func (hungEval) Eval(ctx context.Context, _ *backend.Script, _, _ []string) (backend.Value, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestBoundDiagnoseTimeout (issue 38, finding 11; the bound
// diagnoseTimeout of docs/bounds.md, 1 s): the read of the key types that
// names a WRONGTYPE key waits at most the bound, whatever the caller's
// context: against a server that stopped answering, the error is the
// script's own reason, without a key's name, and still matches
// latchkit.ErrInvalid and backend.ErrWrongType.
func TestBoundDiagnoseTimeout(t *testing.T) {
	reply := &backend.ReplyError{Msg: "WRONGTYPE Operation against a key holding the wrong kind of value"}
	done := make(chan error, 1)
	go func() { done <- KeyErr(context.Background(), hungEval{}, []string{"latch:{n}"}, reply) }()
	select {
	case err := <-done:
		if !errors.Is(err, latchkit.ErrInvalid) || !errors.Is(err, backend.ErrWrongType) || strings.Contains(err.Error(), "latch:{n}") {
			t.Errorf("KeyErr on a hung server: %v; want the script's reason, matching ErrInvalid and ErrWrongType", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("KeyErr's diagnosis on a hung server did not end")
	}
}

package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/primitives"
)

// refusingACLs are users whose every campaign the server refuses (NOPERM)
// however often it is tried.
var refusingACLs = []struct {
	name string
	acl  []any
}{
	{"no scripts", []any{"ACL", "SETUSER", "svc", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval"}},
	{"no keys", []any{"ACL", "SETUSER", "svc", "on", ">pw", "~other:*", "&*", "+@all"}},
}

// noperm fails t unless err is the server's NOPERM refusal: a
// *backend.ReplyError saying NOPERM, not the context's error.
func noperm(t *testing.T, what string, err error) {
	t.Helper()
	var re *backend.ReplyError
	switch {
	case err == nil:
		t.Errorf("%s: no error, want the server's NOPERM", what)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		t.Errorf("%s: %v, want the server's NOPERM, not the context's end", what, err)
	case !errors.As(err, &re) || !strings.Contains(err.Error(), "NOPERM"):
		t.Errorf("%s: %v, want a *backend.ReplyError saying NOPERM", what, err)
	}
}

// TestElectionRunEndsOnPermanentRefusal: when the server refuses every
// campaign for a reason retrying cannot change (NOPERM: an ACL without the
// script commands, or without the keys), Run returns at once with an error
// that wraps the refusal and says NOPERM, instead of campaigning until its
// context ends; and Observe closes its channel (Leader then says why)
// instead of staying silent until its context ends.
func TestElectionRunEndsOnPermanentRefusal(t *testing.T) {
	for _, tc := range refusingACLs {
		for _, d := range aclDrivers {
			t.Run(tc.name+"/"+d.name, func(t *testing.T) { testRunRefused(t, tc.acl, d.make) })
		}
	}
}

func testRunRefused(t *testing.T, acl []any, newBackend func(*testing.T, string) backend.Backend) {
	admin := aclServer(t, acl)
	e, err := primitives.NewElection(newBackend(t, admin.Options().Addr), "refused")
	if err != nil {
		t.Fatal(err)
	}
	const patience = 4 * time.Second // Run and Observe must each be done well before
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	start := time.Now()
	err = e.Run(ctx, "a", func(context.Context) error {
		t.Error("fn called: the campaign cannot have led")
		return nil
	})
	if d := time.Since(start); d > patience/2 {
		t.Errorf("Run returned after %v, want at once", d.Round(time.Millisecond))
	}
	noperm(t, "Run", err)

	ctx, cancel = context.WithTimeout(context.Background(), patience)
	defer cancel()
	start = time.Now()
	for info := range e.Observe(ctx) {
		t.Errorf("Observe delivered %+v, want nothing", info)
	}
	if d := time.Since(start); d > patience/2 {
		t.Errorf("Observe's channel closed after %v, want at once", d.Round(time.Millisecond))
	}
	_, err = e.Leader(ctx)
	noperm(t, "Leader after Observe closed", err)
}

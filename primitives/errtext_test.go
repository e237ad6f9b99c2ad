package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// TestErrorTextsSayTheUsersTerms (issue 38, finding 11): an error says what
// was wrong in the caller's terms, never an identifier of the code: a
// leader value over the limit said "above maxLeaderValue (4096)", an empty
// list of clients "nil client", an empty list of names "empty name".
func TestErrorTextsSayTheUsersTerms(t *testing.T) {
	s := startBoundServer(t)
	cl := clienttest.For(t, s.b)
	e, err := primitives.NewElection(cl, "n", boundOpts("v:")...)
	if err != nil {
		t.Fatal(err)
	}
	_, campaignErr := e.TryCampaign(context.Background(), strings.Repeat("x", 4097))
	for _, c := range []struct {
		what      string
		err       error
		want, not string
	}{
		{"a leader value of 4097 bytes", campaignErr, "value of 4097 bytes is over the 4096-byte limit", "maxLeaderValue"},
		{"NewRedlock(nil)", second(primitives.NewRedlock(nil, "r")), "the list of clients is empty", "nil client"},
		{"NewRedlock(empty)", second(primitives.NewRedlock([]*primitives.Client{}, "r")), "the list of clients is empty", "nil client"},
		{"NewRedlock with a nil client", second(primitives.NewRedlock([]*primitives.Client{cl, nil}, "r")), "client 1: ", "empty"},
		{"NewMultiLock(nil)", second(primitives.NewMultiLock(cl, nil)), "the list of names is empty", "empty name"},
		{"NewMultiLock(empty)", second(primitives.NewMultiLock(cl, []string{})), "the list of names is empty", "empty name"},
		{"NewMultiLock with an empty name", second(primitives.NewMultiLock(cl, []string{"a", ""})), "an empty name", "list"},
	} {
		if !errors.Is(c.err, latchkit.ErrInvalid) || !strings.Contains(c.err.Error(), c.want) || strings.Contains(c.err.Error(), c.not) {
			t.Errorf("%s: %v; want ErrInvalid saying %q, not %q", c.what, c.err, c.want, c.not)
		}
	}
	if keys := keyspace.WithoutClientRecords(s.m.Keys()); len(keys) != 0 {
		t.Errorf("refused calls wrote %v", keys)
	}
}

// second is the error of a constructor's two results.
func second[T any](_ T, err error) error { return err }

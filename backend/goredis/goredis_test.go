package goredis_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
)

// adapter is what goredis.New returns, with every optional interface it
// implements: the tests call their methods.
type adapter interface {
	backend.Backend
	backend.Batcher
	backend.ReplicaAcker
	backend.Unwrapper
	backend.Validator
	backend.Cluster
}

// Normalize maps every reply go-redis can hand back, RESP3 types included,
// onto the closed set of backend.Value.
func TestNormalize(t *testing.T) {
	cases := []struct {
		in   any
		want backend.Value
	}{
		{nil, nil},
		{int64(7), int64(7)},
		{"s", "s"},
		{[]byte("b"), "b"},
		{true, int64(1)},
		{false, nil},
		{1.5, "1.5"},
		{[]any{int64(1), "a", []any{nil, true}}, []backend.Value{int64(1), "a", []backend.Value{nil, int64(1)}}},
		{map[any]any{"k": int64(2)}, []backend.Value{"k", int64(2)}},
	}
	for _, c := range cases {
		got, err := goredis.Normalize(c.in)
		if err != nil || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", c.want) {
			t.Errorf("Normalize(%#v) = %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	// An error inside an array reply becomes a *ReplyError.
	_, err := goredis.Normalize([]any{redis.Nil})
	var re *backend.ReplyError
	if !errors.As(err, &re) {
		t.Errorf("error element: %v", err)
	}
	// A type outside the set is an error, not a panic.
	if _, err := goredis.Normalize(struct{}{}); err == nil {
		t.Error("unknown type accepted")
	}
}

// As hands back the native client, and only as the types it is.
func TestAs(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	b := goredis.New(c).(adapter)
	var u redis.UniversalClient
	var cl *redis.Client
	var cc *redis.ClusterClient
	if !b.As(&u) || u != c || !b.As(&cl) || cl != c || b.As(&cc) || b.As(new(int)) {
		t.Error("As")
	}
	if b.Cluster() {
		t.Error("a single client reports Cluster")
	}
}

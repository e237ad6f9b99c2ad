package respkit

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/latchkit/latchkit/backend"
)

// TestBoundPooledEvalBuffer (issue 38, finding 11; the bound maxPooledStrs
// of docs/bounds.md): a pooled Eval call keeps a key and argument buffer
// of at most 64 strings. A call with more gets every key and argument,
// and the call after it only its own; the buffer of 65 is dropped when
// the call goes back to its pool, one of 64 is kept, cleared.
func TestBoundPooledEvalBuffer(t *testing.T) {
	var got []string
	p := &evalPool{eval: func(_ context.Context, _ *backend.Script, keys, args []string) (backend.Value, error) {
		got = slices.Concat(keys, args)
		return int64(len(keys)), nil
	}}
	s := backend.NewScript("return 1")
	ctx, cancel := context.WithCancel(context.Background()) // a context that can end: the pooled path
	defer cancel()
	strs := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprint(prefix, i)
		}
		return out
	}
	for _, n := range []int{maxPooledStrs, maxPooledStrs + 1, 2 * maxPooledStrs, 3} {
		keys, args := strs("k", n/2), strs("a", n-n/2)
		v, err := p.run(ctx, s, keys, args)
		if err != nil || v != int64(len(keys)) || !slices.Equal(got, slices.Concat(keys, args)) {
			t.Errorf("%d strings: %v, %v; the call got %d strings, want %d", n, v, err, len(got), n)
		}
	}
	for _, c := range []struct {
		n    int
		kept bool
	}{{maxPooledStrs, true}, {maxPooledStrs + 1, false}} {
		call := &evalCall{pool: p, done: make(chan struct{}, 1), strs: strs("x", c.n)}
		call.put()
		if kept := call.strs != nil; kept != c.kept {
			t.Errorf("a buffer of %d strings: kept %v, want %v", c.n, kept, c.kept)
		}
		if i := slices.IndexFunc(call.strs, func(s string) bool { return s != "" }); i >= 0 {
			t.Errorf("a kept buffer of %d strings still holds %q", c.n, call.strs[i])
		}
	}
}

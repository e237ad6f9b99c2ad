package contracttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// RunBatch checks backend.Batcher, when the backend implements it: a batch
// answers each call as Eval would, one call's error reply leaves the others
// alone, NOSCRIPT falls back to EVAL (after SCRIPT FLUSH too), a done
// context fails every call, and one batch may span hash slots.
func RunBatch(t *testing.T, h Harness) {
	mustHarness(t, h)
	if _, ok := h.NewClient(t).Backend.(backend.Batcher); !ok {
		t.Skip("the backend does not implement backend.Batcher")
	}
	runSteps(t, h, []step{
		{"ValuesMatchEval", testBatchValues},
		{"ErrorsPerCall", testBatchErrors},
		{"NoScriptFallback", testBatchNoScript},
		{"ContextDone", testBatchContextDone},
		{"Slots", testBatchSlots},
	})
}

// batcher returns a new client's backend as a Batcher.
func batcher(t *testing.T, h Harness) (backend.Backend, backend.Batcher) {
	b := h.NewClient(t).Backend
	return b, b.(backend.Batcher)
}

// sameOutcome reports whether a batch call's outcome is the one Eval gave.
func sameOutcome(v backend.Value, err error, c backend.Call) bool {
	if (err == nil) != (c.Err == nil) {
		return false
	}
	if err != nil {
		var re1, re2 *backend.ReplyError
		return errors.As(err, &re1) == errors.As(c.Err, &re2) &&
			errors.Is(err, backend.ErrWrongType) == errors.Is(c.Err, backend.ErrWrongType) &&
			errors.Is(err, backend.ErrUnavailable) == errors.Is(c.Err, backend.ErrUnavailable)
	}
	return fmt.Sprintf("%#v", v) == fmt.Sprintf("%#v", c.Value)
}

func testBatchValues(t *testing.T, h Harness) {
	b, bb := batcher(t, h)
	ctx := ctxT(t, 10*time.Second)
	key := prefix(t) + "missing"
	srcs := []string{
		`return 42`, `return -7`, `return 3.9`, `return 'hi'`, `return ''`, `return nil`,
		`return false`, `return true`, `return redis.call('GET', KEYS[1])`, `return {ok='FINE'}`,
		`return {}`, `return {1, 'a', {2, {'b'}}}`, `return {1, nil, 3}`,
		`return ARGV[1] .. '|' .. #ARGV[2]`,
	}
	var calls []backend.Call
	for _, src := range srcs {
		calls = append(calls, backend.Call{Script: backend.NewScript(src), Keys: []string{key}, Args: []string{"x y", "\x00\xff"}})
	}
	// The same calls twice in one batch: the second run of each script
	// finds it loaded.
	calls = append(calls, calls...)
	bb.EvalBatch(ctx, calls)
	for _, c := range calls {
		v, err := b.Eval(ctx, c.Script, c.Keys, c.Args)
		if !sameOutcome(v, err, c) {
			t.Errorf("%s: batch gave %#v, %v; Eval gave %#v, %v", c.Script.Source(), c.Value, c.Err, v, err)
		}
	}
	bb.EvalBatch(ctx, nil) // an empty batch is no call at all
}

func testBatchErrors(t *testing.T, h Harness) {
	b, bb := batcher(t, h)
	ctx := ctxT(t, 10*time.Second)
	p := prefix(t)
	hash, str := p+"{h}", p+"{s}"
	do(t, b, "HSET", hash, "f", "v")
	do(t, b, "SET", str, "v")
	get := backend.NewScript(`return redis.call('GET', KEYS[1])`)
	calls := []backend.Call{
		{Script: get, Keys: []string{str}},
		{Script: get, Keys: []string{hash}}, // WRONGTYPE
		{Script: backend.NewScript(`return redis.error_reply('MYERR went wrong')`)},
		{Script: backend.NewScript(`error('boom')`)},
		{Script: get, Keys: []string{str}},
	}
	bb.EvalBatch(ctx, calls)
	if calls[0].Err != nil || calls[0].Value != "v" || calls[4].Err != nil || calls[4].Value != "v" {
		t.Errorf("the calls beside the failing ones: %#v, %v / %#v, %v", calls[0].Value, calls[0].Err, calls[4].Value, calls[4].Err)
	}
	if err := calls[1].Err; !errors.Is(err, backend.ErrWrongType) || errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("GET on a hash: %v, want ErrWrongType (and not ErrUnavailable)", err)
	}
	var re *backend.ReplyError
	if err := calls[2].Err; !errors.As(err, &re) || !strings.Contains(re.Msg, "MYERR went wrong") {
		t.Errorf("error_reply: %v, want a *ReplyError with the message", err)
	}
	if err := calls[3].Err; !errors.As(err, &re) {
		t.Errorf("lua error: %v, want a *ReplyError", err)
	}
	for i, c := range calls {
		v, err := b.Eval(ctx, c.Script, c.Keys, c.Args)
		if !sameOutcome(v, err, c) {
			t.Errorf("call %d: batch gave %#v, %v; Eval gave %#v, %v", i, c.Value, c.Err, v, err)
		}
	}
}

func testBatchNoScript(t *testing.T, h Harness) {
	b, bb := batcher(t, h)
	ctx := ctxT(t, 10*time.Second)
	p := prefix(t)
	// A script no server has seen, over keys of many slots: every EVALSHA
	// answers NOSCRIPT.
	s := backend.NewScript(fmt.Sprintf("return KEYS[1] .. '%s'", newID()))
	calls := make([]backend.Call, 64)
	run := func(what string) {
		for i := range calls {
			calls[i] = backend.Call{Script: s, Keys: []string{p + "{" + strconv.Itoa(i) + "}"}}
		}
		bb.EvalBatch(ctx, calls)
		for i, c := range calls {
			if want := c.Keys[0] + strings.Split(s.Source(), "'")[1]; c.Err != nil || c.Value != want {
				t.Fatalf("%s: call %d: %#v, %v; want %q", what, i, c.Value, c.Err, want)
			}
		}
	}
	run("never loaded")
	run("loaded")
	if !h.FlushScripts(t) {
		t.Log("cannot flush the script cache of this driver: checked a fresh script only")
		return
	}
	run("after SCRIPT FLUSH")
	// Eval falls back too (its driver may remember the script as loaded).
	if _, err := b.Eval(ctx, s, []string{p + "{x}"}, nil); err != nil {
		t.Errorf("Eval after the batch: %v", err)
	}
}

func testBatchContextDone(t *testing.T, h Harness) {
	_, bb := batcher(t, h)
	one := backend.NewScript(`return 1`)
	calls := []backend.Call{{Script: one}, {Script: one, Keys: []string{prefix(t) + "{k}"}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	bb.EvalBatch(ctx, calls)
	for i, c := range calls {
		if !errors.Is(c.Err, context.Canceled) || c.Value != nil {
			t.Errorf("canceled ctx: call %d: %#v, %v; want context.Canceled", i, c.Value, c.Err)
		}
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	bb.EvalBatch(ctx, calls)
	for i, c := range calls {
		if !errors.Is(c.Err, context.DeadlineExceeded) {
			t.Errorf("expired ctx: call %d: %v, want context.DeadlineExceeded", i, c.Err)
		}
	}
}

// testBatchSlots: one batch of calls over keys of many hash slots (on a
// Cluster, of every node) writes and reads each key on its own slot, in
// order within a slot.
func testBatchSlots(t *testing.T, h Harness) {
	b, bb := batcher(t, h)
	ctx := ctxT(t, 20*time.Second)
	p := prefix(t)
	set := backend.NewScript(`redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return redis.call('INCR', KEYS[2])`)
	get := backend.NewScript(`return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}`)
	// More than one renewer chunk (512 calls) of each script: 1,200 calls.
	// (1,500 of each took over 20 s on miniredis under -race beside other
	// packages' tests: its Lua is interpreted, and slow under the race
	// detector.)
	const n = 600
	calls := make([]backend.Call, 0, 2*n)
	for i := range n {
		k := p + "{" + strconv.Itoa(i) + "}"
		calls = append(calls, backend.Call{Script: set, Keys: []string{k, k + ":n"}, Args: []string{"v" + strconv.Itoa(i)}})
	}
	for i := range n {
		k := p + "{" + strconv.Itoa(i) + "}"
		calls = append(calls, backend.Call{Script: get, Keys: []string{k, k + ":n"}})
	}
	bb.EvalBatch(ctx, calls)
	for i := range n {
		s, g := calls[i], calls[n+i]
		if s.Err != nil || s.Value != int64(1) {
			t.Fatalf("set %d: %#v, %v", i, s.Value, s.Err)
		}
		want := []backend.Value{"v" + strconv.Itoa(i), "1"}
		if g.Err != nil || fmt.Sprintf("%#v", g.Value) != fmt.Sprintf("%#v", want) {
			t.Fatalf("get %d: %#v, %v; want %#v", i, g.Value, g.Err, want)
		}
	}
	// Every key is where Eval finds it.
	for _, i := range []int{0, n / 2, n - 1} {
		k := p + "{" + strconv.Itoa(i) + "}"
		if v := do(t, b, "GET", k); v != "v"+strconv.Itoa(i) {
			t.Errorf("GET %s by Eval: %#v", k, v)
		}
	}
}

package redigoreply_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/redigoreply"
	"github.com/latchkit/latchkit/internal/testrig/resptest"
)

// Normalize maps every reply redigo hands back onto the closed set of
// backend.Value, and refuses anything else with an error.
func TestNormalize(t *testing.T) {
	cases := []struct {
		in   any
		want backend.Value
	}{
		{nil, nil},
		{int64(7), int64(7)},
		{"OK", "OK"},
		{[]byte("b"), "b"},
		{[]byte{}, ""},
		{[]any{}, []backend.Value{}},
		{[]any{int64(1), []byte("a"), []any{nil, "s"}}, []backend.Value{int64(1), "a", []backend.Value{nil, "s"}}},
	}
	for _, c := range cases {
		got, err := redigoreply.Normalize(c.in)
		if err != nil || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", c.want) {
			t.Errorf("Normalize(%#v) = %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	var re *backend.ReplyError
	_, err := redigoreply.Normalize([]any{int64(1), redis.Error("WRONGTYPE no")})
	if !errors.As(err, &re) || !errors.Is(err, backend.ErrWrongType) {
		t.Errorf("error element: %v, want a *ReplyError matching ErrWrongType", err)
	}
	// A Cluster node's redirect says why it cannot work.
	_, err = redigoreply.Normalize(redis.Error("MOVED 3999 127.0.0.1:7001"))
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "single server") {
		t.Errorf("MOVED: %v, want a *ReplyError saying the adapter serves a single server", err)
	}
	for _, bad := range []any{int(1), 1.5, true, struct{}{}, []any{int32(1)}} {
		if v, err := redigoreply.Normalize(bad); err == nil || !errors.As(err, &re) {
			t.Errorf("Normalize(%#v) = %#v, %v; want a *ReplyError", bad, v, err)
		}
	}
}

// replyDecoder builds a redigo reply from fuzz bytes: a byte picks the
// kind, the following bytes its content. bad reports whether the reply
// holds anything Normalize must refuse.
type replyDecoder struct{ b []byte }

func (d *replyDecoder) byte() byte {
	if len(d.b) == 0 {
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *replyDecoder) str() string {
	n := min(int(d.byte()), len(d.b))
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *replyDecoder) value(depth int) (v any, bad bool) {
	switch d.byte() % 8 {
	case 0:
		return nil, false
	case 1:
		var buf [8]byte
		n := copy(buf[:], d.b)
		d.b = d.b[n:]
		return int64(binary.LittleEndian.Uint64(buf[:])), false
	case 2:
		return d.str(), false
	case 3:
		return []byte(d.str()), false
	case 4:
		if depth > 6 {
			return nil, false
		}
		a := make([]any, d.byte()%5)
		for i := range a {
			var b bool
			a[i], b = d.value(depth + 1)
			bad = bad || b
		}
		return a, bad
	case 5:
		return redis.Error(d.str()), true
	case 6:
		return int(d.byte()), true
	default:
		return errors.New(d.str()), true
	}
}

// matches reports whether out is what Normalize must make of in.
func matches(in any, out backend.Value) bool {
	switch x := in.(type) {
	case nil:
		return out == nil
	case int64:
		return out == x
	case string:
		return out == x
	case []byte:
		return out == string(x)
	case []any:
		o, ok := out.([]backend.Value)
		if !ok || len(o) != len(x) {
			return false
		}
		for i := range x {
			if !matches(x[i], o[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// FuzzNormalize: whatever redigo could hand back (and what it could not),
// Normalize never panics, returns only the closed set of backend.Value, the
// documented conversion of its input, or an error that is a
// *backend.ReplyError.
func FuzzNormalize(f *testing.F) {
	for _, seed := range [][]byte{nil, {1, 7}, {4, 3, 2, 1, 'a', 3, 1, 'b', 0}, {4, 2, 5, 2, 'N', 'O', 0}, {6, 9}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &replyDecoder{b: data}
		in, bad := d.value(0)
		out, err := redigoreply.Normalize(in)
		if bad {
			var re *backend.ReplyError
			if err == nil || !errors.As(err, &re) {
				t.Fatalf("Normalize(%#v) = %#v, %v; want a *ReplyError", in, out, err)
			}
			return
		}
		if err != nil || !resptest.Closed(out) || !matches(in, out) {
			t.Fatalf("Normalize(%#v) = %#v, %v", in, out, err)
		}
	})
}

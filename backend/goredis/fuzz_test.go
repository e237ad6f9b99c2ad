package goredis_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/resptest"
)

// replyDecoder builds a go-redis reply value from fuzz bytes: a byte picks
// the kind, the following bytes give its content. It reports whether the
// value holds anything Normalize must refuse (an error or a type outside
// what go-redis returns), anywhere inside it.
type replyDecoder struct{ b []byte }

func (d *replyDecoder) byte() byte {
	if len(d.b) == 0 {
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *replyDecoder) u64() uint64 {
	var buf [8]byte
	n := copy(buf[:], d.b)
	d.b = d.b[n:]
	return binary.LittleEndian.Uint64(buf[:])
}

func (d *replyDecoder) str() string {
	n := min(int(d.byte()), len(d.b))
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// protoError is go-redis's own error reply type (proto.RedisError, an
// internal package), made by converting a string to redis.Nil's type.
var protoError = reflect.TypeOf(redis.Nil)

func newProtoError(msg string) error {
	return reflect.ValueOf(msg).Convert(protoError).Interface().(error)
}

// unexpected is a type go-redis never returns.
type unexpected struct{ n int }

// value decodes one reply. Map keys are decoded with scalar set, since a
// map key must be comparable.
func (d *replyDecoder) value(depth int, scalar bool) (v any, bad bool) {
	kinds := byte(11)
	if scalar || depth > 6 {
		kinds = 6
	}
	switch k := d.byte() % kinds; k {
	case 0:
		return nil, false
	case 1:
		return int64(d.u64()), false
	case 2:
		return d.str(), false
	case 3:
		if scalar || depth > 6 {
			return newProtoError(d.str()), true
		}
		return []byte(d.str()), false
	case 4:
		return d.byte()&1 == 1, false
	case 5:
		return math.Float64frombits(d.u64()), false
	case 6:
		n := int(d.byte() % 6)
		if n == 5 {
			return []any(nil), false // a nil slice is an empty array
		}
		a := make([]any, n)
		for i := range a {
			var b bool
			a[i], b = d.value(depth+1, false)
			bad = bad || b
		}
		return a, bad
	case 7:
		n := int(d.byte() % 5)
		m := make(map[any]any, n)
		for range n {
			k, kb := d.value(depth+1, true)
			e, eb := d.value(depth+1, false)
			if _, dup := m[k]; dup {
				continue
			}
			m[k] = e
			bad = bad || kb || eb
		}
		return m, bad
	case 8:
		return newProtoError(d.str()), true
	case 9:
		return errors.New(d.str()), true
	default:
		switch d.byte() % 3 {
		case 0:
			return unexpected{int(d.byte())}, true
		case 1:
			return int32(d.byte()), true
		default:
			return &unexpected{}, true
		}
	}
}

// matches reports whether out is what Normalize must make of in: the
// closed set of backend.Value, with the documented conversions.
func matches(in any, out backend.Value) bool {
	switch x := in.(type) {
	case nil:
		return out == nil
	case int64:
		o, ok := out.(int64)
		return ok && o == x
	case string:
		o, ok := out.(string)
		return ok && o == x
	case []byte:
		o, ok := out.(string)
		return ok && o == string(x)
	case bool:
		if x {
			o, ok := out.(int64)
			return ok && o == 1
		}
		return out == nil
	case float64:
		o, ok := out.(string)
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(o, 64)
		return err == nil && (f == x || math.IsNaN(f) && math.IsNaN(x))
	case []any:
		o, ok := out.([]backend.Value)
		if !ok || o == nil || len(o) != len(x) {
			return false
		}
		for i := range x {
			if !matches(x[i], o[i]) {
				return false
			}
		}
		return true
	case map[any]any:
		o, ok := out.([]backend.Value)
		if !ok || o == nil || len(o) != 2*len(x) {
			return false
		}
		used := make([]bool, len(x))
		for k, e := range x {
			found := false
			for i := 0; i < len(o); i += 2 {
				if !used[i/2] && matches(k, o[i]) && matches(e, o[i+1]) {
					used[i/2], found = true, true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
	return false
}

// FuzzNormalize checks goredis.Normalize on arbitrary nested go-redis
// replies (nil, int64, string, []byte, bool, float64, []any, map[any]any,
// go-redis error replies, other errors and types go-redis never returns):
// it never panics; a reply holding no error and no foreign type becomes a
// value of the closed set (nil, int64, string, []backend.Value) equal to
// the reply under the documented conversions; any other reply becomes a
// nil value and an error wrapping a *backend.ReplyError.
func FuzzNormalize(f *testing.F) {
	le := func(v uint64) string {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		return string(b[:])
	}
	for _, s := range []string{
		"",
		"\x00",                      // nil
		"\x01" + le(math.MaxUint64), // int64 -1
		"\x02\x03abc",               // string
		"\x03\x02\x00\xff",          // []byte with NUL
		"\x04\x01", "\x04\x00",      // true, false
		"\x05" + le(math.Float64bits(1.5)),              // float64
		"\x05" + le(0x7ff8000000000001),                 // NaN
		"\x05" + le(0x7ff0000000000000),                 // +Inf
		"\x06\x03\x00\x01\x07\x06\x02\x04\x01\x02\x01x", // [nil, 7, [true, "x"]]
		"\x06\x05",                                 // nil []any
		"\x07\x02\x02\x01k\x01\x02\x04\x01\x00",    // {"k": 2, true: nil}
		"\x07\x01\x03\x01e\x00",                    // a proto error as a map key
		"\x08\x0bERR boom  \n",                     // proto error reply
		"\x06\x02\x02\x01a\x08\x03NIL",             // error inside an array
		"\x09\x04oops",                             // plain error
		"\x0a\x00\x05", "\x0a\x01\x05", "\x0a\x02", // unexpected types
		"\x07\x01\x00\x0a\x00", // unexpected map value
		"\x06\x01\x06\x01\x06\x01\x06\x01\x06\x01\x06\x01\x06\x01\x06\x01\x02\x01z", // deep
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &replyDecoder{b: data}
		in, bad := d.value(0, false)
		out, err := goredis.Normalize(in)
		if bad {
			var re *backend.ReplyError
			if err == nil || !errors.As(err, &re) || out != nil {
				t.Fatalf("Normalize(%#v) = %#v, %v; want nil and a *backend.ReplyError", in, out, err)
			}
			if err.Error() == "" {
				t.Fatalf("Normalize(%#v): empty error message", in)
			}
			return
		}
		if err != nil {
			t.Fatalf("Normalize(%#v): %v", in, err)
		}
		if !resptest.Closed(out) {
			t.Fatalf("Normalize(%#v) = %#v: outside the closed set", in, out)
		}
		if !matches(in, out) {
			t.Fatalf("Normalize(%#v) = %s: does not match the reply", in, fmt.Sprintf("%#v", out))
		}
	})
}

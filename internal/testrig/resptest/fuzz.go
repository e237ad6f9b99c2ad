package resptest

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/respkit"
)

// Fetched is a reply as the adapter under test normalized it.
type Fetched struct {
	// Value and Err are what the adapter's Normalize returned.
	Value backend.Value
	Err   error
	// NoReply: the client parsed no complete reply (a network or
	// protocol error); Value and Err are not set.
	NoReply bool
	// Nil: the driver read a nil reply. ErrReply: it read an error reply.
	Nil, ErrReply bool
}

// Fetch sends FUZZ payload to the fake server at addr with a new client
// of the driver under test (on RESP2 when resp2 is set, RESP3
// otherwise; cache disabled, no retry, one connection) and returns the
// reply as the adapter normalized it. It fails t when the client cannot
// be made.
type Fetch func(t *testing.T, addr string, resp2 bool, payload string) Fetched

// FetchClient is the method set of a client of the rueidis family that
// FetchWith uses.
type FetchClient[B, C, R any] interface {
	B() B
	Do(ctx context.Context, cmd C) R
	Close()
}

// FetchWith is the Fetch of a driver of the rueidis family: open makes its
// client of addr (see Fetch for the options), isErr is its test for an
// error reply (rueidis.IsRedisErr, valkey.IsValkeyErr). The reply is
// normalized by respkit.NormalizeRESP, which the adapters use.
func FetchWith[
	Cl FetchClient[B, C, R], B respkit.RESPBuilder[A, S, U], A respkit.RESPArbitrary[A, C], S, U, C any,
	R respkit.RESPResult[M], M any, P respkit.RESPMessage[M], E respkit.RESPError,
](open func(addr string, resp2 bool) (Cl, error), isErr func(error) (E, bool)) Fetch {
	return func(t *testing.T, addr string, resp2 bool, payload string) Fetched {
		c, err := open(addr, resp2)
		if err != nil {
			t.Fatalf("handshake with the fake server: %v", err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		msg, err := c.Do(ctx, c.B().Arbitrary("FUZZ").Args(payload).Build()).ToMessage()
		e, reply := err.(E)
		if err != nil && !reply {
			return Fetched{NoReply: true} // a network or protocol error
		}
		if _, ok := isErr(err); reply && !ok && !e.IsNil() {
			t.Fatalf("%v: an error reply that is neither nil nor an error", err)
		}
		v, nerr := respkit.NormalizeRESP[M, P](&msg)
		return Fetched{Value: v, Err: nerr, Nil: reply && e.IsNil(), ErrReply: reply && !e.IsNil()}
	}
}

// respValue returns the end of the one RESP2/RESP3 value that starts at
// b[i:], framed exactly as rueidis frames it (a line ends at its first
// '\n'; a null, boolean or end takes two bytes more; an attribute is
// followed by the value it annotates), and false for anything rueidis
// might frame otherwise: an incomplete value, a length that is not plain
// digits or that rueidis would allocate before reading (negative, or longer
// than what follows), a streamed ('?') length, an unknown type. Only such
// values are sent: bytes after the reply, or a length rueidis cannot
// allocate, crash rueidis's reading goroutine, which a server never causes.
func respValue(b []byte, i, depth int) (int, bool) {
	if depth > 64 || i >= len(b) {
		return 0, false
	}
	line := func(i int) (string, int, bool) {
		n := bytes.IndexByte(b[i:], '\n')
		if n < 1 || b[i+n-1] != '\r' {
			return "", 0, false
		}
		return string(b[i : i+n-1]), i + n + 1, true
	}
	length := func(i int, null bool) (int, int, bool) {
		l, next, ok := line(i)
		if !ok {
			return 0, 0, false
		}
		if null && l == "-1" {
			return -1, next, true
		}
		if l == "" || len(l) > 9 || strings.Trim(l, "0123456789") != "" {
			return 0, 0, false
		}
		n, _ := strconv.Atoi(l)
		return n, next, n <= len(b)-next
	}
	elems := func(i, n int) (int, bool) {
		for range n {
			var ok bool
			if i, ok = respValue(b, i, depth+1); !ok {
				return 0, false
			}
		}
		return i, true
	}
	switch b[i] {
	case '+', '-', ':', ',', '(':
		_, next, ok := line(i + 1)
		return next, ok
	case '_', '.':
		return i + 3, i+3 <= len(b) && string(b[i+1:i+3]) == "\r\n"
	case '#':
		return i + 4, i+4 <= len(b) && string(b[i+2:i+4]) == "\r\n"
	case '$', '!', '=':
		n, next, ok := length(i+1, true)
		if !ok || n < 0 {
			return next, ok
		}
		end := next + n + 2
		return end, end <= len(b) && string(b[end-2:end]) == "\r\n"
	case '*', '~', '>':
		n, next, ok := length(i+1, true)
		if !ok || n < 0 {
			return next, ok
		}
		return elems(next, n)
	case '%':
		n, next, ok := length(i+1, false)
		if !ok {
			return 0, false
		}
		return elems(next, 2*n)
	case '|':
		n, next, ok := length(i+1, false)
		if !ok {
			return 0, false
		}
		if next, ok = elems(next, 2*n); !ok {
			return 0, false
		}
		return respValue(b, next, depth+1) // the value annotated
	}
	return 0, false
}

// oneReply reports whether b is exactly one RESP value, and not a push
// (which is no reply: rueidis hands it aside and waits for the reply).
func oneReply(b []byte) bool {
	if len(b) == 0 || b[0] == '>' {
		return false
	}
	end, ok := respValue(b, 0, 0)
	return ok && end == len(b)
}

// respGen writes a well-formed RESP2/RESP3 reply described by fuzz
// bytes, so that the fuzzer reaches deep shapes that random bytes rarely
// frame: a byte picks the type, the following bytes give its content.
type respGen struct {
	in  []byte
	out bytes.Buffer
}

func (g *respGen) byte() byte {
	if len(g.in) == 0 {
		return 0
	}
	c := g.in[0]
	g.in = g.in[1:]
	return c
}

// str returns up to 255 bytes of input; line strings lose '\r' and '\n'.
func (g *respGen) str(line bool) string {
	n := min(int(g.byte()), len(g.in))
	s := string(g.in[:n])
	g.in = g.in[n:]
	if line {
		s = strings.NewReplacer("\r", "", "\n", "").Replace(s)
	}
	return s
}

func (g *respGen) header(typ byte, n int) {
	g.out.WriteByte(typ)
	g.out.WriteString(strconv.Itoa(n))
	g.out.WriteString("\r\n")
}

// value writes one reply and reports whether Normalize must refuse it: it
// holds an error reply, or a map with a key that is not a string (errors
// inside an attribute do not count: the attribute is not the reply).
func (g *respGen) value(depth int) (bad bool) {
	kinds := byte(15)
	if depth > 5 {
		kinds = 11
	}
	switch g.byte() % kinds {
	case 0:
		g.out.WriteString("+" + g.str(true) + "\r\n")
	case 1:
		g.out.WriteString("-" + g.str(true) + "\r\n")
		return true
	case 2:
		var n int64
		for range 8 {
			n = n<<8 | int64(g.byte())
		}
		g.out.WriteString(":" + strconv.FormatInt(n, 10) + "\r\n")
	case 3:
		s := g.str(false)
		g.header('$', len(s))
		g.out.WriteString(s + "\r\n")
	case 4:
		g.out.WriteString([]string{"$-1\r\n", "_\r\n", "*-1\r\n"}[g.byte()%3])
	case 5:
		g.out.WriteString([]string{"#t\r\n", "#f\r\n"}[g.byte()%2])
	case 6:
		var bits uint64
		for range 8 {
			bits = bits<<8 | uint64(g.byte())
		}
		f := strconv.FormatFloat(math.Float64frombits(bits), 'g', -1, 64)
		switch bits % 5 {
		case 0:
			f = "inf"
		case 1:
			f = "-inf"
		case 2:
			f = "nan"
		}
		g.out.WriteString("," + f + "\r\n")
	case 7:
		g.out.WriteString("(" + strings.Repeat("9", int(g.byte())+1) + "\r\n")
	case 8:
		s := g.str(false)
		g.header('!', len(s))
		g.out.WriteString(s + "\r\n")
		return true
	case 9:
		s := "txt:" + g.str(false)
		g.header('=', len(s))
		g.out.WriteString(s + "\r\n")
	case 10:
		g.out.WriteString("+OK\r\n")
	case 11, 12:
		n := int(g.byte() % 5)
		g.header([]byte{'*', '~'}[g.byte()%2], n)
		for range n {
			bad = g.value(depth+1) || bad
		}
	case 13:
		n := int(g.byte() % 4)
		g.header('%', n)
		for i := range n {
			if c := g.byte(); c%4 == 0 {
				// A key that is not a string: rueidis's AsMap refuses it.
				keys := []string{":1\r\n", "#t\r\n", "*0\r\n", "_\r\n", "$-1\r\n", ",1.5\r\n", "%0\r\n", "-ERR key\r\n", "=5\r\ntxt:k\r\n"}
				g.out.WriteString(keys[int(c/4)%len(keys)])
				bad = true
			} else {
				// Distinct keys: a repeated key would drop a value.
				k := strconv.Itoa(i) + g.str(true)
				g.out.WriteString("+" + k + "\r\n")
			}
			bad = g.value(depth+1) || bad
		}
	case 14:
		n := int(g.byte() % 3)
		g.header('|', n)
		for range 2 * n {
			g.value(depth + 1)
		}
		return g.value(depth + 1)
	}
	return bad
}

// Closed reports whether v is in the closed set of backend.Value (nil,
// int64, string, []backend.Value of those): what every adapter's
// normalization must return.
func Closed(v backend.Value) bool {
	switch x := v.(type) {
	case nil, int64, string:
		return true
	case []backend.Value:
		for _, e := range x {
			if !Closed(e) {
				return false
			}
		}
		return true
	}
	return false
}

// FuzzNormalize checks an adapter's Normalize on the replies a real
// connection of its driver parses from arbitrary RESP2/RESP3 bytes (a fake server sends
// them as the reply to one command; the first input byte picks a RESP3 or
// a RESP2 connection): it never panics, and a reply the client parsed
// (anything but a network or protocol error) becomes either a value of the
// closed set (nil, int64, string, []backend.Value recursively) or a nil
// value and an error wrapping a *backend.ReplyError. An error reply, or
// an array or map holding one, must become the error; a nil reply nil.
func FuzzNormalize(f *testing.F, fetch Fetch) {
	for _, s := range []string{
		"+OK\r\n",
		":-42\r\n",
		"$3\r\na\x00b\r\n",
		"$-1\r\n",
		"*-1\r\n",
		"_\r\n",
		"-ERR boom\r\n",
		"-NOSCRIPT No matching script\r\n",
		"!9\r\nSYNTAX xy\r\n",
		"*3\r\n:1\r\n$1\r\nx\r\n*2\r\n_\r\n#t\r\n",
		"*2\r\n:1\r\n-ERR inner\r\n",
		"*0\r\n",
		"%2\r\n+b\r\n:2\r\n+a\r\n*1\r\n,1.5\r\n",
		"%1\r\n+k\r\n-ERR in map\r\n",
		"%2\r\n:1\r\n+x\r\n:1\r\n+y\r\n", // duplicate keys
		"~2\r\n+x\r\n+y\r\n",
		"#t\r\n", "#f\r\n",
		",3.25\r\n", ",inf\r\n", ",-inf\r\n", ",nan\r\n", ",1e400\r\n",
		"(3492890328409238509324850943850943825024385\r\n",
		"=15\r\ntxt:Some string\r\n",
		"|1\r\n+key\r\n+val\r\n:7\r\n", // attribute, then the reply
		">2\r\n+message\r\n+x\r\n",     // a push, then nothing
		"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:9\r\n",
		"+unterminated",
		"?what\r\n",
	} {
		f.Add(byte(0), []byte(s))
		f.Add(byte(1), []byte(s))
	}
	for _, s := range []string{
		"\x00\x03abc", // +abc
		"\x01\x03ERR", // -ERR
		"\x0b\x04\x00\x02\x02hi\x04\x01\x05\x00\x0e\x01\x00\x01x\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x07", // [+hi, _, #t, |{...} :7]
		"\x0d\x02\x01\x01a\x03\x01\x00\x05\x01\x01b\x06\x00\x00\x00\x00\x00\x00\x00\x00",                      // {0a: $\x00, 1b: inf}
		"\x0d\x01\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01",                                                    // {:1 => :1}
		"\x0d\x01\x01\x00\x01\x02no",      // {0: -no}
		"\x0c\x02\x01\x08\x02E!\x09\x01v", // ~[!E!, =txt:v]
		"\x07\x30",                        // a big number
		"\x0b\x01\x00\x0b\x01\x00\x0b\x01\x00\x0b\x01\x00\x0b\x01\x00\x0b\x01\x00\x0b\x01\x00\x02", // deep
	} {
		f.Add(byte(2), []byte(s))
		f.Add(byte(3), []byte(s))
	}
	srv := startFakeServer(f)
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		generated, mustFail := false, false
		if mode&2 != 0 {
			g := &respGen{in: data}
			mustFail = g.value(0)
			data, generated = g.out.Bytes(), true
		}
		if !oneReply(data) {
			if generated {
				t.Fatalf("the generator wrote %q: not one RESP reply", data)
			}
			t.Skip("not exactly one RESP reply")
		}
		r := fetch(t, srv.addr(), mode&1 == 1, string(data))
		if r.NoReply {
			return // the bytes were no complete reply
		}
		v, err := r.Value, r.Err
		if err != nil {
			var re *backend.ReplyError
			if !errors.As(err, &re) || v != nil {
				t.Fatalf("Normalize(%q) = %#v, %v; want nil and a *backend.ReplyError", data, v, err)
			}
			if generated && !mustFail {
				t.Fatalf("Normalize(%q): %v, for a reply holding no error", data, err)
			}
			return
		}
		if generated && mustFail {
			t.Fatalf("Normalize(%q) = %#v, nil for a reply holding an error", data, v)
		}
		if !Closed(v) {
			t.Fatalf("Normalize(%q) = %#v: outside the closed set", data, v)
		}
		switch {
		case r.Nil:
			if v != nil {
				t.Fatalf("Normalize(%q) = %#v for a nil reply", data, v)
			}
		case r.ErrReply:
			t.Fatalf("Normalize(%q) = %#v for an error reply", data, v)
		}
	})
}

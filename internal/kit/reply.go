package kit

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
)

// wakeID is the digest of token that a hand-over's message names (as
// digest in lua/prelude.lua computes it): the waiter is found without its token going
// over pub/sub.
func wakeID(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:wakeIDBytes])
}

// wakeIDBytes is how many bytes of the digest a wakeID keeps.
const wakeIDBytes = 8

// MarkerTTL is how long a given-back token is remembered (see remember in
// lua/prelude.lua): longer than any late copy of the attempt it gives
// back (a give-back is pursued for at most maxGiveBackWindow, a minute).
// Every kind keeps one set of them per name (a Mutex's, Election's,
// MultiLock name's and Redlock instance's is the layout's :gone key): one
// entry per token given back in the last MarkerTTL, written only on the
// rare paths that give back (a timeout, a give-up, a reply lost).
const MarkerTTL = 60 * time.Second

// Ms formats d as whole milliseconds, at least 1.
func Ms(d time.Duration) string {
	n := max(d.Milliseconds(), 1)
	if n%1000 == 0 && n/1000 < int64(len(wholeSeconds)) {
		return wholeSeconds[n/1000] // the usual TTLs and timeouts, without an allocation
	}
	return strconv.FormatInt(n, 10)
}

// wholeSeconds[i] is i seconds in milliseconds, formatted. Never modified.
var wholeSeconds = func() (s [121]string) {
	for i := range s {
		s[i] = strconv.Itoa(i * 1000)
	}
	return s
}()

// Pair decodes a {flag, n} script reply, or {0, n, holder} where holder is
// the annotation the holder stored (nil or a string).
func Pair(v backend.Value) (bool, int64, string, error) {
	a, ok := v.([]backend.Value)
	if !ok || len(a) < 2 || len(a) > 4 { // a waiting Mutex attempt's fourth: see noteCounter
		return false, 0, "", BadReply(v)
	}
	flag, ok1 := a[0].(int64)
	n, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return false, 0, "", BadReply(v)
	}
	var holder string
	if len(a) >= 3 && a[2] != nil {
		if holder, ok = a[2].(string); !ok {
			return false, 0, "", BadReply(v)
		}
	}
	return flag == 1, n, holder, nil
}

// annotation is what an attempt stores beside its grant: the request's
// Annotation, or nothing when it is too long to store.
func annotation(a string) string {
	if len(a) > keyspace.MaxAnnotation {
		return ""
	}
	return a
}

// errBadReply marks a script reply of an unexpected shape: a backend that
// does not normalize replies as backend.Value documents.
var errBadReply = errors.New("unexpected script reply")

func BadReply(v backend.Value) error { return fmt.Errorf("%w: %#v", errBadReply, v) }

// ScriptErr makes a key of the wrong type, or an argument a script refused
// (invalidReply), the caller's fault: ErrInvalid. Where the script's keys
// are at hand, keyErr names the key of the wrong type.
func ScriptErr(err error) error {
	var done *refusedError
	if errors.As(err, &done) {
		return err // read already
	}
	var re *backend.ReplyError
	if errors.As(err, &re) && errors.Is(err, backend.ErrWrongType) {
		return &refusedError{why: "a key of the primitive holds a value latchkit did not write: " + wrongTypeReason(re.Msg), reply: err}
	}
	if errors.As(err, &re) {
		if _, why, ok := strings.Cut(re.Msg, invalidReply+" "); ok {
			if i := strings.Index(why, " script: "); i >= 0 {
				why = why[:i] // a server's note of the script's SHA and line
			}
			return &refusedError{why: why, reply: err}
		}
	}
	return err
}

// refusedError is an argument a script refused (see invalid in
// lua/prelude.lua): it reads as the script's reason, without the reply's
// marker, and matches latchkit.ErrInvalid and the reply error.
type refusedError struct {
	why   string
	reply error
}

func (e *refusedError) Error() string { return latchkit.ErrInvalid.Error() + ": " + e.why }

func (e *refusedError) Unwrap() []error { return []error{latchkit.ErrInvalid, e.reply} }

// OpErr wraps err with the operation and primitive, unless it already is.
func OpErr(op string, kind latchkit.Kind, name string, err error) error {
	var oe *latchkit.OpError
	if errors.As(err, &oe) {
		return err
	}
	return &latchkit.OpError{Op: op, Kind: kind, Name: name, Err: err}
}

// Flag decodes a 1/0 script reply.
func Flag(v backend.Value, err error) (bool, error) {
	if err != nil {
		return false, ScriptErr(err)
	}
	n, ok := v.(int64)
	if !ok {
		return false, BadReply(v)
	}
	return n == 1, nil
}

// Remaining decodes a TTL script reply: ms left, or -3 when not held.
func Remaining(v backend.Value, err error) (time.Duration, bool, error) {
	if err != nil {
		return 0, false, ScriptErr(err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, false, BadReply(v)
	}
	if n == -3 {
		return 0, false, nil
	}
	return max(time.Duration(n)*time.Millisecond, 0), true, nil
}

// Invalid is the ErrInvalid error of a bad argument.
func Invalid(op string, kind latchkit.Kind, name, format string, a ...any) error {
	return &latchkit.OpError{Op: op, Kind: kind, Name: name,
		Err: fmt.Errorf("%w: "+format, append([]any{latchkit.ErrInvalid}, a...)...)}
}

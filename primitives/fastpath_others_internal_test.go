package primitives

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/redistest"
)

// The uncontended calls of the Semaphore, the RWLock's readers and the
// Latch are answered by fast paths in front of the prelude, as the
// Mutex's are (issue 29, item 5): a Semaphore's TryAcquire+Release, a
// TryRLock+Release and a TrySetCount+CountDown make no closure.

// otherFastScripts are the scripts with such a fast path.
var otherFastScripts = []struct {
	name string
	s    *backend.Script
}{
	{"sem_acquire", semAcquire}, {"sem_release", semRelease},
	{"rw_read", rwRead}, {"rw_read_release", rwReadRelease},
	{"latch_set", latchSet}, {"latch_down", latchDown},
}

var localFunction = regexp.MustCompile(`(?m)^local function (\w+)`)

// splitFast cuts a composed script's source where its fast path ends: the
// last line of code before the comment lines that open the first prelude
// block (every block opens with comments, then its local function). It
// returns the fast path and the script without it, the fast path's lines
// left blank so that the line numbers of errors stay the same. A script
// without a fast path has an empty one.
func splitFast(src string) (fast, slow string) {
	lines := strings.Split(src, "\n")
	first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "local function ") })
	if first < 0 {
		return "", src
	}
	end := first
	for end > 0 {
		l := strings.TrimSpace(lines[end-1])
		if l != "" && !strings.HasPrefix(l, "--") {
			break
		}
		end--
	}
	return strings.Join(lines[:end], "\n"), strings.Repeat("\n", end) + strings.Join(lines[end:], "\n")
}

// TestOtherFastPathsBeforePrelude: each script starts with a fast path
// that makes no function and calls none of the prelude's.
func TestOtherFastPathsBeforePrelude(t *testing.T) {
	for _, sc := range otherFastScripts {
		src := sc.s.Source()
		fast, _ := splitFast(src)
		if !strings.Contains(fast, "redis.call(") {
			t.Errorf("%s: no fast path in front of the prelude", sc.name)
			continue
		}
		if strings.Contains(fast, "function") {
			t.Errorf("%s: the fast path makes a function (a closure on every call)", sc.name)
		}
		for _, m := range localFunction.FindAllStringSubmatch(src, -1) {
			if regexp.MustCompile(`\b` + m[1] + `\s*\(`).MatchString(fast) {
				t.Errorf("%s: the fast path calls %s, made after it", sc.name, m[1])
			}
		}
		if strings.Contains(src, "--@slow") {
			t.Errorf("%s: the --@slow marker was left in the script", sc.name)
		}
	}
}

// fpCase is one call of a script on a state: the fast path must leave
// the same keys, expiries, reply and messages as the script without it.
type fpCase struct {
	name string
	// fast says whether the fast path answers the call ("fast"), hands it
	// to the slow path ("slow"), or "" when not checked (an error).
	fast string
	// setup are the commands that make the state; nowMs is the server's
	// clock in ms.
	setup func(k []string, nowMs int64) [][]any
	args  []string
}

const (
	fpTTL = "30000"    // a lease's ttl, ms
	fpRet = "86400000" // the retention, ms
	fpTok = "tok"
)

func cmds(c ...[]any) [][]any { return c }

// fpScripts are the cases of each script.
func fpScripts() []struct {
	name  string
	s     *backend.Script
	keys  []string
	cases []fpCase
} {
	sk := keyspace.SemLayout.KeysOf("fp:", "s")
	rk := keyspace.RWLayout.KeysOf("fp:", "r")
	lk := keyspace.LatchLayout.KeysOf("fp:", "l")
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }
	us := func(nowMs int64) int64 { return nowMs * 1000 }
	none := func([]string, int64) [][]any { return nil }
	list := func(i int) func(k []string, _ int64) [][]any {
		return func(k []string, _ int64) [][]any { return cmds([]any{"RPUSH", k[i], "x"}) }
	}
	// a semaphore with two live holders, old and recent finished tokens
	semBusy := func(k []string, now int64) [][]any {
		return cmds(
			[]any{"ZADD", k[0], now + 5000, "a", now + 9000, "b"}, []any{"PEXPIRE", k[0], 9000},
			[]any{"HSET", k[2], "a", us(now) - 10, "b", us(now) - 5}, []any{"PEXPIRE", k[2], 40000},
			[]any{"SET", k[1], ms(us(now) - 5), "PX", fpRet},
			[]any{"ZADD", k[3], now - 70000, "old", now - 1000, "recent"}, []any{"PEXPIRE", k[3], 59000},
		)
	}
	semArgs := func(n, mark, note string) []string { return []string{fpTok, fpTTL, "5", n, mark, note, fpRet} }
	sem := semArgs("1", "0", "")
	var semCases []fpCase
	semCases = append(semCases,
		fpCase{"fresh", "fast", none, sem},
		fpCase{"two live holders, finished tokens", "fast", semBusy, sem},
		fpCase{"holders live longer than the ttl", "fast", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 90000, "a"}, []any{"PEXPIRE", k[0], 90000},
				[]any{"HSET", k[2], "a", 1}, []any{"PEXPIRE", k[2], 90000})
		}, sem},
		fpCase{"fences without expiry", "fast", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 5000, "a"}, []any{"PEXPIRE", k[0], 5000}, []any{"HSET", k[2], "a", 1})
		}, sem},
		fpCase{"fence counter ahead of the clock", "fast", func(k []string, now int64) [][]any {
			return cmds([]any{"SET", k[1], ms(us(now) + 10_000_000_000), "PX", fpRet})
		}, sem},
		fpCase{"fence counter 0", "fast", func(k []string, now int64) [][]any { return cmds([]any{"SET", k[1], "0"}) }, sem},
		fpCase{"fence counter negative", "fast", func(k []string, now int64) [][]any { return cmds([]any{"SET", k[1], "-7"}) }, sem},
		fpCase{"full", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 5000, "a", now + 6000, "b", now + 7000, "c", now + 8000, "d", now + 9000, "e"},
				[]any{"HSET", k[4], "a", "note-a"})
		}, sem},
		fpCase{"four held", "fast", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 5000, "a", now + 6000, "b", now + 7000, "c", now + 8000, "d"})
		}, sem},
		fpCase{"a dead holder", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now - 1, "dead", now + 9000, "b"}, []any{"HSET", k[2], "dead", 3, "b", 4})
		}, sem},
		fpCase{"a holder dead at this ms", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now, "dead"}, []any{"HSET", k[2], "dead", 3})
		}, sem},
		fpCase{"held by the token", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 1000, fpTok}, []any{"HSET", k[2], fpTok, 42})
		}, sem},
		fpCase{"held by the token, expired", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now - 1000, fpTok, now + 5000, "a"}, []any{"HSET", k[2], fpTok, 42})
		}, sem},
		fpCase{"the token finished", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[3], now - 10, fpTok})
		}, sem},
		fpCase{"with an annotation", "slow", none, semArgs("1", "0", "me")},
		fpCase{"annotations stored", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 5000, "a"}, []any{"HSET", k[4], "a", "note-a"})
		}, sem},
		fpCase{"weights stored", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 5000, "a"}, []any{"HSET", k[5], "a", 3})
		}, sem},
		fpCase{"a waiter's mark", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"HSET", k[5], "~", now + 5000})
		}, sem},
		fpCase{"a stored limit", "slow", func(k []string, now int64) [][]any { return cmds([]any{"SET", k[6], "1"}) }, sem},
		fpCase{"several permits", "slow", none, semArgs("2", "0", "")},
		fpCase{"several permits, waiting", "slow", semBusy, semArgs("4", "3000", "")},
		fpCase{"above the limit", "", none, semArgs("6", "0", "")},
	)
	for _, v := range []string{"abc", "007", "+5", "1.5", "1234567890123456789", ""} {
		semCases = append(semCases, fpCase{fmt.Sprintf("fence counter %q", v), "", func(k []string, now int64) [][]any {
			return cmds([]any{"SET", k[1], v})
		}, sem})
	}
	for i, k := range sk {
		semCases = append(semCases, fpCase{"a list at " + k, "", list(i), sem},
			fpCase{"busy, a list at " + k, "", func(ks []string, now int64) [][]any {
				return append(slices.DeleteFunc(semBusy(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
			}, sem})
	}

	rel := func(flag ...string) []string { return append([]string{fpTok, "chan"}, flag...) }
	semHeld := func(k []string, now int64) [][]any {
		return append(semBusy(k, now), []any{"ZADD", k[0], now + 20000, fpTok}, []any{"HSET", k[2], fpTok, us(now) - 1})
	}
	semOnly := func(k []string, now int64) [][]any {
		return cmds([]any{"ZADD", k[0], now + 30000, fpTok}, []any{"PEXPIRE", k[0], 30000},
			[]any{"HSET", k[2], fpTok, us(now) - 1}, []any{"PEXPIRE", k[2], 30000}, []any{"SET", k[1], ms(us(now) - 1), "PX", fpRet})
	}
	var semRelCases []fpCase
	for _, flag := range [][]string{nil, {"1"}} {
		semRelCases = append(semRelCases,
			fpCase{fmt.Sprint("only holder ", flag), "fast", semOnly, rel(flag...)},
			fpCase{fmt.Sprint("among holders ", flag), "fast", semHeld, rel(flag...)},
			fpCase{fmt.Sprint("held, finished tokens without expiry ", flag), "fast", func(k []string, now int64) [][]any {
				return append(semOnly(k, now), []any{"ZADD", k[3], now - 61000, "x", now, "y"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("expired ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[0], now - 1, fpTok}, []any{"HSET", k[2], fpTok, 1})
			}, rel(flag...)},
			fpCase{fmt.Sprint("expiring at this ms ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[0], now, fpTok}, []any{"HSET", k[2], fpTok, 1})
			}, rel(flag...)},
			fpCase{fmt.Sprint("released before ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[3], now - 10, fpTok})
			}, rel(flag...)},
			fpCase{fmt.Sprint("not held ", flag), "slow", semBusy, rel(flag...)},
			fpCase{fmt.Sprint("annotated ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[4], fpTok, "me"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("another annotated ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[4], "a", "them"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("weighted ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[5], fpTok, 2})
			}, rel(flag...)},
			fpCase{fmt.Sprint("a waiter's mark ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[5], "~", now + 5000})
			}, rel(flag...)},
		)
	}
	semRelCases = append(semRelCases,
		fpCase{"pass", "slow", semHeld, rel("0")},
		fpCase{"pass, not held", "slow", semBusy, rel("0")},
	)
	for i, k := range sk {
		semRelCases = append(semRelCases, fpCase{"held, a list at " + k, "", func(ks []string, now int64) [][]any {
			return append(slices.DeleteFunc(semHeld(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
		}, rel()}, fpCase{"a list at " + k, "", list(i), rel()})
	}

	rw := []string{fpTok, fpTTL, "", fpRet}
	rwBusy := func(k []string, now int64) [][]any {
		return cmds(
			[]any{"ZADD", k[0], now + 5000, "a", now + 9000, "b"}, []any{"PEXPIRE", k[0], 9000},
			[]any{"HSET", k[4], "a", us(now) - 10, "b", us(now) - 5}, []any{"PEXPIRE", k[4], 40000},
			[]any{"SET", k[3], ms(us(now) - 5), "PX", fpRet},
			[]any{"ZADD", k[5], now - 70000, "old", now - 1000, "recent"}, []any{"PEXPIRE", k[5], 59000},
		)
	}
	var rwCases []fpCase
	rwCases = append(rwCases,
		fpCase{"fresh", "fast", none, rw},
		fpCase{"two live readers, finished tokens", "fast", rwBusy, rw},
		fpCase{"readers live longer than the ttl", "fast", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 90000, "a"}, []any{"PEXPIRE", k[0], 90000},
				[]any{"HSET", k[4], "a", 1}, []any{"PEXPIRE", k[4], 90000})
		}, rw},
		fpCase{"fence counter ahead of the clock", "fast", func(k []string, now int64) [][]any {
			return cmds([]any{"SET", k[3], ms(us(now) + 10_000_000_000), "PX", fpRet})
		}, rw},
		fpCase{"a writer", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"SET", k[1], "w", "PX", 5000}, []any{"HSET", k[6], "w", "note-w"})
		}, rw},
		fpCase{"a foreign writer key", "slow", func(k []string, now int64) [][]any { return cmds([]any{"SET", k[1], "w"}) }, rw},
		fpCase{"a writer waiting", "slow", func(k []string, now int64) [][]any {
			return append(rwBusy(k, now), []any{"ZADD", k[2], now + 3000, "w"})
		}, rw},
		fpCase{"a writer's intent expired", "slow", func(k []string, now int64) [][]any {
			return append(rwBusy(k, now), []any{"ZADD", k[2], now - 3000, "w"})
		}, rw},
		fpCase{"a dead reader", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now - 1, "dead", now + 9000, "b"}, []any{"HSET", k[4], "dead", 3, "b", 4},
				[]any{"HSET", k[6], "dead", "x"})
		}, rw},
		fpCase{"held by the token", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 1000, fpTok}, []any{"HSET", k[4], fpTok, 42})
		}, rw},
		fpCase{"held by the token, expired", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now - 1000, fpTok}, []any{"HSET", k[4], fpTok, 42})
		}, rw},
		fpCase{"the token finished", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[5], now - 10, fpTok})
		}, rw},
		fpCase{"with an annotation", "slow", none, []string{fpTok, fpTTL, "me", fpRet}},
		fpCase{"annotations stored", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 5000, "a"}, []any{"HSET", k[6], "a", "note-a"})
		}, rw},
	)
	for _, v := range []string{"abc", "007", "1234567890123456789"} {
		rwCases = append(rwCases, fpCase{fmt.Sprintf("fence counter %q", v), "", func(k []string, now int64) [][]any {
			return cmds([]any{"SET", k[3], v})
		}, rw})
	}
	for i, k := range rk {
		rwCases = append(rwCases, fpCase{"a list at " + k, "", list(i), rw},
			fpCase{"busy, a list at " + k, "", func(ks []string, now int64) [][]any {
				return append(slices.DeleteFunc(rwBusy(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
			}, rw})
	}

	rwHeld := func(k []string, now int64) [][]any {
		return append(rwBusy(k, now), []any{"ZADD", k[0], now + 20000, fpTok}, []any{"HSET", k[4], fpTok, us(now) - 1})
	}
	rwOnly := func(k []string, now int64) [][]any {
		return cmds([]any{"ZADD", k[0], now + 30000, fpTok}, []any{"PEXPIRE", k[0], 30000},
			[]any{"HSET", k[4], fpTok, us(now) - 1}, []any{"PEXPIRE", k[4], 30000}, []any{"SET", k[3], ms(us(now) - 1), "PX", fpRet})
	}
	var rwRelCases []fpCase
	for _, flag := range [][]string{nil, {"1"}} {
		rwRelCases = append(rwRelCases,
			fpCase{fmt.Sprint("only reader ", flag), "fast", rwOnly, rel(flag...)},
			fpCase{fmt.Sprint("among readers ", flag), "fast", rwHeld, rel(flag...)},
			fpCase{fmt.Sprint("among readers, the others dead ", flag), "fast", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[0], now + 20000, fpTok, now - 5, "dead", now, "dying"}, []any{"HSET", k[4], fpTok, 1, "dead", 2})
			}, rel(flag...)},
			fpCase{fmt.Sprint("annotated ", flag), "fast", func(k []string, now int64) [][]any {
				return append(rwHeld(k, now), []any{"HSET", k[6], fpTok, "me", "a", "them"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("another annotated ", flag), "fast", func(k []string, now int64) [][]any {
				return append(rwOnly(k, now), []any{"HSET", k[6], "a", "them"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("held, finished tokens without expiry ", flag), "fast", func(k []string, now int64) [][]any {
				return append(rwOnly(k, now), []any{"ZADD", k[5], now - 61000, "x", now, "y"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("expired ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[0], now - 1, fpTok}, []any{"HSET", k[4], fpTok, 1})
			}, rel(flag...)},
			fpCase{fmt.Sprint("expiring at this ms ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[0], now, fpTok}, []any{"HSET", k[4], fpTok, 1})
			}, rel(flag...)},
			fpCase{fmt.Sprint("released before ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[5], now - 10, fpTok})
			}, rel(flag...)},
			fpCase{fmt.Sprint("not held ", flag), "slow", rwBusy, rel(flag...)},
		)
	}
	rwRelCases = append(rwRelCases,
		fpCase{"pass", "slow", rwHeld, rel("0")},
		fpCase{"pass, not held", "slow", rwBusy, rel("0")},
	)
	for i, k := range rk {
		rwRelCases = append(rwRelCases, fpCase{"held, a list at " + k, "", func(ks []string, now int64) [][]any {
			return append(slices.DeleteFunc(rwHeld(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
		}, rel()}, fpCase{"a list at " + k, "", list(i), rel()})
	}

	set := []string{"id1", "1", fpRet}
	hash := func(fv ...any) func(k []string, now int64) [][]any {
		return func(k []string, now int64) [][]any {
			c := []any{"HSET", k[0]}
			for _, x := range fv {
				if f, ok := x.(func(int64) int64); ok {
					x = f(now)
				}
				c = append(c, x)
			}
			return cmds(c, []any{"PEXPIRE", k[0], 50000})
		}
	}
	ago := func(d int64) func(int64) int64 { return func(now int64) int64 { return now - d } }
	latchSetCases := []fpCase{
		{"fresh", "fast", none, set},
		{"fresh, count 3", "fast", none, []string{"id1", "3", fpRet}},
		{"counting", "slow", hash("count", "2", "initial", "2", "round", "id0", "s:id0", ago(10)), set},
		{"at zero", "slow", hash("count", "0", "initial", "1", "round", "id0", "s:id0", ago(70000), "d:x", ago(10)), set},
		{"set by this call", "slow", hash("count", "0", "initial", "1", "round", "id1", "s:id1", ago(10), "d:x", ago(5)), set},
		{"a hash without a count", "", hash("other", "1"), set},
		{"a count that is not one", "", hash("count", "abc"), set},
		{"a list", "", list(0), set},
	}
	down := []string{"id1", "chan", fpRet}
	latchDownCases := []fpCase{
		{"count 1", "fast", hash("count", "1", "initial", "1", "round", "id0", "s:id0", ago(10)), down},
		{"count 3", "fast", hash("count", "3", "initial", "3", "round", "id0", "s:id0", ago(10)), down},
		{"count 10", "fast", hash("count", "10", "initial", "10", "round", "id0", "s:id0", ago(10)), down},
		// at zero, and counted: answered by one read, as the slow path answers them
		{"at zero", "", hash("count", "0", "initial", "1", "round", "id0", "d:x", ago(10)), down},
		{"counted by this call", "fast", hash("count", "2", "initial", "3", "round", "id0", "d:id1", ago(10)), down},
		{"counted by this call, now zero", "", hash("count", "0", "initial", "1", "round", "id0", "d:id1", ago(10)), down},
		{"never set", "slow", none, down},
		{"count 00", "slow", hash("count", "00"), down},
		{"count 007", "", hash("count", "007"), down},
		{"count -1", "", hash("count", "-1"), down},
		{"count 1.5", "", hash("count", "1.5"), down},
		{"count abc", "", hash("count", "abc"), down},
		{"a huge count", "", hash("count", "123456789012345678901"), down},
		{"a hash without a count", "", hash("other", "1"), down},
		{"a list", "", list(0), down},
	}
	return []struct {
		name  string
		s     *backend.Script
		keys  []string
		cases []fpCase
	}{
		{"sem_acquire", semAcquire, sk, semCases},
		{"sem_release", semRelease, sk, semRelCases},
		{"rw_read", rwRead, rk, rwCases},
		{"rw_read_release", rwReadRelease, rk, rwRelCases},
		{"latch_set", latchSet, lk, latchSetCases},
		{"latch_down", latchDown, lk, latchDownCases},
	}
}

// fpOutcome is what one run of a script left: its reply (or error), the
// keys with their values and expiries, the messages it published and,
// on redis-server, the commands it ran.
type fpOutcome struct {
	reply    string
	state    []string // "key type value pttl", sorted
	msgs     []string
	commands int
}

// fpServer runs scripts on one server and reads what they left.
type fpServer struct {
	c        *redis.Client
	sub      *redis.PubSub
	exact    bool                // miniredis: its clock stands still, so outcomes compare exactly
	clock    func() time.Time    // the server's clock
	freeze   func(time.Time)     // sets miniredis's clock
	stats    func() (int, error) // commands run since the last reset (redis-server)
	reset    func() error        // resets the command statistics (redis-server)
	barrierN int
}

func (s *fpServer) run(t *testing.T, ctx context.Context, src string, keys []string, c fpCase, now time.Time) fpOutcome {
	t.Helper()
	if err := s.c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if s.freeze != nil {
		s.freeze(now)
	}
	for _, cmd := range c.setup(keys, now.UnixMilli()) {
		if err := s.c.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%s: setup %v: %v", c.name, cmd, err)
		}
	}
	before := s.dump(t, ctx)
	if s.reset != nil {
		if err := s.reset(); err != nil {
			t.Fatal(err)
		}
	}
	args := make([]any, len(c.args))
	for i, a := range c.args {
		args[i] = a
	}
	v, err := s.c.Eval(ctx, src, keys, args...).Result()
	var o fpOutcome
	if s.stats != nil {
		n, serr := s.stats()
		if serr != nil {
			t.Fatal(serr)
		}
		o.commands = n
	}
	if err != nil && err != redis.Nil {
		o.reply = "error: " + fpErrorText(err.Error())
	} else {
		o.reply = fmt.Sprint(v)
	}
	o.msgs = s.messages(t, ctx)
	o.state = s.dump(t, ctx)
	if err != nil && err != redis.Nil && !fpSame(strings.Join(before, "\n"), strings.Join(o.state, "\n"), s.exact) {
		t.Errorf("%s: the script failed (%v) after writing:\nbefore %q\nafter  %q", c.name, err, before, o.state)
	}
	return o
}

var fpErrNoise = regexp.MustCompile(`(?s)( script: [0-9a-f]+, on @user_script:\d+\.?|@?user_script:\d+:\s*|<string>:\d+:\s*|(^|\s):\d+:\s*|\s*stack traceback:.*$)`)

// fpErrorText is an error reply without where in which script it arose.
func fpErrorText(s string) string { return strings.TrimSpace(fpErrNoise.ReplaceAllString(s, "")) }

// dump is every key with its type, value and expiry (PTTL, ms).
func (s *fpServer) dump(t *testing.T, ctx context.Context) []string {
	t.Helper()
	keys, err := s.c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		typ := s.c.Type(ctx, k).Val()
		var v any
		switch typ {
		case "string":
			v = s.c.Get(ctx, k).Val()
		case "list":
			v = s.c.LRange(ctx, k, 0, -1).Val()
		case "hash":
			h := s.c.HGetAll(ctx, k).Val()
			fs := make([]string, 0, len(h))
			for f, x := range h {
				fs = append(fs, f+"="+x)
			}
			slices.Sort(fs)
			v = fs
		case "zset": // members sorted by name: on redis-server, scores a ms apart may order them differently
			ms, _ := s.c.Do(ctx, "ZRANGE", k, 0, -1, "WITHSCORES").StringSlice()
			var fs []string
			for i := 0; i+1 < len(ms); i += 2 {
				fs = append(fs, ms[i]+"="+ms[i+1])
			}
			slices.Sort(fs)
			v = fs
		}
		pttl, err := s.c.Do(ctx, "PTTL", k).Int64()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s %v pttl %d", k, typ, v, pttl))
	}
	slices.Sort(out)
	return out
}

// messages are the messages published since the last call: every one
// before a barrier message this call publishes.
func (s *fpServer) messages(t *testing.T, ctx context.Context) []string {
	t.Helper()
	s.barrierN++
	barrier := strconv.Itoa(s.barrierN)
	if err := s.c.Publish(ctx, "fp-barrier", barrier).Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, err := s.sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Channel == "fp-barrier" {
			if m.Payload == barrier {
				return got
			}
			continue
		}
		got = append(got, m.Channel+" "+m.Payload)
	}
}

var fpNumber = regexp.MustCompile(`-?\d+(\.\d+)?(e[+-]?\d+)?`)

// fpSame reports whether a and b are the same outcome text: exactly, or
// (on redis-server, whose clock moves between the two runs) with every
// number that reads as a time of today (ms or µs since 1970) or as a
// time to live within 2 s of the other's.
func fpSame(a, b string, exact bool) bool {
	if exact || a == b {
		return a == b
	}
	na, nb := fpNumber.FindAllString(a, -1), fpNumber.FindAllString(b, -1)
	if len(na) != len(nb) || fpNumber.ReplaceAllString(a, "#") != fpNumber.ReplaceAllString(b, "#") {
		return false
	}
	nowMs := float64(time.Now().UnixMilli())
	for i := range na {
		if na[i] == nb[i] {
			continue
		}
		x, err1 := strconv.ParseFloat(na[i], 64)
		y, err2 := strconv.ParseFloat(nb[i], 64)
		if err1 != nil || err2 != nil {
			return false
		}
		switch {
		case math.Abs(x-nowMs) < 3.6e6 && math.Abs(y-x) <= 2000: // ms of today
		case math.Abs(x-nowMs*1000) < 3.6e9 && math.Abs(y-x) <= 2e6: // µs of today
		case x > 0 && x < 1e8 && math.Abs(y-x) <= 2000: // a time to live, ms
		default:
			return false
		}
	}
	return true
}

// TestOtherFastPathsDoWhatTheSlowPathsDo runs each script, and the same
// script without its fast path, on the same states: both leave the same
// keys, values and expiries, reply the same and publish the same
// messages; where the fast path is meant to answer, it does (on
// redis-server: fewer commands than the slow path alone), and where it is
// not, it hands over to the slow path. On miniredis the clock stands
// still and every figure compares exactly; on redis-server times and
// fences compare within 2 s.
func TestOtherFastPathsDoWhatTheSlowPathsDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := map[string]func(t *testing.T) *fpServer{
		"miniredis": func(t *testing.T) *fpServer {
			m := miniredis.RunT(t)
			return &fpServer{exact: true, freeze: m.SetTime, clock: func() time.Time { return time.UnixMicro(1_800_000_000_123_456) },
				c: redis.NewClient(&redis.Options{Addr: m.Addr(), Protocol: 2})}
		},
		"redis-server": func(t *testing.T) *fpServer {
			srv := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2})
			s := &fpServer{c: c, clock: time.Now}
			s.reset = func() error { return c.ConfigResetStat(ctx).Err() }
			s.stats = func() (int, error) {
				info, err := c.Info(ctx, "commandstats").Result()
				if err != nil {
					return 0, err
				}
				n := 0
				for _, l := range strings.Split(info, "\n") {
					name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
					if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_eval" || strings.HasPrefix(name, "cmdstat_config") || name == "cmdstat_info" {
						continue
					}
					calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
					k, err := strconv.Atoi(calls)
					if err != nil {
						return 0, fmt.Errorf("commandstats line %q: %v", l, err)
					}
					n += k
				}
				return n, nil
			}
			return s
		},
	}
	for _, what := range []string{"miniredis", "redis-server"} {
		t.Run(what, func(t *testing.T) {
			s := servers[what](t)
			defer s.c.Close()
			s.sub = s.c.PSubscribe(ctx, "*")
			defer s.sub.Close()
			if _, err := s.sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			for _, sc := range fpScripts() {
				full := sc.s.Source()
				fast, slow := splitFast(full)
				if fast == "" {
					t.Errorf("%s: no fast path", sc.name)
				}
				for _, c := range sc.cases {
					now := s.clock()
					got := s.run(t, ctx, full, sc.keys, c, now)
					want := s.run(t, ctx, slow, sc.keys, c, now)
					what := sc.name + ": " + c.name
					if !fpSame(got.reply, want.reply, s.exact) {
						t.Errorf("%s: reply %s, without the fast path %s", what, got.reply, want.reply)
					}
					if !fpSame(strings.Join(got.state, "\n"), strings.Join(want.state, "\n"), s.exact) {
						t.Errorf("%s: left\n\t%s\nwithout the fast path\n\t%s", what, strings.Join(got.state, "\n\t"), strings.Join(want.state, "\n\t"))
					}
					if !fpSame(strings.Join(got.msgs, "|"), strings.Join(want.msgs, "|"), s.exact) {
						t.Errorf("%s: published %q, without the fast path %q", what, got.msgs, want.msgs)
					}
					if s.stats == nil {
						continue
					}
					switch {
					case c.fast == "fast" && got.commands >= want.commands:
						t.Errorf("%s: %d commands, without the fast path %d: the fast path did not answer", what, got.commands, want.commands)
					case c.fast == "slow" && got.commands < want.commands:
						t.Errorf("%s: %d commands, without the fast path %d: the fast path answered", what, got.commands, want.commands)
					}
					if testing.Verbose() {
						t.Logf("%s: %d commands (%d without the fast path), reply %s", what, got.commands, want.commands, got.reply)
					}
				}
			}
		})
	}
}

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
	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// The uncontended calls of the Semaphore, the RWLock's readers, the
// FairSemaphore and the Latch are answered by fast paths in front of the
// prelude, as the Mutex's are (issue 29, item 5; the FairSemaphore's since
// issue 39): a Semaphore's TryAcquire+Release, a TryRLock+Release, a
// FairSemaphore's on a name nobody else uses and a TrySetCount+CountDown
// make no closure.

// otherFastScripts are the scripts with such a fast path.
var otherFastScripts = []struct {
	name string
	s    *backend.Script
}{
	{"sem_acquire", semAcquireScript}, {"sem_release", semReleaseScript},
	{"rw_read", loadScript("rw_read")}, {"rw_read_release", loadScript("rw_read_release")},
	{"latch_set", latchSetScript}, {"latch_down", latchDownScript},
	{"fair_acquire", fairAcquire}, {"fair_release", fairRelease},
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
	name     string
	s        *backend.Script
	keys     []string // the cases' keys
	evalKeys []string // the script's KEYS, when not keys
	cases    []fpCase
} {
	// The scripts' KEYS (each layout's legacy keys, which no script
	// takes, apart).
	sk := keyspace.SemLayout.KeysOf("fp:", "s")
	rk := keyspace.RWLayout.KeysOf("fp:", "r")
	fk := keyspace.FairLayout.KeysOf("fp:", "f")
	sk, semLegacy := sk[:keyspace.SemLayout.Scripted()], sk[keyspace.SemLayout.Scripted():]
	rk, rwLegacy := rk[:keyspace.RWLayout.Scripted()], rk[keyspace.RWLayout.Scripted():]
	fk, fairLegacy := fk[:keyspace.FairLayout.Scripted()], fk[keyspace.FairLayout.Scripted():]
	lk := keyspace.LatchLayout.KeysOf("fp:", "l")
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }
	us := func(nowMs int64) int64 { return nowMs * 1000 }
	none := func([]string, int64) [][]any { return nil }
	list := func(i int) func(k []string, _ int64) [][]any {
		return func(k []string, _ int64) [][]any { return cmds([]any{"RPUSH", k[i], "x"}) }
	}
	// holders is a ZADD of a holders zset: each token with its expiry and
	// its fence member ("#" and the token) with its fence.
	holders := func(key string, hs ...any) []any {
		c := []any{"ZADD", key}
		for i := 0; i+2 < len(hs)+1; i += 3 {
			c = append(c, hs[i+1], hs[i], hs[i+2], "#"+hs[i].(string))
		}
		return c
	}
	// lone is a lone holder of a holders zset: its token scored by its
	// fence, its expiry the key's (pttl ms; 0 for none). Nothing is
	// written beside a lone holder (an annotation, a weight, a waiter's
	// mark or intent: the scripts spread it first), and the cases keep to
	// the states the scripts make.
	lone := func(key, tok string, fence, pttl int64) [][]any {
		c := cmds([]any{"ZADD", key, fence, tok})
		if pttl > 0 {
			c = append(c, []any{"PEXPIRE", key, pttl})
		}
		return c
	}
	// given-back tokens, old and recent
	gone := func(key string, now int64) [][]any {
		return cmds([]any{"ZADD", key, now - 70000, "old", now - 1000, "recent"}, []any{"PEXPIRE", key, 59000})
	}
	// latchkit 0.x's keys (a counter, then a hash), which no script
	// reads or writes any more
	legacy := func(k []string) [][]any {
		return cmds([]any{"SET", k[0], "abc"}, []any{"HSET", k[1], "old", "1.5"})
	}
	// a semaphore with two live holders
	semBusy := func(k []string, now int64) [][]any {
		return cmds(holders(k[0], "a", now+5000, us(now)-10, "b", now+9000, us(now)-5), []any{"PEXPIRE", k[0], 9000})
	}
	semArgs := func(n, mark, note string) []string { return []string{fpTok, fpTTL, mark, note, fpRet, "5", n} }
	sem := semArgs("1", "0", "")
	var semCases []fpCase
	semCases = append(semCases,
		fpCase{"fresh", "fast", none, sem},
		fpCase{"two live holders", "fast", semBusy, sem},
		fpCase{"holders live longer than the ttl", "fast", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+90000, us(now)-10), []any{"PEXPIRE", k[0], 90000})
		}, sem},
		fpCase{"holders without expiry", "fast", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, us(now)-10))
		}, sem},
		fpCase{"a holder's fence ahead of the clock", "fast", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, us(now)+10_000_000_000), []any{"PEXPIRE", k[0], 9000})
		}, sem},
		fpCase{"a holder without a fence member", "fast", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[0], now + 5000, "a"}, []any{"PEXPIRE", k[0], 9000})
		}, sem},
		fpCase{"latchkit 0.x's fence counter and fences", "fast", func(k []string, now int64) [][]any {
			return append(semBusy(k, now), legacy(semLegacy)...)
		}, sem},
		fpCase{"full", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, 1e15, "b", now+6000, 1e15+1, "c", now+7000, 1e15+2, "d", now+8000, 1e15+3, "e", now+9000, 1e15+4),
				[]any{"HSET", k[2], "a", "note-a"})
		}, sem},
		fpCase{"a lone holder", "fast", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 5000) }, sem},
		fpCase{"a lone holder, its fence ahead of the clock", "fast", func(k []string, now int64) [][]any {
			return lone(k[0], "a", us(now)+10_000_000_000, 5000)
		}, sem},
		fpCase{"a lone holder living longer than the ttl", "fast", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 90000) }, sem},
		fpCase{"a lone holder without expiry", "slow", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 0) }, sem},
		fpCase{"a lone holder, limit 1", "slow", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 5000) },
			[]string{fpTok, fpTTL, "1", "1", "0", "", fpRet}},
		fpCase{"a lone holder, limit 1, a waiting attempt", "slow", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 5000) },
			[]string{fpTok, fpTTL, "1", "1", "3000", "", fpRet}},
		fpCase{"a lone holder, several permits", "slow", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 5000) },
			semArgs("2", "0", "")},
		fpCase{"the token a lone holder", "slow", func(k []string, now int64) [][]any { return lone(k[0], fpTok, 42e13, 5000) }, sem},
		fpCase{"a lone holder, given-back tokens", "slow", func(k []string, now int64) [][]any {
			return append(lone(k[0], "a", us(now)-10, 5000), gone(k[1], now)...)
		}, sem},
		fpCase{"four held", "fast", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, 1e15, "b", now+6000, 1e15+1, "c", now+7000, 1e15+2, "d", now+8000, 1e15+3))
		}, sem},
		fpCase{"a dead holder", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "dead", now-1, us(now)-20, "b", now+9000, us(now)-10))
		}, sem},
		fpCase{"a dead holder with the highest fence, ahead of the clock", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "dead", now-1, us(now)+10_000_000_000, "b", now+9000, us(now)-10))
		}, sem},
		fpCase{"a holder dead at this ms", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "dead", now, us(now)-20))
		}, sem},
		fpCase{"held by the token", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], fpTok, now+1000, 42e13))
		}, sem},
		fpCase{"held by the token, expired", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], fpTok, now-1000, 42e13, "a", now+5000, us(now)-10))
		}, sem},
		fpCase{"the token given back", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[1], now - 10, fpTok})
		}, sem},
		fpCase{"given-back tokens", "slow", func(k []string, now int64) [][]any { return append(semBusy(k, now), gone(k[1], now)...) }, sem},
		fpCase{"a fence kept ahead of the clock", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[1], us(now) + 10_000_000_000, "#"}, []any{"PEXPIRE", k[1], 70000})
		}, sem},
		fpCase{"with an annotation", "slow", none, semArgs("1", "0", "me")},
		fpCase{"annotations stored", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, us(now)-10), []any{"HSET", k[2], "a", "note-a"})
		}, sem},
		fpCase{"weights stored", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, us(now)-10), []any{"HSET", k[3], "a", 3})
		}, sem},
		fpCase{"a waiter's mark", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"HSET", k[3], "!", now + 5000})
		}, sem},
		fpCase{"a waiter for several permits' mark", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"HSET", k[3], "~", now + 5000, "!", now + 5000})
		}, sem},
		fpCase{"fresh, a waiting attempt", "fast", none, semArgs("1", "3000", "")},
		fpCase{"full, a waiting attempt", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, 1e15, "b", now+6000, 1e15+1, "c", now+7000, 1e15+2, "d", now+8000, 1e15+3, "e", now+9000, 1e15+4))
		}, semArgs("1", "3000", "")},
		fpCase{"full, a waiting attempt, a mark", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, 1e15, "b", now+6000, 1e15+1, "c", now+7000, 1e15+2, "d", now+8000, 1e15+3, "e", now+9000, 1e15+4),
				[]any{"HSET", k[3], "!", now + 9000})
		}, semArgs("1", "3000", "")},
		fpCase{"a stored limit", "slow", func(k []string, now int64) [][]any { return cmds([]any{"SET", k[4], "1"}) }, sem},
		fpCase{"several permits", "slow", none, semArgs("2", "0", "")},
		fpCase{"several permits, waiting", "slow", semBusy, semArgs("4", "3000", "")},
		fpCase{"above the limit", "", none, semArgs("6", "0", "")},
	)
	for i, k := range sk {
		semCases = append(semCases, fpCase{"a list at " + k, "", list(i), sem},
			fpCase{"busy, a list at " + k, "", func(ks []string, now int64) [][]any {
				return append(slices.DeleteFunc(semBusy(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
			}, sem})
	}

	rel := func(flag ...string) []string { return append([]string{fpTok, "chan"}, flag...) }
	semHeld := func(k []string, now int64) [][]any {
		return append(semBusy(k, now), holders(k[0], fpTok, now+20000, us(now)-1))
	}
	semOnly := func(k []string, now int64) [][]any {
		return cmds(holders(k[0], fpTok, now+30000, us(now)-1), []any{"PEXPIRE", k[0], 30000})
	}
	var semRelCases []fpCase
	for _, flag := range [][]string{nil, {"1"}} {
		fast := "fast"
		if flag != nil {
			fast = "slow" // a give-back: the slow path alone
		}
		semRelCases = append(semRelCases,
			fpCase{fmt.Sprint("only holder ", flag), fast, semOnly, rel(flag...)},
			fpCase{fmt.Sprint("a lone holder ", flag), fast, func(k []string, now int64) [][]any { return lone(k[0], fpTok, us(now)-10, 30000) }, rel(flag...)},
			fpCase{fmt.Sprint("a lone holder, its fence ahead of the clock ", flag), "slow", func(k []string, now int64) [][]any {
				return lone(k[0], fpTok, us(now)+10_000_000_000, 30000)
			}, rel(flag...)},
			fpCase{fmt.Sprint("a lone holder, another's ", flag), "slow", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 30000) }, rel(flag...)},
			fpCase{fmt.Sprint("among holders ", flag), fast, semHeld, rel(flag...)},
			fpCase{fmt.Sprint("held, given-back tokens ", flag), fast, func(k []string, now int64) [][]any {
				return append(semOnly(k, now), gone(k[1], now)...)
			}, rel(flag...)},
			fpCase{fmt.Sprint("held, latchkit 0.x's keys ", flag), fast, func(k []string, now int64) [][]any {
				return append(semOnly(k, now), legacy(semLegacy)...)
			}, rel(flag...)},
			fpCase{fmt.Sprint("held, a fence ahead of the clock ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now+30000, us(now)+10_000_000_000), []any{"PEXPIRE", k[0], 30000})
			}, rel(flag...)},
			fpCase{fmt.Sprint("held, a fence ahead of the clock, a higher one kept ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now+30000, us(now)+10_000_000_000), []any{"PEXPIRE", k[0], 30000},
					[]any{"ZADD", k[1], us(now) + 20_000_000_000, "#", now - 10, "x"}, []any{"PEXPIRE", k[1], 80000})
			}, rel(flag...)},
			fpCase{fmt.Sprint("held, a fence ahead of the clock, a list for the given-back tokens ", flag), "", func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now+30000, us(now)+10_000_000_000), []any{"PEXPIRE", k[0], 30000}, []any{"RPUSH", k[1], "x"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("expired ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now-1, us(now)-5000))
			}, rel(flag...)},
			fpCase{fmt.Sprint("expiring at this ms ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now, us(now)-5000))
			}, rel(flag...)},
			fpCase{fmt.Sprint("given back before ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[1], now - 10, fpTok})
			}, rel(flag...)},
			fpCase{fmt.Sprint("not held ", flag), "slow", semBusy, rel(flag...)},
			fpCase{fmt.Sprint("annotated ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[2], fpTok, "me"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("another annotated ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[2], "a", "them"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("weighted ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[3], fpTok, 2})
			}, rel(flag...)},
			fpCase{fmt.Sprint("a waiter for several permits' mark ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[3], "~", now + 5000, "!", now + 5000})
			}, rel(flag...)},
			fpCase{fmt.Sprint("a waiter's mark ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[3], "!", now + 5000})
			}, rel(flag...)},
			fpCase{fmt.Sprint("a waiter's mark, expired ", flag), "slow", func(k []string, now int64) [][]any {
				return append(semHeld(k, now), []any{"HSET", k[3], "!", now - 5})
			}, rel(flag...)},
		)
	}
	semRelCases = append(semRelCases,
		fpCase{"pass (a release)", "fast", semHeld, rel("0")},
		fpCase{"pass, not held", "slow", semBusy, rel("0")},
	)
	for i, k := range sk {
		semRelCases = append(semRelCases, fpCase{"held, a list at " + k, "", func(ks []string, now int64) [][]any {
			return append(slices.DeleteFunc(semHeld(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
		}, rel()}, fpCase{"a list at " + k, "", list(i), rel()})
	}

	rw := []string{fpTok, fpTTL, "0", "", fpRet}
	rwBusy := func(k []string, now int64) [][]any {
		return cmds(holders(k[0], "a", now+5000, us(now)-10, "b", now+9000, us(now)-5), []any{"PEXPIRE", k[0], 9000})
	}
	var rwCases []fpCase
	rwCases = append(rwCases,
		fpCase{"fresh", "fast", none, rw},
		fpCase{"two live readers", "fast", rwBusy, rw},
		fpCase{"readers live longer than the ttl", "fast", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+90000, us(now)-10), []any{"PEXPIRE", k[0], 90000})
		}, rw},
		fpCase{"a lone reader", "fast", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 5000) }, rw},
		fpCase{"a lone reader, its fence ahead of the clock", "fast", func(k []string, now int64) [][]any {
			return lone(k[0], "a", us(now)+10_000_000_000, 5000)
		}, rw},
		fpCase{"a lone reader without expiry", "slow", func(k []string, now int64) [][]any { return lone(k[0], "a", us(now)-10, 0) }, rw},
		fpCase{"the token a lone reader", "slow", func(k []string, now int64) [][]any { return lone(k[0], fpTok, 42e13, 5000) }, rw},
		fpCase{"a reader's fence ahead of the clock", "fast", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, us(now)+10_000_000_000), []any{"PEXPIRE", k[0], 9000})
		}, rw},
		fpCase{"latchkit 0.x's fence counter and fences", "fast", func(k []string, now int64) [][]any {
			return append(rwBusy(k, now), legacy(rwLegacy)...)
		}, rw},
		fpCase{"given-back tokens", "slow", func(k []string, now int64) [][]any { return append(rwBusy(k, now), gone(k[3], now)...) }, rw},
		fpCase{"a fence kept ahead of the clock", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[3], us(now) + 10_000_000_000, "#"}, []any{"PEXPIRE", k[3], 70000})
		}, rw},
		fpCase{"a writer", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"SET", k[1], "w " + ms(us(now)-10), "PX", 5000}, []any{"HSET", k[4], "w", "note-w"})
		}, rw},
		fpCase{"a writer of latchkit 0.x", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"SET", k[1], "w", "PX", 5000}, []any{"HSET", k[4], "w", "note-w"})
		}, rw},
		fpCase{"a foreign writer key", "slow", func(k []string, now int64) [][]any { return cmds([]any{"SET", k[1], "w"}) }, rw},
		fpCase{"a writer waiting", "slow", func(k []string, now int64) [][]any {
			return append(rwBusy(k, now), []any{"ZADD", k[2], now + 3000, "w"})
		}, rw},
		fpCase{"a writer's intent expired", "slow", func(k []string, now int64) [][]any {
			return append(rwBusy(k, now), []any{"ZADD", k[2], now - 3000, "w"})
		}, rw},
		fpCase{"a dead reader", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "dead", now-1, us(now)-20, "b", now+9000, us(now)-10), []any{"HSET", k[4], "dead", "x"})
		}, rw},
		fpCase{"held by the token", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], fpTok, now+1000, 42e13))
		}, rw},
		fpCase{"held by the token, expired", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], fpTok, now-1000, 42e13))
		}, rw},
		fpCase{"the token given back", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[3], now - 10, fpTok})
		}, rw},
		fpCase{"with an annotation", "slow", none, []string{fpTok, fpTTL, "0", "me", fpRet}},
		fpCase{"annotations stored", "slow", func(k []string, now int64) [][]any {
			return cmds(holders(k[0], "a", now+5000, us(now)-10), []any{"HSET", k[4], "a", "note-a"})
		}, rw},
	)
	for i, k := range rk {
		rwCases = append(rwCases, fpCase{"a list at " + k, "", list(i), rw},
			fpCase{"busy, a list at " + k, "", func(ks []string, now int64) [][]any {
				return append(slices.DeleteFunc(rwBusy(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
			}, rw})
	}

	rwHeld := func(k []string, now int64) [][]any {
		return append(rwBusy(k, now), holders(k[0], fpTok, now+20000, us(now)-1))
	}
	rwOnly := func(k []string, now int64) [][]any {
		return cmds(holders(k[0], fpTok, now+30000, us(now)-1), []any{"PEXPIRE", k[0], 30000})
	}
	var rwRelCases []fpCase
	for _, flag := range [][]string{nil, {"1"}} {
		fast := "fast"
		if flag != nil {
			fast = "slow" // a give-back: the slow path alone
		}
		rwRelCases = append(rwRelCases,
			fpCase{fmt.Sprint("only reader ", flag), fast, rwOnly, rel(flag...)},
			fpCase{fmt.Sprint("a lone reader ", flag), fast, func(k []string, now int64) [][]any { return lone(k[0], fpTok, us(now)-10, 30000) }, rel(flag...)},
			fpCase{fmt.Sprint("a lone reader, its fence ahead of the clock ", flag), "slow", func(k []string, now int64) [][]any {
				return lone(k[0], fpTok, us(now)+10_000_000_000, 30000)
			}, rel(flag...)},
			fpCase{fmt.Sprint("among readers ", flag), fast, rwHeld, rel(flag...)},
			fpCase{fmt.Sprint("among readers, the others dead ", flag), fast, func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now+20000, us(now)-1, "dead", now-5, us(now)-30, "dying", now, us(now)-20))
			}, rel(flag...)},
			fpCase{fmt.Sprint("annotated ", flag), "slow", func(k []string, now int64) [][]any {
				return append(rwHeld(k, now), []any{"HSET", k[4], fpTok, "me", "a", "them"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("a writer waiting ", flag), "slow", func(k []string, now int64) [][]any {
				return append(rwOnly(k, now), []any{"ZADD", k[2], now + 3000, "w"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("a writer waiting, other readers ", flag), "slow", func(k []string, now int64) [][]any {
				return append(rwHeld(k, now), []any{"ZADD", k[2], now + 3000, "w"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("another annotated ", flag), "slow", func(k []string, now int64) [][]any {
				return append(rwOnly(k, now), []any{"HSET", k[4], "a", "them"})
			}, rel(flag...)},
			fpCase{fmt.Sprint("held, given-back tokens ", flag), fast, func(k []string, now int64) [][]any {
				return append(rwOnly(k, now), gone(k[3], now)...)
			}, rel(flag...)},
			fpCase{fmt.Sprint("held, latchkit 0.x's keys ", flag), fast, func(k []string, now int64) [][]any {
				return append(rwOnly(k, now), legacy(rwLegacy)...)
			}, rel(flag...)},
			fpCase{fmt.Sprint("held, a fence ahead of the clock ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now+30000, us(now)+10_000_000_000), []any{"PEXPIRE", k[0], 30000})
			}, rel(flag...)},
			fpCase{fmt.Sprint("expired ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now-1, us(now)-5000))
			}, rel(flag...)},
			fpCase{fmt.Sprint("expiring at this ms ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds(holders(k[0], fpTok, now, us(now)-5000))
			}, rel(flag...)},
			fpCase{fmt.Sprint("given back before ", flag), "slow", func(k []string, now int64) [][]any {
				return cmds([]any{"ZADD", k[3], now - 10, fpTok})
			}, rel(flag...)},
			fpCase{fmt.Sprint("not held ", flag), "slow", rwBusy, rel(flag...)},
		)
	}
	rwRelCases = append(rwRelCases,
		fpCase{"pass (a release)", "fast", rwHeld, rel("0")},
		fpCase{"pass, not held", "slow", rwBusy, rel("0")},
	)
	for i, k := range rk {
		rwRelCases = append(rwRelCases, fpCase{"held, a list at " + k, "", func(ks []string, now int64) [][]any {
			return append(slices.DeleteFunc(rwHeld(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
		}, rel()}, fpCase{"a list at " + k, "", list(i), rel()})
	}

	set := []string{"id1", "chan", fpRet, "1"}
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
		{"fresh, count 3", "fast", none, []string{"id1", "chan", fpRet, "3"}},
		{"counting", "slow", hash("count", "2", "initial", "2", "round", "id0", "s:id0", "r"), set},
		{"at zero", "slow", hash("count", "0", "initial", "1", "round", "id0", "s:id0", "r", "d:x", "r", "s:old", ago(70000), "d:y", ago(10)), set},
		{"at zero, ids of latchkit 0.x", "slow", hash("count", "0", "initial", "1", "round", "id0", "s:id0", ago(70000), "d:x", ago(10)), set},
		{"set by this call", "slow", hash("count", "0", "initial", "1", "round", "id1", "s:id1", "r", "d:x", "r"), set},
		{"set by this call, a round ago", "slow", hash("count", "1", "initial", "1", "round", "id2", "s:id2", "r", "s:id1", ago(10)), set},
		{"a hash without a count", "", hash("other", "1"), set},
		{"a count that is not one", "", hash("count", "abc"), set},
		{"a list", "", list(0), set},
	}
	down := []string{"id1", "chan", fpRet}
	latchDownCases := []fpCase{
		{"count 1", "fast", hash("count", "1", "initial", "1", "round", "id0", "s:id0", "r"), down},
		{"count 3", "fast", hash("count", "3", "initial", "3", "round", "id0", "s:id0", "r"), down},
		{"count 10", "fast", hash("count", "10", "initial", "10", "round", "id0", "s:id0", "r"), down},
		// at zero, and counted: answered by one read, as the slow path answers them
		{"at zero", "", hash("count", "0", "initial", "1", "round", "id0", "d:x", "r"), down},
		{"counted by this call", "fast", hash("count", "2", "initial", "3", "round", "id0", "d:id1", "r"), down},
		{"counted by this call, a round ago", "fast", hash("count", "2", "initial", "2", "round", "id0", "d:id1", ago(10)), down},
		{"counted by this call, now zero", "", hash("count", "0", "initial", "1", "round", "id0", "d:id1", "r"), down},
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

	fairArgs := func(try, inbox, n, note string) []string {
		return []string{fpTok, fpTTL, "2", "3000", try, inbox, n, "1", note, fpRet}
	}
	fairTry, fairWait := fairArgs("1", "", "1", ""), fairArgs("0", "inbox", "1", "")
	// a FairSemaphore held by "a" (ticket 1), with "w" waiting behind (ticket 2)
	fairBusy := func(k []string, now int64) [][]any {
		return cmds([]any{"ZADD", k[0], 1, "a", 2, "w"}, []any{"ZADD", k[1], now + 5000, "a", now + 3000, "w"},
			[]any{"HSET", k[2], "a", us(now) - 10}, []any{"HSET", k[5], "w", "inbox-w"}, []any{"HSET", k[6], "w", 2},
			[]any{"PEXPIRE", k[0], 5000}, []any{"PEXPIRE", k[1], 5000}, []any{"PEXPIRE", k[2], 5000}, []any{"PEXPIRE", k[5], 5000}, []any{"PEXPIRE", k[6], 5000})
	}
	fairCases := []fpCase{
		{"fresh, a Try", "fast", none, fairTry},
		{"fresh, a waiting attempt", "fast", none, fairWait},
		{"latchkit 0.x's counters", "fast", func(k []string, now int64) [][]any {
			return cmds([]any{"SET", fairLegacy[0], "abc"}, []any{"SET", fairLegacy[1], "1.5"})
		}, fairTry},
		{"held, a Try", "slow", fairBusy, fairTry},
		{"held, a waiting attempt", "slow", fairBusy, fairWait},
		{"given-back tokens", "slow", func(k []string, now int64) [][]any { return gone(k[3], now) }, fairTry},
		{"a fence kept ahead of the clock", "slow", func(k []string, now int64) [][]any {
			return cmds([]any{"ZADD", k[3], us(now) + 10_000_000_000, "#"}, []any{"PEXPIRE", k[3], 70000})
		}, fairTry},
		{"a stored limit", "slow", func(k []string, now int64) [][]any { return cmds([]any{"SET", k[7], "1"}) }, fairTry},
		{"with an annotation", "slow", none, fairArgs("1", "", "1", "me")},
		{"several permits", "slow", none, fairArgs("1", "", "2", "")},
	}
	for i, k := range fk {
		fairCases = append(fairCases, fpCase{"a list at " + k, "", list(i), fairTry})
	}
	fairRel := []string{fpTok, "chan", "2", "3000", fpRet, "1"}
	fairOnly := func(k []string, now int64) [][]any {
		return cmds([]any{"ZADD", k[0], 1, fpTok}, []any{"ZADD", k[1], now + 30000, fpTok}, []any{"HSET", k[2], fpTok, us(now) - 1},
			[]any{"PEXPIRE", k[0], 30000}, []any{"PEXPIRE", k[1], 30000}, []any{"PEXPIRE", k[2], 30000})
	}
	fairRelCases := []fpCase{
		{"only holder", "fast", fairOnly, fairRel},
		{"only holder, given-back tokens", "fast", func(k []string, now int64) [][]any { return append(fairOnly(k, now), gone(k[3], now)...) }, fairRel},
		{"only holder, latchkit 0.x's counters", "fast", func(k []string, now int64) [][]any {
			return append(fairOnly(k, now), []any{"SET", fairLegacy[0], "abc"}, []any{"SET", fairLegacy[1], "1.5"})
		}, fairRel},
		{"a waiter behind", "slow", func(k []string, now int64) [][]any {
			return append(fairOnly(k, now), []any{"ZADD", k[0], 2, "w"}, []any{"ZADD", k[1], now + 3000, "w"}, []any{"HSET", k[5], "w", "inbox-w"})
		}, fairRel},
		{"a fence ahead of the clock", "slow", func(k []string, now int64) [][]any {
			return append(fairOnly(k, now), []any{"HSET", k[2], fpTok, us(now) + 10_000_000_000})
		}, fairRel},
		{"expired", "slow", func(k []string, now int64) [][]any {
			return append(fairOnly(k, now), []any{"ZADD", k[1], now - 1, fpTok})
		}, fairRel},
		{"annotated", "slow", func(k []string, now int64) [][]any { return append(fairOnly(k, now), []any{"HSET", k[4], fpTok, "me"}) }, fairRel},
		{"a stored limit", "slow", func(k []string, now int64) [][]any { return append(fairOnly(k, now), []any{"SET", k[7], "3"}) }, fairRel},
		{"not held", "slow", fairBusy, fairRel},
	}
	for i, k := range fk {
		fairRelCases = append(fairRelCases, fpCase{"held, a list at " + k, "", func(ks []string, now int64) [][]any {
			return append(slices.DeleteFunc(fairOnly(ks, now), func(c []any) bool { return c[1] == k }), []any{"RPUSH", k, "x"})
		}, fairRel}, fpCase{"a list at " + k, "", list(i), fairRel})
	}
	return []struct {
		name     string
		s        *backend.Script
		keys     []string
		evalKeys []string
		cases    []fpCase
	}{
		{"sem_acquire", semAcquireScript, sk, nil, semCases},
		{"sem_release", semReleaseScript, sk, sk[:4], semRelCases},
		{"rw_read", loadScript("rw_read"), rk, nil, rwCases},
		{"rw_read_release", loadScript("rw_read_release"), rk, []string{rk[0], rk[2], rk[3], rk[4]}, rwRelCases},
		{"latch_set", latchSetScript, lk, nil, latchSetCases},
		{"latch_down", latchDownScript, lk, nil, latchDownCases},
		{"fair_acquire", fairAcquire, fk, nil, fairCases},
		{"fair_release", fairRelease, fk, nil, fairRelCases},
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

func (s *fpServer) run(t *testing.T, ctx context.Context, src string, keys, evalKeys []string, c fpCase, now time.Time) fpOutcome {
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
	if evalKeys == nil {
		evalKeys = keys
	}
	v, err := s.c.Eval(ctx, src, evalKeys, args...).Result()
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
	for _, k := range keyspace.WithoutClientRecords(keys) {
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
	lane.ParallelFast(t) // servers of its own
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
					got := s.run(t, ctx, full, sc.keys, sc.evalKeys, c, now)
					want := s.run(t, ctx, slow, sc.keys, sc.evalKeys, c, now)
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

package redistest

import (
	"context"
	"fmt"
	"io"
	"log"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// DriverLog is a go-redis logger that prints each distinct line at most a
// few times. go-redis logs every pool and Sentinel event through one
// process-wide logger; a test package that fails prints its whole stderr,
// and a Sentinel client's "sentinel: new master", repeated, filled the
// tail of a CI log in which the failing test's own lines were lost. Tests
// may set the process-wide logger (a library must not).
type DriverLog struct {
	mu   sync.Mutex
	out  *log.Logger
	max  int
	seen map[string]int // how many times each line was logged
}

// LimitGoRedisLog routes go-redis's log lines to w, each distinct line at
// most max times, and returns the logger so that a TestMain can print how
// many it dropped (Summary).
func LimitGoRedisLog(w io.Writer, max int) *DriverLog {
	l := newDriverLog(w, max)
	redis.SetLogger(l)
	return l
}

func newDriverLog(w io.Writer, max int) *DriverLog {
	return &DriverLog{out: log.New(w, "redis: ", log.LstdFlags), max: max, seen: map[string]int{}}
}

// Printf is go-redis's internal.Logging.
func (l *DriverLog) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimRight(fmt.Sprintf(format, v...), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[msg]++
	if l.seen[msg] <= l.max {
		l.out.Print(msg)
	}
}

// Summary says how many lines were dropped and which repeated most; ""
// when none were.
func (l *DriverLog) Summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type line struct {
		msg string
		n   int
	}
	var rep []line
	dropped := 0
	for msg, n := range l.seen {
		if n > l.max {
			rep = append(rep, line{msg, n})
			dropped += n - l.max
		}
	}
	if dropped == 0 {
		return ""
	}
	sort.Slice(rep, func(i, j int) bool { return rep[i].n > rep[j].n })
	var b strings.Builder
	fmt.Fprintf(&b, "go-redis: %d repeated log lines dropped (each line is printed at most %d times)", dropped, l.max)
	for i, r := range rep {
		if i == 5 {
			fmt.Fprintf(&b, "\n  ... and %d more distinct lines", len(rep)-i)
			break
		}
		fmt.Fprintf(&b, "\n  %d× %s", r.n, r.msg)
	}
	return b.String()
}

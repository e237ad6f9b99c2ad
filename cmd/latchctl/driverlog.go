package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// go-redis logs its pool's troubles ("connection pool: failed to dial
// after 5 attempts", ...) on the process's stderr by itself, through a
// process-wide logger: before latchctl's own error and after it, from its
// pool's goroutines. latchctl is a program, so it may set that logger
// (redis.SetLogger; a library must not): to driverLog, which drops the
// lines unless the command was given -v. rueidis, valkey-go and redigo
// log nothing of their own.
func init() { redis.SetLogger(driverLog) }

// driverLog is latchctl's logger of the drivers' own lines: shown on the
// running command's stderr, prefixed "latchctl: redis: ", with -v only.
var driverLog = &driverLogger{}

type driverLogger struct {
	mu sync.Mutex
	w  io.Writer // nil: dropped
}

// to sends the drivers' lines to w from now on (nil: drops them).
func (l *driverLogger) to(w io.Writer) {
	l.mu.Lock()
	l.w = w
	l.mu.Unlock()
}

// Printf is go-redis's internal.Logging.
func (l *driverLogger) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w != nil {
		msg := strings.TrimPrefix(strings.TrimRight(fmt.Sprintf(format, v...), "\n"), "redis: ")
		fmt.Fprintln(l.w, "latchctl: redis:", msg)
	}
}

// verboseFlag adds -v to fs: with it, the command's target shows the
// drivers' own log lines on stderr (see driverLog).
func (t *target) verboseFlag(fs *flag.FlagSet, stderr io.Writer) {
	fs.BoolVar(&t.verbose, "v", false, "show the Redis driver's own log lines (connection retries, ...) on stderr")
	t.stderr = stderr
}

// lockedWriter serializes writes: a command's own lines and the
// drivers' (written from their goroutines) go to the same stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

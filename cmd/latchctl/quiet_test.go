package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// latchctlProcess runs latchctl as a program of its own (this test binary,
// which TestMain turns into latchctl when LATCHCTL_TEST_MAIN is set): what
// a driver prints to the process's stderr by itself shows there.
func latchctlProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LATCHCTL_TEST_MAIN=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestDriverLogsOnlyWithV (issue 30, item 7): latchctl against an address
// nothing listens on says once that it could not connect, and nothing
// else: no driver's log lines (go-redis's pool prints "failed to dial
// after 5 attempts" to the process's stderr by itself) before or after its
// own error, whatever the driver. With -v the driver's lines are shown,
// through latchctl's own logger.
func TestDriverLogsOnlyWithV(t *testing.T) {
	addr := deadAddr(t)
	for _, driver := range []string{"goredis", "rueidis", "valkey", "redigo"} {
		code, out, errOut := latchctlProcess(t, "list", "-addr", addr, "-driver", driver)
		if code != 1 || out != "" || errOut != "latchctl: connect to "+addr+": dial tcp "+addr+": connect: connection refused\n" {
			t.Errorf("list -driver %s on a dead address: exit %d, stdout %q, stderr:\n%s", driver, code, out, errOut)
		}
	}
	code, _, errOut := latchctlProcess(t, "list", "-addr", addr, "-v")
	if code != 1 || !strings.Contains(errOut, "latchctl: redis: connection pool: failed to dial") || strings.Contains(errOut, "pool.go") {
		t.Errorf("list -v on a dead address: exit %d, want go-redis's lines through latchctl's logger; stderr:\n%s", code, errOut)
	}
}

// TestListSaysNothingFound (issue 30, item 7): list on a server with no
// primitive under the prefix says so (on stderr, so that stdout stays one
// line per primitive), and exits 0.
func TestListSaysNothingFound(t *testing.T) {
	m := miniredis.RunT(t)
	m.Set("unrelated", "x")
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"list", "-addr", m.Addr()}, &out, &errOut)
	want := `latchctl: no primitives under prefix "` + keyspace.DefaultPrefix + `" on ` + m.Addr() + "\n"
	if code != 0 || out.String() != "" || errOut.String() != want {
		t.Errorf("list on an empty server: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out.String(), errOut.String(), want)
	}
}

// TestKindVocabulary (issue 30, item 6): latchctl names kinds as spans,
// metrics and logs do (latchkit.Kind: fair_semaphore, semaphore, ...), in
// its output, help and messages; -kind takes those names, every
// latchkit.Kind whose keys the layout holds (fair_mutex, rwlock_write,
// redlock, ...), and the old spellings (fairsem, sem, rw).
func TestKindVocabulary(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	fair := must[primitives.Semaphore](t)(primitives.NewFairSemaphore(clienttest.For(t, e.b), "pool", 2, holdOpts...))
	sem := must[primitives.Semaphore](t)(primitives.NewSemaphore(clienttest.For(t, e.b), "slots", 2, holdOpts...))
	rw := must[primitives.RWLock](t)(primitives.NewRWLock(clienttest.For(t, e.b), "doc", holdOpts...))
	mu := must[primitives.Mutex](t)(primitives.NewMutex(clienttest.For(t, e.b), "m", holdOpts...))
	for _, acquire := range []func(context.Context) (interface{ Release(context.Context) error }, error){
		func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
			return fair.Acquire(ctx)
		},
		func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
			return sem.Acquire(ctx)
		},
		func(ctx context.Context) (interface{ Release(context.Context) error }, error) { return rw.Lock(ctx) },
		func(ctx context.Context) (interface{ Release(context.Context) error }, error) { return mu.Lock(ctx) },
	} {
		l, err := acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	for _, c := range []struct{ name, head string }{
		{"pool", "fair_semaphore pool: "},
		{"slots", "semaphore slots: "},
		{"doc", "rwlock doc: "},
		{"m", "mutex m: "},
	} {
		if out := e.mustRun(t, "inspect", c.name); !strings.HasPrefix(out, c.head) {
			t.Errorf("inspect %s: want %q first:\n%s", c.name, c.head, out)
		}
	}
	for flagValue, head := range map[string]string{
		"fair_semaphore": "fair_semaphore pool: ", "fairsem": "fair_semaphore pool: ", "fair_mutex": "fair_semaphore pool: ",
		"semaphore": "semaphore slots: ", "sem": "semaphore slots: ",
		"rwlock": "rwlock doc: ", "rw": "rwlock doc: ", "rwlock_write": "rwlock doc: ", "rwlock_read": "rwlock doc: ",
		"mutex": "mutex m: ", "redlock": "mutex m: ", "reentrant_mutex": "mutex m: ", "multilock": "mutex m: ",
	} {
		name := strings.Fields(head)[1]
		name = name[:len(name)-1]
		if code, out, errOut := e.latchctl(t, "inspect", name, "-kind", flagValue); code != 0 || !strings.HasPrefix(out, head) {
			t.Errorf("inspect %s -kind %s: exit %d, want %q first:\n%s%s", name, flagValue, code, head, out, errOut)
		}
	}
	if got, want := listHeads(e.mustRun(t, "list")), "rwlock          held       doc\nmutex           held       m\nfair_semaphore  held       pool\nsemaphore       held       slots\n"; got != want {
		t.Errorf("list:\n%s\nwant:\n%s", got, want)
	}
	code, _, errOut := e.latchctl(t, "inspect", "x", "-kind", "lock")
	if code != 2 || !strings.Contains(errOut, `-kind "lock": want mutex, rwlock, semaphore, fair_semaphore, election or latch`) {
		t.Errorf("-kind lock: exit %d, %s", code, errOut)
	}
	for _, cmd := range []string{"inspect", "release", "limit"} {
		_, _, help := e.latchctl(t, cmd, "-h")
		if !strings.Contains(help, "fair_semaphore") || strings.Contains(help, "|fairsem") || strings.Contains(help, "sem|") {
			t.Errorf("latchctl %s -h names kinds otherwise:\n%s", cmd, help)
		}
	}
	for _, k := range []string{"fair_semaphore", "fairsem"} {
		out := e.mustRun(t, "limit", "pool", "3", "-kind", k)
		if !strings.HasPrefix(out, "fair_semaphore pool: limit 3 stored") {
			t.Errorf("limit -kind %s: %s", k, out)
		}
	}
	if out := e.mustRun(t, "limit", "slots", "3"); !strings.HasPrefix(out, "semaphore slots: limit 3 stored") {
		t.Errorf("limit without -kind: %s", out)
	}
	if code, _, errOut := e.latchctl(t, "limit", "slots", "3", "-kind", "mutex"); code != 2 || !strings.Contains(errOut, "want semaphore or fair_semaphore") {
		t.Errorf("limit -kind mutex: exit %d, %s", code, errOut)
	}
	out := e.mustRun(t, "release", "pool", "-kind", "fairsem", "-force", "-confirm", "pool")
	if !strings.HasPrefix(out, "released fair_semaphore pool: ") {
		t.Errorf("release -kind fairsem:\n%s", out)
	}
}

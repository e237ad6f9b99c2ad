package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/redistest"
	"github.com/latchkit/latchkit/primitives"
)

// holdMain is the program the test binary becomes with
// LATCHCTL_TEST_HOLD=name set (see TestMain): a process that takes the
// Mutex LATCHCTL_TEST_LOCK on LATCHCTL_TEST_ADDR with a Client named
// name, prints "held <client id> <pid>", and holds it until its stdin
// closes.
func holdMain() {
	code := func() int {
		ctx := context.Background()
		rc := redis.NewClient(&redis.Options{Addr: os.Getenv("LATCHCTL_TEST_ADDR"), ContextTimeoutEnabled: true})
		defer rc.Close()
		cl, err := primitives.NewClient(goredis.New(rc), primitives.WithClientName(os.Getenv("LATCHCTL_TEST_HOLD")))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cl.Close(ctx)
		mu, err := primitives.NewMutex(cl, os.Getenv("LATCHCTL_TEST_LOCK"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		l, err := mu.Lock(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("held %s %d\n", cl.Identity().ID, os.Getpid())
		_, _ = io.Copy(io.Discard, os.Stdin)
		if err := l.Release(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}()
	os.Exit(code)
}

// TestInspectNamesHolderProcess (issue 41, item 1, "done when"): a lock
// held by another process, whose Client is named "invoice-worker-3", is
// named by latchctl inspect and list, themselves run as processes: the
// client's name, host and pid, since when (the server's time of the grant)
// and for how long.
func TestInspectNamesHolderProcess(t *testing.T) {
	s := redistest.Start(t)
	const name, lock = "invoice-worker-3", "invoice:42"
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), "LATCHCTL_TEST_HOLD="+name, "LATCHCTL_TEST_LOCK="+lock, "LATCHCTL_TEST_ADDR="+s.Addr)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := holder.Wait(); err != nil {
			t.Errorf("the holding process: %v", err)
		}
	}()
	var id string
	var pid int
	if _, err := fmt.Fscanf(bufio.NewReader(stdout), "held %s %d\n", &id, &pid); err != nil || pid != holder.Process.Pid {
		t.Fatalf("the holding process said %q %d (%v); its pid is %d", id, pid, err, holder.Process.Pid)
	}
	host, _ := os.Hostname()
	who := fmt.Sprintf("client=%s host=%s pid=%d", name, host, pid)
	line := regexp.MustCompile(`(?m)^  holder  [0-9a-f]{8}…  fence=([0-9]+)  ttl=\S+  ` + regexp.QuoteMeta(who) + `  since=(\S+) held=(\S+)$`)
	var out string
	deadline := time.Now().Add(10 * time.Second) // the record is written a second after the Client's first use
	for {
		code, o, errOut := latchctlProcess(t, "inspect", lock, "-addr", s.Addr)
		if code != 0 {
			t.Fatalf("inspect: exit %d: %s", code, errOut)
		}
		if out = o; line.MatchString(out) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	m := line.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("inspect does not name the holding process (%s):\n%s", who, out)
	}
	since, err := time.Parse("2006-01-02T15:04:05.000Z", m[2])
	held, herr := time.ParseDuration(m[3])
	if err != nil || herr != nil || time.Since(since) > 20*time.Second || held <= 0 || held > 20*time.Second || !strings.HasPrefix(m[1], fmt.Sprint(since.UnixMilli())) {
		t.Errorf("since %s, held %s: not the grant's server time (the fence %s) and the time since: %v %v", m[2], m[3], m[1], err, herr)
	}
	code, list, errOut := latchctlProcess(t, "list", "-addr", s.Addr)
	if code != 0 || !regexp.MustCompile(`(?m)^mutex +held +`+regexp.QuoteMeta(lock)+`  holders: `+regexp.QuoteMeta(fmt.Sprintf("%s@%s:%d", name, host, pid))+` since \S+ \(held \S+\)$`).MatchString(list) {
		t.Errorf("list: exit %d, does not name the holder:\n%s%s", code, list, errOut)
	}
}

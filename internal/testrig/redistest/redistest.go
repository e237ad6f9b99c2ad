// Package redistest starts real redis-server processes for tests: on
// 127.0.0.1 only, on a free port, without persistence, stopped (by pid)
// when the test ends. Tests never rely on a server left running.
//
// Without redis-server on PATH the tests that need it are skipped, unless
// LATCHKIT_REQUIRE_REDIS=1, which turns the skip into a failure (CI sets it).
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/internal/testrig/proc"
)

// Available reports whether redis-server is on PATH.
func Available() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Required reports whether LATCHKIT_REQUIRE_REDIS=1 is set.
func Required() bool { return os.Getenv("LATCHKIT_REQUIRE_REDIS") == "1" }

// Require skips t when redis-server (and, for a cluster, redis-cli) is
// missing, or fails it when LATCHKIT_REQUIRE_REDIS=1.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range append([]string{"redis-server"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			if Required() {
				t.Fatalf("%s is not on PATH and LATCHKIT_REQUIRE_REDIS=1", tool)
			}
			t.Skipf("%s is not on PATH (set LATCHKIT_REQUIRE_REDIS=1 to make this a failure)", tool)
		}
	}
}

// FreePort returns a port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// DeadAddr returns an address on 127.0.0.1 that nobody listened on a
// moment ago: a dial to it is refused.
func DeadAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// SilentAddr returns the address of a listener on 127.0.0.1 that accepts
// connections and never answers (a hung server): a dial succeeds, the
// client's handshake and commands wait. It and its connections close when
// t ends.
func SilentAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// Server is a redis-server process started by a test.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	Dir  string // working directory; the log is Dir/redis.log

	pre  []string // before the defaults: a config file, --sentinel
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a redis-server on a free loopback port, with extra args
// appended to its command line, waits until it answers PING, and stops it
// when t ends. It skips or fails t through Require first.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	Require(t)
	return startServer(t, t.TempDir(), nil, extra)
}

// startServer starts redis-server with pre (a config file, a mode flag)
// first on its command line, then the loopback and no-persistence
// settings, then extra, retrying on another port when the one picked was
// taken meanwhile.
func startServer(t testing.TB, dir string, pre, extra []string) *Server {
	t.Helper()
	var lastErr error
	for try := 0; try < 5; try++ {
		s := &Server{Port: FreePort(t), Dir: dir, pre: pre, args: extra}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
		// Most likely the port was taken between FreePort and now.
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

func (s *Server) start() error {
	args := append(append(s.pre[:len(s.pre):len(s.pre)],
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir,
		"--logfile", filepath.Join(s.Dir, "redis.log"),
		"--daemonize", "no"),
		s.args...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = proc.Attr()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server exited: %s%s", out.String(), s.Log())
		default:
		}
		err := ping(s.Addr)
		if err == nil {
			// The answer may come from another test's server that took
			// the port while this one failed to bind it (ports are reused
			// on a busy machine): only our own process counts.
			if pid, perr := processID(s.Addr); perr != nil || pid != cmd.Process.Pid {
				_ = cmd.Process.Kill()
				<-done
				return fmt.Errorf("port %d answered by process %d (%v), not ours (%d)", s.Port, pid, perr, cmd.Process.Pid)
			}
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not answer PING in 10s: %v\n%s", s.Addr, err, s.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends PING on a raw connection: a readiness probe that does not
// make a client log every refused dial while the server starts.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// processID asks the server at addr for its process id (INFO server), on a
// raw connection.
func processID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	header, err := r.ReadString('\n') // $<length>
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(header, "$")))
	if err != nil {
		return 0, fmt.Errorf("INFO answered %q", strings.TrimSpace(header))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server without process_id")
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// Pid is the server's process id, or 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Stop ends the server (SIGTERM, SIGKILL after 2s) and waits for it. It is
// idempotent.
func (s *Server) Stop() { s.end(syscall.SIGTERM, 2*time.Second) }

// Kill ends the server with SIGKILL and waits for it: its data is gone.
func (s *Server) Kill() { s.end(syscall.SIGKILL, 0) }

func (s *Server) end(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot exit
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
	s.mu.Lock()
	if s.cmd == cmd {
		s.cmd = nil
	}
	s.mu.Unlock()
}

// Pause stops the process (SIGSTOP): a hung server, connections open.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Restart starts the server again on the same port after Stop or Kill.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.end(syscall.SIGTERM, 2*time.Second)
	var err error
	for try := 0; try < 50; try++ { // the port may linger briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("restart on %s: %v", s.Addr, err)
}

// Do runs one command on a fresh connection (for checks and fault set-up:
// CLIENT KILL, INFO, CONFIG ...).
func (s *Server) Do(ctx context.Context, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialerRetries: 1, PoolSize: 1})
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// CommandStats parses INFO commandstats into command name -> calls, e.g.
// "evalsha" -> 12. Commands run inside scripts are counted too.
func (s *Server) CommandStats(ctx context.Context) (map[string]int64, error) {
	v, err := s.Do(ctx, "INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(fmt.Sprint(v)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if k, val, ok := strings.Cut(field, "="); ok && k == "calls" {
				n, _ := strconv.ParseInt(val, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out, sc.Err()
}

package resptest

// The deadline tests' rig: servers that never answer, a dialer that can be
// redirected, leak checks and clients of a server through a hole.

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// fullBacklog is a port on 127.0.0.1 whose listener never accepts and whose
// accept queue is full: the kernel drops new SYNs, so a dial hangs until
// its deadline ("dial tcp ...: i/o timeout"), as for an unreachable host.
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the queue until a dial hangs.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		if i == 16 {
			t.Fatal("the accept queue never filled")
		}
	}
	return addr
}

// redirector is a dialer (ClientOption.DialCtxFn) whose target can be moved: the client is
// made against a live server (NewClient dials at once), then moved
// to a hole, its connections cut so that its next calls redial.
type redirector struct {
	target atomic.Value // string
	mu     sync.Mutex
	conns  []net.Conn
}

func (r *redirector) dial(ctx context.Context, _ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", r.target.Load().(string))
	if err == nil {
		r.mu.Lock()
		r.conns = append(r.conns, c)
		r.mu.Unlock()
	}
	return c, err
}

func (r *redirector) moveTo(addr string) {
	r.target.Store(addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// quiesce waits until no goroutine started since ignore was taken is left:
// calls abandoned earlier have ended. the driver makes a call that finds its
// connection being dialed wait for that dial and return its outcome, so a
// call made while an abandoned one still dials would get the abandoned
// call's error (an "i/o timeout" before its own deadline, say) instead of
// showing what it does on its own.
func quiesce(t *testing.T, ignore goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := goleak.Find(ignore)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("abandoned calls still running: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// verifyNoLeaks checks, once t and its cleanups are done, that every
// goroutine started during t has ended within wait (abandoned dials end at
// the client's dial timeout).
func verifyNoLeaks(t *testing.T, wait time.Duration) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		deadline := time.Now().Add(wait)
		for {
			err := goleak.Find(ignore)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Error(err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// holeClient is a backend whose client was made against a live server
// and now dials hole; its first call after this redials. The dial timeout
// is a second (the default is 5 s) to keep the test short.
func holeClient(t *testing.T, d Driver, srv *redistest.Server, hole string) Backend {
	t.Helper()
	r := &redirector{}
	r.target.Store(srv.Addr)
	b := d.New(t, srv.Addr, r.dial, time.Second)
	// Calls whose context can end but has no deadline put the pipelined
	// connections in the background mode a busy client is in, where their
	// reader notices a cut connection at once. the driver picks one of its
	// pipelined connections at random for each call: make enough calls to
	// reach them all.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 32; i++ {
		if _, err := b.Eval(ctx, tryScript, []string{"warm"}, []string{"1"}); err != nil {
			t.Fatal(err)
		}
	}
	r.moveTo(hole)
	time.Sleep(100 * time.Millisecond) // let the client notice the cut
	return b
}

package backend_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// lateCtx is a context whose deadline has passed while its Err is still
// nil: the moment between a driver's socket deadline firing (the driver
// set it from the context's deadline) and the context's own timer.
type lateCtx struct {
	context.Context
	deadline time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c lateCtx) Err() error                  { return nil }

func noReply(error) (string, bool) { return "", false }

// netTimeout is what a dial or read whose socket deadline fired returns:
// "dial tcp 127.0.0.1:6379: i/o timeout", not matching
// context.DeadlineExceeded.
func netTimeout(op string) error {
	return &net.OpError{Op: op, Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6379}, Err: os.ErrDeadlineExceeded}
}

// TestWrapDeadlinePassed: a driver's I/O timeout that arrives once the
// call's deadline has passed but before its context reports it is the
// caller's deadline (context.DeadlineExceeded, still matching the driver's
// error), not an unreachable Redis. Before the deadline, it is
// ErrUnavailable and not DeadlineExceeded.
func TestWrapDeadlinePassed(t *testing.T) {
	for _, op := range []string{"dial", "read"} {
		cause := netTimeout(op)
		if errors.Is(cause, context.DeadlineExceeded) {
			t.Fatalf("the test's driver error %v already matches DeadlineExceeded", cause)
		}
		late := lateCtx{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
		err := backend.Wrap(late, cause, nil, noReply)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s timeout after the deadline: %v, want it to match context.DeadlineExceeded", op, err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("%s timeout after the deadline: %v, want it to match the driver's error", op, err)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("%s timeout after the deadline: %v, want the net.Error reachable", op, err)
		}

		early := lateCtx{Context: context.Background(), deadline: time.Now().Add(time.Hour)}
		err = backend.Wrap(early, cause, nil, noReply)
		if !errors.Is(err, backend.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s timeout before the deadline: %v, want ErrUnavailable only", op, err)
		}
	}
	// Without a deadline, an I/O timeout is the server's fault.
	err := backend.Wrap(context.Background(), netTimeout("read"), nil, noReply)
	if !errors.Is(err, backend.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timeout without a deadline: %v, want ErrUnavailable only", err)
	}
}

// TestWrapDoneKeepsClassification: an error classified as the context's
// (it ended, or its deadline passed) still matches what the driver's error
// says: ErrUnavailable for a connection failure, so that a retry loop or a
// Redlock instance timeout still reads it as Redis not reached (and a
// caller whose own context has time left tries again), and the
// *ReplyError of an error reply.
func TestWrapDoneKeepsClassification(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errors.New("connection refused"))}
	ended, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	late := lateCtx{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	for name, ctx := range map[string]context.Context{"ended": ended, "deadline passed": late} {
		err := backend.Wrap(ctx, refused, nil, noReply)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, refused) {
			t.Errorf("%s: connection refused: %v, want it to match DeadlineExceeded, ErrUnavailable and the driver's error", name, err)
		}
		reply := errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
		err = backend.Wrap(ctx, reply, nil, func(err error) (string, bool) { return err.Error(), true })
		var re *backend.ReplyError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &re) || !errors.Is(err, backend.ErrWrongType) {
			t.Errorf("%s: error reply: %v, want it to match DeadlineExceeded and the *ReplyError", name, err)
		}
		if errors.Is(err, backend.ErrUnavailable) {
			t.Errorf("%s: error reply: %v matches ErrUnavailable", name, err)
		}
	}
}

// TestWrapDriversOwnDeadline: a driver error matching a context error
// while the call's context is live is the driver's own deadline, not the
// caller's: rueidis returns context.DeadlineExceeded when the handshake of
// a new connection to a hung server times out, and a dial timeout matches
// context.DeadlineExceeded. It is ErrUnavailable (a waiting Lock rides it
// out) and does not match the context errors; once the call's context is
// done or past its deadline, it is the caller's, untouched.
func TestWrapDriversOwnDeadline(t *testing.T) {
	expired, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	_, dialErr := (&net.Dialer{}).DialContext(expired, "tcp", "127.0.0.1:1")
	if !errors.Is(dialErr, context.DeadlineExceeded) {
		t.Fatalf("dial with an expired context: %v, want an error matching DeadlineExceeded", dialErr)
	}
	for _, c := range []struct {
		what string
		err  error
	}{
		{"context.DeadlineExceeded (rueidis: the handshake timed out)", context.DeadlineExceeded},
		{"context.Canceled", context.Canceled},
		{"a dial timeout", dialErr},
	} {
		err := backend.Wrap(context.Background(), c.err, nil, noReply)
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Errorf("%s with the call's context live: %v, want ErrUnavailable", c.what, err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Errorf("%s with the call's context live: %v matches a context error", c.what, err)
		}
		if err.Error() != backend.ErrUnavailable.Error()+": "+c.err.Error() {
			t.Errorf("%s: %q does not say what the driver said", c.what, err)
		}
	}
	var ne net.Error
	if err := backend.Wrap(context.Background(), dialErr, nil, noReply); !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("dial timeout: %v, want the net.Error reachable", err)
	}

	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	late := lateCtx{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	for _, c := range []struct {
		what string
		ctx  context.Context
		err  error
	}{
		{"canceled", canceled, context.Canceled},
		{"expired", expired, context.DeadlineExceeded},
		{"past its deadline, its timer not fired", late, context.DeadlineExceeded},
	} {
		if err := backend.Wrap(c.ctx, c.err, nil, noReply); err != c.err {
			t.Errorf("%s context, the driver says %v: %v, want the context's error untouched", c.what, c.err, err)
		}
	}
}

// TestWrapClusterTransientReplies: the replies a Redis Cluster or a
// failing-over server gives before running a command (a slot moving or
// migrating, the cluster down, a server loading its data or demoted to a
// replica), or that a server gives a script before its first write while
// it cannot take writes (out of memory, saves failing) or runs another
// script (busy), are transient: ErrUnavailable, so that a waiting Lock and the
// renewer ride them out, never a *ReplyError, which says the script ran
// and refused. Any other error reply stays a *ReplyError.
func TestWrapClusterTransientReplies(t *testing.T) {
	reply := func(err error) (string, bool) { return err.Error(), true }
	for _, msg := range []string{
		"MOVED 3999 127.0.0.1:6381",
		"ASK 3999 127.0.0.1:6381",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down",
		"CLUSTERDOWN Hash slot not served",
		"LOADING Redis is loading the dataset in memory",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"READONLY You can't write against a read only replica.",
		"NOREPLICAS Not enough good replicas to write.",
		// Issue 38, finding 9: a server out of memory under maxmemory
		// (OOM), one whose saves fail (MISCONF) and one running a script
		// past busy-reply-threshold (BUSY) refuse a script before its
		// first write, and pass.
		"OOM command not allowed when used memory > 'maxmemory'. script: 593876a7cc5ec5655277b36e51746327fa732846, on @user_script:30.",
		"OOM command not allowed when used memory > 'maxmemory'.",
		"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.",
		"MISCONF Errors writing to the AOF file: No space left on device",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
	} {
		cause := errors.New(msg)
		err := backend.Wrap(context.Background(), cause, nil, reply)
		var re *backend.ReplyError
		if !errors.Is(err, backend.ErrUnavailable) || errors.As(err, &re) {
			t.Errorf("%q: %v, want ErrUnavailable and no *ReplyError", msg, err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("%q: %v, want the driver's error reachable", msg, err)
		}
	}
	for _, msg := range []string{
		"ERR Error running script (call to f_x): @user_script:1: user_script:1: bad",
		"WRONGTYPE Operation against a key holding the wrong kind of value",
		"NOSCRIPT No matching script. Please use EVAL.",
		"ERR unknown command 'MOVEDX'",
		"BUSYKEY Target key name already exists.",
		"BUSYGROUP Consumer Group name already exists",
		"OOMX not a reply Redis gives",
	} {
		err := backend.Wrap(context.Background(), errors.New(msg), nil, reply)
		var re *backend.ReplyError
		if errors.Is(err, backend.ErrUnavailable) || !errors.As(err, &re) {
			t.Errorf("%q: %v, want a *ReplyError and not ErrUnavailable", msg, err)
		}
	}
}

package backend

import (
	"context"
	"errors"
	"strings"
	"time"
)

var (
	// ErrUnavailable marks a failure to reach the server: a refused or
	// broken connection, an I/O timeout, a pool exhausted. The operation
	// may or may not have been applied.
	ErrUnavailable = errors.New("backend: redis unavailable")
	// ErrClosed marks an operation on a client that was closed.
	ErrClosed = errors.New("backend: client closed")
	// ErrWrongType matches a *ReplyError saying a key holds a value of the
	// wrong type or format (WRONGTYPE, or a counter that is not an integer).
	ErrWrongType = errors.New("backend: key holds the wrong kind of value")
	// ErrInvalid marks a bad argument (a nil context, a nil script): the
	// call was refused before anything was sent. It is
	// latchkit.ErrInvalid, the error of every bad argument in latchkit.
	ErrInvalid = errors.New("latchkit: invalid argument")
)

// ReplyError is an error reply from the server: a script error, an error
// raised by a command inside a script, or a refused command.
type ReplyError struct {
	Msg string
}

func (e *ReplyError) Error() string {
	if e == nil {
		return "redis: <nil ReplyError>"
	}
	return "redis: " + e.Msg
}

// Is reports whether the reply says a key held the wrong kind of value.
func (e *ReplyError) Is(target error) bool {
	if e == nil || target != ErrWrongType {
		return false
	}
	// Match substrings, never prefixes: Redis and miniredis word errors
	// raised inside Lua differently.
	return strings.Contains(e.Msg, "WRONGTYPE") || strings.Contains(e.Msg, "not an integer")
}

// Error is how adapters wrap a driver error: it unwraps to both the driver's
// error and the sentinel that classifies it (ErrUnavailable, ErrClosed,
// a *ReplyError, or the context's error).
type Error struct {
	Class error // ErrUnavailable, ErrClosed, a *ReplyError, context.Canceled, ...
	Cause error // the driver's error, as it returned it
}

func (e *Error) Error() string {
	switch {
	case e == nil:
		return "backend: <nil Error>"
	case e.Class == nil && e.Cause == nil:
		return "backend: unclassified error"
	case e.Class == nil:
		return e.Cause.Error()
	case e.Cause == nil || e.Class == e.Cause:
		return e.Class.Error()
	}
	if _, ok := e.Class.(*ReplyError); ok {
		return e.Class.Error()
	}
	return e.Class.Error() + ": " + e.Cause.Error()
}

// Unwrap returns the classification and the driver's error.
func (e *Error) Unwrap() []error {
	if e == nil {
		return nil
	}
	if e.Cause == nil {
		return []error{e.Class}
	}
	return []error{e.Class, e.Cause}
}

// Wrap classifies a driver error for an adapter (nil stays nil): the
// result matches ErrClosed when isClosed (which may be nil) says so, a
// *ReplyError when reply (which may be nil) returns the server's message
// and true, and ErrUnavailable otherwise, a reply saying the command cannot
// run now included. It also matches ctx's error once ctx is done or past
// its deadline; a driver's own timeout before then is ErrUnavailable. A nil
// ctx is taken as one that never ends.
func Wrap(ctx context.Context, err error, isClosed func(error) bool, reply func(error) (string, bool)) error {
	if err == nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if reply == nil {
		reply = func(error) (string, bool) { return "", false }
	}
	var be *Error
	if errors.As(err, &be) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if ctx.Err() == nil && !deadlinePassed(ctx) {
			return &Error{Class: ErrUnavailable, Cause: ownDeadline{err}}
		}
		return err
	}
	e := &Error{Class: ErrUnavailable, Cause: err}
	if isClosed != nil && isClosed(err) {
		e.Class = ErrClosed
	} else if msg, ok := reply(err); ok && !transientReply(msg) {
		e.Class = &ReplyError{Msg: msg}
	}
	switch {
	case ctx.Err() != nil:
		return &Error{Class: ctx.Err(), Cause: e}
	case deadlinePassed(ctx):
		return &Error{Class: context.DeadlineExceeded, Cause: e}
	}
	return e
}

// transientReplies are the prefixes of the error replies a server gives
// before running a command it cannot run now: a Cluster's slot that moved
// (MOVED), is migrating (ASK, and TRYAGAIN for keys split between the two
// nodes), or is not served (CLUSTERDOWN); a server loading its data
// (LOADING), a replica cut from its master (MASTERDOWN), a master demoted
// to a replica by a failover (READONLY), or one short of the replicas its
// min-replicas-to-write asks for (NOREPLICAS); a server running another
// script past busy-reply-threshold (BUSY). The drivers follow redirects and
// retry some of these a few times; what is left when they stop is an
// outage that passes, not a refusal.
//
// So are the replies of a server that cannot take writes for a while: its
// memory at maxmemory under the noeviction policy (OOM), or its saves
// failing (MISCONF). Redis refuses a script's write command with them
// (scriptVerifyOOM and scriptVerifyWriteCommandAllow in its script.c)
// only in a state it is in from the script's start: OOM only while the
// script has run no write (a write it then makes is let through), MISCONF
// at every write. So a script that got either wrote nothing (a write it
// ran under redis.pcall and was refused included), and running it again
// once the server takes writes is safe.
var transientReplies = []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY", "NOREPLICAS", "BUSY ", "OOM ", "MISCONF "}

// transientReply reports whether an error reply is one of
// transientReplies: Wrap classifies it as ErrUnavailable (the driver's
// error still reachable), not as a *ReplyError, which says the command
// ran and refused. A waiting acquisition and the renewer try again; a
// single attempt reports Redis unavailable, and, as for any unavailable
// Redis, what the attempt may have left is given back.
func transientReply(msg string) bool {
	for _, p := range transientReplies {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// ownDeadline is a driver's error that matches a context error while the
// call's context is live (see Wrap): it reads as the driver's error and
// errors.As reaches into it, but it matches neither context.DeadlineExceeded
// nor context.Canceled, which would say the caller's context ended.
type ownDeadline struct{ err error }

func (e ownDeadline) Error() string      { return e.err.Error() }
func (e ownDeadline) As(target any) bool { return errors.As(e.err, target) }

// deadlinePassed reports whether ctx has a deadline that is not in the
// future.
func deadlinePassed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

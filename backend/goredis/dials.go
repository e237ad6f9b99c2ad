package goredis

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
)

// A call go-redis cannot connect for ends, when its context ends first,
// with no more than the context's error: the client dials on a goroutine
// of its pool's, and the caller waiting for the connection (or sleeping
// between the client's own retries of the command) is handed ctx.Err(),
// the dial's error dropped. One call through a client as most users
// configure it lasts about 1.7 s against a dead address (4 tries of the
// command, each dialing 5 times 100 ms apart), so a caller with a shorter
// deadline would learn only that its deadline passed, not that Redis
// could not be reached. The other drivers say both (backend.Wrap of the
// refused dial, its context done).
//
// So the Backend watches the client's dials: a dialWatch, added to the
// client as a redis.Hook, keeps the outcome of the latest dial, and a call
// that ends with its context's error after a dial made since it began
// failed (the latest one to end) is reported as Redis unavailable too,
// naming that dial's error (see unreached).

// dialWatch is a redis.Hook that records the outcome of the latest dial of
// the client (or, for a ClusterClient, of any of its node clients) it is
// added to. It hooks dials only: commands and pipelines run as if it were
// not there.
type dialWatch struct {
	last atomic.Pointer[dialOutcome]
}

// dialOutcome is how a dial ended: when, and its error (nil: connected).
type dialOutcome struct {
	at  time.Time
	err error
}

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		// A dial go-redis cancelled itself (the pool gave up waiting
		// for it) says nothing about the server: the outcome before
		// it stands.
		if err == nil || !errors.Is(err, context.Canceled) {
			w.last.Store(&dialOutcome{at: time.Now(), err: err})
		}
		return conn, err
	}
}

// ProcessHook and ProcessPipelineHook return nil: go-redis then leaves the
// chain as it was, without a call through this hook per command.
func (*dialWatch) ProcessHook(redis.ProcessHook) redis.ProcessHook { return nil }

func (*dialWatch) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return nil
}

// failedSince returns the error of the latest dial to end if it failed and
// ended at or after start; nil otherwise (no dial since start, or the
// latest one connected). w may be nil: nothing watched.
func (w *dialWatch) failedSince(start time.Time) error {
	if w == nil {
		return nil
	}
	d := w.last.Load()
	if d == nil || d.err == nil || d.at.Before(start) {
		return nil
	}
	return d.err
}

// watches holds the dialWatch of every client a Backend was made over, so
// that a client gets one hook however many Backends are made over it. The
// keys are weak pointers to the clients (weak.Pointer[redis.Client] or
// weak.Pointer[redis.ClusterClient]): an entry does not keep its client
// alive, and goes once the client is collected.
var watches struct {
	mu sync.Mutex
	m  map[any]*dialWatch
}

// watchDials returns the dialWatch of c, adding it to c the first time: to
// a *redis.Client (a Sentinel failover client included) itself, and to
// every node client a *redis.ClusterClient creates from now on
// (OnNewNode; a ClusterClient's own hooks do not see its nodes' dials). It
// returns nil for other clients, which are not watched: a *redis.Ring
// (Validate refuses it) and any type but go-redis's own (a wrapper, whose
// client cannot be told apart from another's).
func watchDials(c redis.UniversalClient) *dialWatch {
	switch c := c.(type) {
	case *redis.Client:
		return watchOnce(c, func(w *dialWatch) { c.AddHook(w) })
	case *redis.ClusterClient:
		return watchOnce(c, func(w *dialWatch) {
			c.OnNewNode(func(node *redis.Client) { node.AddHook(w) })
		})
	}
	return nil
}

// watchOnce returns c's dialWatch from watches, or makes one, installs it
// with add and keeps it.
func watchOnce[C any](c *C, add func(*dialWatch)) *dialWatch {
	k := weak.Make(c)
	watches.mu.Lock()
	defer watches.mu.Unlock()
	if w := watches.m[k]; w != nil {
		return w
	}
	if watches.m == nil {
		watches.m = make(map[any]*dialWatch)
	}
	w := new(dialWatch)
	add(w)
	watches.m[k] = w
	runtime.AddCleanup(c, func(k weak.Pointer[C]) {
		watches.mu.Lock()
		delete(watches.m, k)
		watches.mu.Unlock()
	}, k)
	return w
}

// unreached returns err, the error of a call that began at start, saying
// also that Redis could not be reached when the call ended with its
// context's error alone (ctx done or past its deadline, err not already
// ErrUnavailable) while the latest dial of the client, made since the call
// began, failed. The error then matches the context's error as before, and
// backend.ErrUnavailable and the dial's error beside it. Any other err is
// returned as it is.
//
// The dial may have been another call's on the same client: it still says
// the server could not be reached while this call waited. A call that
// made no dial of its own (its connections were in the pool, or the pool,
// after PoolSize dials in a row failed, hands out the last dial's error
// without dialing) ends with what go-redis said, which names the
// connection's error unless the context's end cut a retry's pause short.
func (b *adapter) unreached(ctx context.Context, start time.Time, err error) error {
	if err == nil || b.dials == nil || !ctxEnded(ctx) || errors.Is(err, backend.ErrUnavailable) ||
		!(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return err
	}
	dial := b.dials.failedSince(start)
	if dial == nil {
		return err
	}
	return &unreachedError{err: err, dial: &backend.Error{Class: backend.ErrUnavailable, Cause: dial}}
}

// ctxEnded reports whether ctx is done or its deadline has passed (its
// timer may fire a moment later).
func ctxEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// unreachedError is a call's context error (err, as go-redis or
// backend.Await returned it) with the failed dial that kept the call from
// Redis (dial, classified ErrUnavailable).
type unreachedError struct {
	err  error
	dial *backend.Error
}

func (e *unreachedError) Error() string {
	return e.err.Error() + " (last dial: " + e.dial.Error() + ")"
}

func (e *unreachedError) Unwrap() []error { return []error{e.err, e.dial} }

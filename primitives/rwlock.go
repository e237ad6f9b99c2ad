package primitives

import (
	"context"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// RWLock is held by many readers or by one writer.
type RWLock interface {
	// RLock waits until a read lease is granted or ctx is done.
	RLock(ctx context.Context) (latchkit.Lease, error)
	// TryRLock makes one attempt at a read lease.
	TryRLock(ctx context.Context) (latchkit.Lease, error)
	// Lock waits until the write lease is granted or ctx is done.
	Lock(ctx context.Context) (latchkit.Lease, error)
	// TryLock makes one attempt at the write lease.
	TryLock(ctx context.Context) (latchkit.Lease, error)
}

// The RWLock scripts (lua/rw_*.lua; keys in rw_read.lua). A reader's
// extend and TTL are the Semaphore's, given the readers and fences as
// its KEYS and the annotations as a companion (see rwReader.renewCall).
var (
	rwRead         = loadScript("rw_read")
	rwWrite        = loadScript("rw_write")
	rwWithdraw     = loadScript("rw_withdraw")
	rwReadRelease  = loadScript("rw_read_release")
	rwWriteRelease = loadScript("rw_write_release")
	rwReadExtend   = semExtend
	rwWriteExtend  = loadScript("rw_write_extend")
	rwReadTTL      = semTTL
	rwWriteTTL     = loadScript("rw_write_ttl")
)

type rwlock struct {
	b       backend.Backend
	name    string
	cfg     kit.Config
	keys    []string
	channel string
	chans   []string // {channel}
	ttlArg  string
	intent  string

	readFn, writeFn, tryWriteFn func(context.Context, *kit.Attempt) (latchkit.Lease, error)
	readBackFn, writeBackFn     func(context.Context, string) error
}

// NewRWLock returns a readers-writer lock named name on b: many readers or
// one writer. Each reader holds its own expiry (in the server's time), so a
// crashed reader blocks writers for at most its TTL. It prefers writers: a
// writer that finds the lock read-held leaves an intent that keeps new
// readers out until it has had its turn, so a stream of readers cannot
// starve it; an intent outlives its writer's last attempt by the waiter
// timeout (WithWaiterTimeout), so an abandoned writer does not block readers
// for longer. Read and write grants take fences from one counter.
func NewRWLock(cl *Client, name string, opts ...Option) (RWLock, error) {
	b := kit.BackendOf(cl.core())
	cfg, err := newConfig(latchkit.KindReadLock, cl.core(), name, opts)
	if err != nil {
		return nil, err
	}
	channel := keyspace.RWLayout.Channel(cfg.Prefix, name)
	rw := &rwlock{
		b: b, name: name, cfg: cfg,
		keys:    keyspace.RWLayout.KeysOf(cfg.Prefix, name),
		channel: channel,
		chans:   []string{channel},
		ttlArg:  kit.Ms(cfg.TTL),
		intent:  kit.Ms(cfg.WaiterTimeout),
	}
	rw.readFn = kit.ScriptAttempt(b, rwRead, rw.keys, []string{rw.ttlArg}, rwReader{rw}, latchkit.KindReadLock, name, &rw.cfg)
	rw.writeFn = kit.ScriptAttempt(b, rwWrite, rw.keys, []string{rw.ttlArg, rw.intent}, rwWriter{rw}, latchkit.KindWriteLock, name, &rw.cfg)
	rw.tryWriteFn = kit.ScriptAttempt(b, rwWrite, rw.keys, []string{rw.ttlArg, "0"}, rwWriter{rw}, latchkit.KindWriteLock, name, &rw.cfg)
	// The give-backs of an acquisition that ended without a grant: a read
	// lease the token may hold; a writer's intent, and the write lock it may
	// hold.
	rw.readBackFn = func(ctx context.Context, token string) error {
		_, err := rw.b.Eval(ctx, rwReadRelease, rw.keys, []string{token, rw.channel, "1"})
		return err
	}
	rw.writeBackFn = func(ctx context.Context, token string) error {
		_, err := rw.b.Eval(ctx, rwWithdraw, rw.keys, []string{token, rw.channel})
		return err
	}
	return rw, nil
}

func (rw *rwlock) RLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.acquire(ctx, latchkit.KindReadLock, false)
}

func (rw *rwlock) TryRLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.acquire(ctx, latchkit.KindReadLock, true)
}

func (rw *rwlock) Lock(ctx context.Context) (latchkit.Lease, error) {
	return rw.acquire(ctx, latchkit.KindWriteLock, false)
}

func (rw *rwlock) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.acquire(ctx, latchkit.KindWriteLock, true)
}

func (rw *rwlock) acquire(ctx context.Context, kind latchkit.Kind, try bool) (latchkit.Lease, error) {
	a := kit.Acquisition{Op: "lock", Kind: kind, Name: rw.name, Chans: rw.chans, Try: try,
		Attempt: rw.readFn, GiveBack: rw.readBackFn}
	if kind == latchkit.KindWriteLock {
		a.Attempt, a.GiveBack, a.Queues = rw.writeFn, rw.writeBackFn, true
		if try {
			a.Attempt = rw.tryWriteFn // a TryLock does not queue
		}
	}
	return rw.cfg.Acquire(ctx, rw.b, a)
}

type rwReader struct{ *rwlock }

func (r rwReader) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return kit.ExtendBy(ctx, r, &r.cfg, token, ttl)
}

func (r rwReader) Release(ctx context.Context, token string) (bool, error) {
	return kit.Flag(r.b.Eval(ctx, rwReadRelease, r.keys, []string{token, r.channel}))
}

// Pass frees the read lease token was just granted, without ending the
// acquisition (see kit.Passer): rw_read_release with "0" as its give-back
// flag, which does not remember the token.
func (r rwReader) Pass(ctx context.Context, token string) (bool, error) {
	_, err := r.b.Eval(ctx, rwReadRelease, r.keys, []string{token, r.channel, "0"})
	return true, err
}

func (r rwReader) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	return kit.Remaining(r.b.Eval(ctx, rwReadTTL, r.keys[:1], []string{token}))
}

type rwWriter struct{ *rwlock }

func (w rwWriter) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return kit.ExtendBy(ctx, w, &w.cfg, token, ttl)
}

func (w rwWriter) Release(ctx context.Context, token string) (bool, error) {
	return kit.Flag(w.b.Eval(ctx, rwWriteRelease, w.keys, []string{token, w.channel}))
}

// Pass frees the write lock token was just granted, without ending the
// acquisition (see kit.Passer): rw_write_release with "0" as its pass flag,
// which does not remember the token.
func (w rwWriter) Pass(ctx context.Context, token string) (bool, error) {
	_, err := w.b.Eval(ctx, rwWriteRelease, w.keys, []string{token, w.channel, "0"})
	return true, err
}

func (w rwWriter) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	return kit.Remaining(w.b.Eval(ctx, rwWriteTTL, w.keys[1:2], []string{token}))
}

// RenewCall is rwReader's one extend call: readers and their fences as
// KEYS; annotations as a companion.
func (r rwReader) RenewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return r.b, rwReadExtend, []string{r.keys[0], r.keys[4]}, kit.ExtendArgs(token, ttl, r.keys[6], ""), r.cfg.AckReplicas == 0
}

// RenewCall is rwWriter's one extend call: the writer as KEYS;
// annotations and fences as companions.
func (w rwWriter) RenewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return w.b, rwWriteExtend, w.keys[1:2], kit.ExtendArgs(token, ttl, w.keys[6], w.keys[4]), w.cfg.AckReplicas == 0
}

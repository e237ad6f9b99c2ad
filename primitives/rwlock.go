package primitives

import (
	"context"

	"github.com/latchkit/latchkit"
	pkit "github.com/latchkit/latchkit/kit"
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

// rwLayout is an RWLock's keys (keyspace.RWLayout's scripted ones, and its
// channel: TestKitLayoutsAreKeyspaces). Its readers' key is named holders, as
// the Semaphore's, whose extend and TTL scripts its readers share.
var rwLayout = pkit.Layout{Kind: latchkit.KindReadLock, Channel: ":rw:rel", Keys: []pkit.Key{
	{Name: "holders", Suffix: ":rw:readers", Type: "zset"},
	{Name: "writer", Suffix: ":rw:writer", Type: "string"},
	{Name: "waiting", Suffix: ":rw:waiting", Type: "zset"},
	{Name: "gone", Suffix: ":rw:released", Type: "zset"},
	{Name: "who", Suffix: ":rw:who", Type: "hash"},
}}

// The RWLock scripts (lua/rw_*.lua; keys in rw_read.lua), on package kit.
// A reader's extend and TTL are the Semaphore's, given the readers as
// their KEYS and the annotations as a companion.
var (
	rwRead     = pkit.MustLoad(luaFiles, &rwLayout, "rw_read")
	rwWrite    = pkit.MustLoad(luaFiles, &rwLayout, "rw_write")
	rwWithdraw = pkit.MustLoad(luaFiles, &rwLayout, "rw_withdraw")
	rwReader   = pkit.Holder{
		Extend:     pkit.MustLoad(luaFiles, &rwLayout, "sem_extend"),
		Release:    pkit.MustLoad(luaFiles, &rwLayout, "rw_read_release"),
		TTL:        pkit.MustLoad(luaFiles, &rwLayout, "sem_ttl"),
		Companions: []string{"who"},
	}
	rwWriter = pkit.Holder{
		Extend:     pkit.MustLoad(luaFiles, &rwLayout, "rw_write_extend"),
		Release:    pkit.MustLoad(luaFiles, &rwLayout, "rw_write_release"),
		TTL:        pkit.MustLoad(luaFiles, &rwLayout, "rw_write_ttl"),
		Companions: []string{"who"},
	}
)

// rwlock is written on package kit alone (TestBuiltinsOnThePublicKit).
type rwlock struct{ s *pkit.Site }

// NewRWLock returns a readers-writer lock named name on cl's Redis: many
// readers or one writer. Each reader holds its own expiry (in the server's
// time), so a crashed reader blocks writers for at most its TTL. It prefers
// writers: a writer that finds the lock read-held leaves an intent that
// keeps new readers out until it has had its turn, so a stream of readers
// cannot starve it; an intent outlives its writer's last attempt by the
// waiter timeout (WithWaiterTimeout), so an abandoned writer does not block
// readers for longer. Read and write grants take their fences from one
// sequence, each above every earlier one of the name.
func NewRWLock(cl *Client, name string, opts ...Option) (RWLock, error) {
	s, err := pkit.NewSite(cl, &rwLayout, name, kitOptions(opts)...)
	if err != nil {
		return nil, err
	}
	return &rwlock{s: s}, nil
}

func (rw *rwlock) RLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.s.Acquire(ctx, pkit.Acquisition{Op: "RLock", Kind: latchkit.KindReadLock, Attempt: rwRead, Holder: &rwReader})
}

func (rw *rwlock) TryRLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.s.Acquire(ctx, pkit.Acquisition{Op: "RLock", Kind: latchkit.KindReadLock, Try: true, Attempt: rwRead, Holder: &rwReader})
}

// Lock: a writer that finds the lock held leaves its intent (Queues),
// given back by rw_withdraw with the write lock it may hold.
func (rw *rwlock) Lock(ctx context.Context) (latchkit.Lease, error) {
	return rw.s.Acquire(ctx, pkit.Acquisition{Op: "Lock", Kind: latchkit.KindWriteLock, Attempt: rwWrite, Holder: &rwWriter, GiveBack: rwWithdraw, Queues: true})
}

func (rw *rwlock) TryLock(ctx context.Context) (latchkit.Lease, error) {
	return rw.s.Acquire(ctx, pkit.Acquisition{Op: "Lock", Kind: latchkit.KindWriteLock, Try: true, Attempt: rwWrite, Holder: &rwWriter, GiveBack: rwWithdraw})
}

// Package primitives is latchkit: distributed locks, semaphores, leader
// election and a countdown latch over Redis, with fencing tokens, leases
// that renew themselves and say when they are lost, and waiters woken by
// the release they wait for.
//
// # Use
//
// Make one Client per Redis deployment, over an adapter's backend; make
// the primitives from it; close it on shutdown:
//
//	client, err := primitives.NewClient(goredis.New(rdb)) // or rueidis, valkey, redigo
//	if err != nil { ... }
//	defer client.Close(shutdownCtx) // releases what is held, stops every goroutine
//
//	mu, err := primitives.NewMutex(client, "invoice:42")
//	lease, err := mu.Lock(ctx) // waits until granted, or ctx ends
//	if err != nil { ... }
//	defer lease.Release(ctx)
//	err = store.Write(lease.Context(), lease.Fence(), invoice)
//
// A grant is a Lease. Its Fence strictly increases from one grant of a
// name to the next: pass it to what the lock protects, so that it refuses
// a write from a holder that lost the lock. Its Context ends as soon as
// the lease is released or known lost (a renewal found it gone, or Redis
// could not be reached before its time ran out). Leases renew themselves
// until released (WithAutoExtend).
//
// # The primitives
//
//   - NewMutex: one holder at a time; waiting Locks are served in arrival
//     order, handed the lock by the release.
//   - NewReentrantMutex: a Mutex its owner (WithOwner) re-enters.
//   - NewFairMutex: a FIFO lock (a FairSemaphore of one permit).
//   - NewMultiLock: several names, all or none, without deadlock.
//   - NewRWLock: many readers or one writer; a waiting writer is not
//     starved by readers.
//   - NewSemaphore, NewFairSemaphore: at most limit permits, weighted
//     (AcquireN), with a limit stored in Redis (SetLimit); the fair one in
//     arrival order.
//   - NewRedlock: a lock over N independent Redis instances, by quorum.
//   - NewElection: one leader at a time (Campaign, Observe, Run).
//   - NewLatch: a countdown latch (TrySetCount, CountDown, Wait).
//
// Options are typed per family: Option for the locks, semaphores and
// elections, RedlockOption and LatchOption for the others; one that does
// not apply does not compile.
//
// # Errors
//
// Match errors with errors.Is: ErrNotAcquired (a Try call found the
// primitive held), ErrLeaseLost (the lease expired or was taken),
// ErrInvalid (a bad argument; nothing was changed in Redis),
// ErrUnavailable (Redis was not reached: the call may or may not have
// run), ErrClosed (the Client was closed), ErrNotReplicated
// (WithReplicaAck) and ErrNoLeader. Errors of calls are
// *latchkit.OpError, naming the operation, kind and name.
//
// # What it promises
//
//   - At most one holder (limit holders) at a time while Redis keeps its
//     data; every acquire, extend and release is one Lua script timed by
//     the server's clock and checked against the holder's token.
//   - Fences strictly increase per name, across expiry, FLUSHALL and
//     failover, as long as the server's clock does not step back by more
//     than the time between two grants of the name.
//   - Loss is told on time: a lease's Context ends by its holder's clock
//     before the server could grant the primitive to anyone else.
//   - A retried call whose reply was lost counts once.
//
// # What it does not promise
//
//   - A Redis that loses a grant (a restart without persistence, a
//     failover to a replica that had not received it, unless
//     WithReplicaAck) lets a second holder in; fences are the defence.
//   - A process paused past its TTL finds out only when it runs again:
//     check the fence where the work lands.
//   - An expired lock goes to whichever attempt comes first, not to the
//     oldest waiter.
//
// The design, the guarantees in depth and the operations guide are in the
// repository's docs folder.
package primitives

// How it is laid out (for contributors): one file per primitive
// (mutex.go, reentrant.go, semaphore.go, fair.go, rwlock.go, multilock.go,
// redlock.go, latch.go, election.go; a second, such as
// election_observe.go, where one would pass 450 lines), each making its
// keys from its layout
// (internal/keyspace) and running its scripts (lua/*.lua, loaded by
// scripts.go). Beside them are the Client (client.go), the options
// (options.go) and this file. What every primitive shares is in
// internal/kit: the Client's machinery, the configuration, the one wait
// loop that every Lock and Acquire (and a latch's Wait) goes through
// (attempt, classify, wait on a pubsub.Wake or the retry policy, give back
// on a give-up), the lease and its renewer, the script loader with the
// helpers of its lua/prelude.lua, and the decoding of script replies.

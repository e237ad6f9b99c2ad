package kit

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// The renewer renews every auto-extended lease of one Client's backend (a
// Client has a second one for the leases renewed by their holder's extend):
// one goroutine (running only while it has leases) keeps them in a
// min-heap by the time of their next renewal and, when the earliest is due,
// renews every lease due within a small slack of it. Its scheduling never
// waits for I/O: each renewal runs on a goroutine of its own or of its
// chunk, and a lease has at most one renewal in flight.
//
//   - Leases whose renewal is one script call (RenewCaller) go out in
//     chunks of at most renewChunk calls through backend.Batcher (one
//     pipeline each; without a Batcher, concurrent Evals). A chunk waits
//     for its replies until its earliest lease's deadline. One server
//     answers the whole chunk: when it hangs, every lease of the chunk is
//     on it.
//   - On a Cluster a chunk would span nodes, and a pipeline over them waits
//     for every node: a hung node would hold up the renewals of leases on
//     healthy ones. So there every lease is renewed on its own (the
//     drivers pipeline concurrent calls to a node by themselves: rueidis
//     and valkey-go on one connection, go-redis over its pool).
//   - A lease whose last renewal failed (a chunk that timed out behind a
//     hung server, a connection reset), and a lease renewed by its holder's
//     extend (Redlock, a MultiLock split over Cluster slots, and any lease
//     whose renewals wait for replicas, WithReplicaAck), is renewed on
//     its own, bounded by its own deadline, and its outcome applies as soon
//     as its reply comes: a hung node delays only the leases on that node.
//
// Whatever the calls do, a lease's Context ends at its deadline by the
// client's clock (its own timer, see lease.Context): the renewer only moves
// that deadline when a renewal succeeds (and, with WithReplicaAck, was
// acknowledged).
const (
	renewChunk       = 512 // script calls per pipeline
	renewEvals       = 16  // concurrent Evals per chunk without a Batcher
	renewBusyRetry   = 5 * time.Millisecond
	renewMinRetry    = 5 * time.Millisecond
	renewSlackFactor = 12                     // a lease due within ttl/12 of now is renewed now
	renewLinger      = 250 * time.Millisecond // how long an idle renewer waits for a lease before it exits
)

// renewState is a lease's place in its renewer. Every field but r (set
// once) and call is guarded by r.mu; call is guarded by the lease's renew
// token.
type renewState struct {
	r       *renewer
	idx     int           // index in r.q; -1 when not queued (in flight, or stopped)
	at      time.Time     // when to act: renew, or give up at the deadline
	slack   time.Duration // how much earlier a batch may take it
	stopped bool          // Release, or the lease ended: no more renewals
	lastErr error         // of the last failed renewal, nil after a success
	failed  int           // renewals failed since the last success
	lastAt  time.Time     // when the last renewal that finished began

	// call is the script call that renews the lease by callTTL (Script
	// nil: renewed by extend), made at its first renewal (most leases are
	// released before one) and kept, so that a renewal allocates nothing
	// for it; unmade until then.
	call    backend.Call
	callTTL time.Duration
	unmade  bool
}

// renewer renews the leases of one backend.
type renewer struct {
	key   backend.Backend // nil for extend-only holders
	batch backend.Batcher // key's Batcher, or nil
	solo  bool            // key is a Cluster: every lease is renewed on its own (see the package doc above)
	ctx   context.Context // ends when the Client closes: renewals in flight are cut short
	wg    sync.WaitGroup  // the goroutine and the renewals in flight

	mu       sync.Mutex
	q        leaseHeap // by rs.at
	inflight int       // leases taken out of q by a renewal not yet finished
	running  bool      // the goroutine runs
	closed   bool      // the Client closed: the goroutine exits once idle, without lingering
	// The goroutine sleeps on t, which fires at armed (zero: the
	// goroutine is awake, or about to look at q before it sleeps again).
	// A caller that queues a lease due before armed moves t earlier
	// (armLocked); one due later changes nothing: the goroutine looks at q
	// whenever it wakes. So queueing and releasing a lease wake no
	// goroutine: most leases are released long before their first
	// renewal, and the goroutine sleeps through them.
	t         *time.Timer
	armed     time.Time
	idleSince time.Time // when q was last left empty; zero while it is not
	wakes     int       // times the goroutine woke up (for tests)
}

func newRenewer(b backend.Backend, ctx context.Context) *renewer {
	r := &renewer{key: b, solo: b != nil && backend.IsCluster(b), ctx: ctx}
	r.batch, _ = b.(backend.Batcher)
	return r
}

// close stops the renewer once the Client's leases have ended: its
// goroutine exits and close waits for it and for the renewals in flight
// (cut short by ctx, which has ended).
func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	if r.running && r.t != nil && !r.armed.IsZero() {
		r.armed = time.Now()
		r.t.Reset(0)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// startRenewals queues l for its first renewal at ttl/3 from now (or
// halfway to its deadline, when sooner). l.ttl and l.deadline are set and
// l is not shared yet.
func (l *Lease) startRenewals() {
	rs := &l.rs
	rs.idx = -1
	var b backend.Backend
	if _, ok := l.h.(RenewCaller); ok {
		// Renewed by a script call on the Client's backend, made at the
		// first renewal (or by extend, when the call says so then).
		b, rs.unmade = l.cl.b, true
	}
	// The first renewal a third of the TTL from now, or halfway to the
	// deadline when that is sooner (a lease granted by a hand-over, which
	// the server holds only for the hand-over's time).
	now := time.Now()
	at, slack := earliest(now.Add(l.ttl/3), now.Add(l.deadline.Sub(now)/2)), l.ttl/renewSlackFactor
	r := l.cl.renewerFor(b)
	r.mu.Lock()
	rs.r = r
	r.pushLocked(l, at, slack)
	r.mu.Unlock()
}

// stopRenewals ends l's renewals. A renewal in flight is not waited for:
// its outcome is dropped when it comes back (finish checks stopped under
// r.mu, which is also where outcomes are applied), so it can neither move
// the deadline nor queue the lease again. A renewal that reaches Redis
// after the release script finds the token gone and changes nothing; one
// that reaches it before is undone by the release.
func (l *Lease) stopRenewals() {
	r := l.rs.r
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.rs.stopped {
		return
	}
	l.rs.stopped = true
	if l.rs.idx >= 0 {
		heap.Remove(&r.q, l.rs.idx)
		if len(r.q) == 0 && r.running {
			// The goroutine exits once nothing has been queued for
			// renewLinger: it looks again then, not at the renewal
			// that was due.
			r.idleSince = time.Now()
			r.armLocked(r.idleSince.Add(renewLinger))
		}
	}
}

// reschedule moves l's next renewal to at, when it is queued.
func (r *renewer) reschedule(l *Lease, at time.Time, slack time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.rs.stopped || l.rs.idx < 0 {
		return // stopped, or in flight: the renewal in flight queues it
	}
	l.rs.at, l.rs.slack = at, slack
	heap.Fix(&r.q, l.rs.idx)
	if l.rs.idx == 0 {
		r.armLocked(at)
	}
}

// armLocked makes the goroutine look at the heap by at: it moves its
// timer earlier when it sleeps until later. It never wakes the goroutine
// before at, and leaves alone a goroutine that is awake (armed zero),
// which looks at the heap before it sleeps again.
func (r *renewer) armLocked(at time.Time) {
	if r.t == nil || r.armed.IsZero() || !at.Before(r.armed) {
		return
	}
	r.armed = at
	r.t.Reset(time.Until(at))
}

// sleepLocked is called by the goroutine with r.mu held: it arms its
// timer for at, unlocks r.mu and sleeps until the timer fires (at, or
// earlier when armLocked moved it).
func (r *renewer) sleepLocked(at time.Time) {
	r.armed = at
	r.t.Reset(time.Until(at))
	r.mu.Unlock()
	<-r.t.C
}

// pushLocked queues l to act at at, starting the goroutine if it is not
// running.
func (r *renewer) pushLocked(l *Lease, at time.Time, slack time.Duration) {
	if r.closed {
		// Granted to a call Close stopped waiting for: not renewed, the
		// lease ends at its deadline.
		l.rs.stopped = true
		return
	}
	l.rs.at, l.rs.slack = at, slack
	heap.Push(&r.q, l)
	if !r.running {
		r.running = true
		r.armed = time.Time{}
		r.wg.Go(r.run)
	} else if l.rs.idx == 0 {
		r.armLocked(at)
	}
}

// run is the renewer's goroutine: it sleeps until the earliest lease is
// due, then starts the renewals of every lease due within its slack, and
// gives up the leases whose deadline has passed. It never waits for a
// renewal. It exits once no lease has been queued for renewLinger; a
// renewal that queues a lease again restarts it.
func (r *renewer) run() {
	r.mu.Lock()
	if r.t == nil {
		r.t = time.NewTimer(time.Hour)
	}
	r.mu.Unlock()
	for {
		r.mu.Lock()
		r.armed = time.Time{} // awake
		r.wakes++
		if len(r.q) == 0 {
			if r.inflight == 0 && !r.closed {
				// Wait a little for the next lease: a process that
				// locks again soon keeps this goroutine instead of
				// starting one for every lease.
				if r.idleSince.IsZero() {
					r.idleSince = time.Now()
				}
				if end := r.idleSince.Add(renewLinger); time.Now().Before(end) {
					r.sleepLocked(end)
					continue
				}
			}
			if r.exitLocked() {
				return
			}
			continue
		}
		r.idleSince = time.Time{}
		now := time.Now()
		if at := r.q[0].rs.at; at.After(now) {
			r.sleepLocked(at)
			continue
		}
		var batch []dueLease
		var solo, late []*Lease
		for len(r.q) > 0 && !r.q[0].rs.at.After(now.Add(r.q[0].rs.slack)) {
			l := heap.Pop(&r.q).(*Lease)
			l.mu.Lock()
			deadline, ttl := l.deadline, l.ttl
			l.mu.Unlock()
			if l.rs.unmade {
				l.rs.unmade = false
				if _, s, keys, args, ok := l.h.(RenewCaller).RenewCall(l.token, ttl); ok {
					l.rs.call, l.rs.callTTL = backend.Call{Script: s, Keys: keys, Args: args}, ttl
				}
			}
			switch {
			case !now.Before(deadline):
				l.rs.stopped = true
				late = append(late, l)
			case l.rs.call.Script == nil || l.rs.lastErr != nil || r.solo:
				solo = append(solo, l)
			default:
				batch = append(batch, dueLease{l, deadline})
			}
		}
		r.inflight += len(batch) + len(solo)
		r.mu.Unlock()
		for _, l := range late {
			l.expire()
		}
		for _, l := range solo {
			r.wg.Go(func() { r.renewSolo(l) })
		}
		for _, chunk := range chunks(now, batch) {
			r.wg.Go(func() { r.renewChunk(chunk) })
		}
	}
}

// dueLease is a lease due for renewal and its deadline when it was taken.
type dueLease struct {
	l        *Lease
	deadline time.Time
}

// chunks splits the leases due at now into chunks of at most renewChunk.
// A chunk's calls share one context, bounded by the earliest deadline of
// the chunk's; so that a lease close to its deadline (of a much shorter
// TTL) cannot cut short the renewal of leases with time to spare, the
// leases go in order of deadline and a chunk takes only leases with at most
// twice the time left of its first.
func chunks(now time.Time, due []dueLease) [][]*Lease {
	slices.SortFunc(due, func(a, b dueLease) int { return a.deadline.Compare(b.deadline) })
	var out [][]*Lease
	var cur []*Lease
	var limit time.Time
	for _, d := range due {
		if len(cur) == renewChunk || (len(cur) > 0 && d.deadline.After(limit)) {
			out, cur = append(out, cur), nil
		}
		if len(cur) == 0 {
			limit = d.deadline.Add(d.deadline.Sub(now))
			cur = make([]*Lease, 0, min(renewChunk, len(due)))
		}
		cur = append(cur, d.l)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// exitLocked is called with r.mu held and the heap empty. It unlocks r.mu
// and reports that the goroutine is to exit: renewals in flight queue their
// leases again and start it anew.
func (r *renewer) exitLocked() bool {
	r.running = false
	r.t.Stop()
	r.mu.Unlock()
	return true
}

// requeue puts l, taken out for a renewal that did not happen, back at
// now+d (not beyond its deadline).
func (r *renewer) requeue(l *Lease, d time.Duration) {
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	if !l.rs.stopped {
		r.pushLocked(l, earliest(time.Now().Add(d), deadline), 0)
	}
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

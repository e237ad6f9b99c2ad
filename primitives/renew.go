package primitives

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/registry"
)

// The renewer renews every auto-extended lease of one backend in the
// process: one goroutine (running only while it has leases) keeps them in a
// min-heap by the time of their next renewal and, when the earliest is due,
// renews every lease due within a small slack of it. Its scheduling never
// waits for I/O: each renewal runs on a goroutine of its own or of its
// chunk, and a lease has at most one renewal in flight.
//
//   - Leases whose renewal is one script call (renewCaller) go out in
//     chunks of at most renewChunk calls through backend.Batcher (one
//     pipeline each; without a Batcher, concurrent Evals). A chunk waits
//     for its replies until its earliest lease's deadline; on a Cluster,
//     where a chunk spans nodes and one of them may hang, at most half
//     that time.
//   - A lease whose last renewal failed (a chunk that timed out behind a
//     hung server, a connection reset), and a lease renewed by its holder's
//     extend (Redlock, a MultiLock split over Cluster slots), is renewed on
//     its own, bounded by its own deadline, and its outcome applies as soon
//     as its reply comes: a hung node delays only the leases on that node.
//
// Whatever the calls do, a lease's Context ends at its deadline by the
// client's clock (its own timer, see lease.Context): the renewer only moves
// that deadline when a renewal succeeds.
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

	// call is the script call that renews the lease by callTTL (Script
	// nil: renewed by extend), kept so that a renewal allocates nothing
	// for it.
	call    backend.Call
	callTTL time.Duration
}

// renewer renews the leases of one backend.
type renewer struct {
	key    backend.Backend // the registry key; nil for extend-only holders
	shared bool            // in the registry
	batch  backend.Batcher // key's Batcher, or nil
	halve  bool            // key is a Cluster: a chunk waits half its time (see renewChunk)
	wake   chan struct{}   // capacity 1: the earliest lease changed

	mu       sync.Mutex
	q        leaseHeap // by rs.at
	inflight int       // leases taken out of q by a renewal not yet finished
	running  bool      // the goroutine runs
	dead     bool      // idle and out of the registry: make a new one
}

// renewers holds the renewer of each backend with auto-extended leases.
var renewers registry.Registry[*renewer]

// renewerFor returns the process's renewer for b (nil b: for holders that
// renew by extend only). A backend that cannot be a map key gets a renewer
// of its own.
func renewerFor(b backend.Backend) *renewer {
	if !registry.Shareable(b) {
		return newRenewer(b)
	}
	renewers.Lock()
	defer renewers.Unlock()
	return renewers.GetLocked(b, func() *renewer {
		r := newRenewer(b)
		r.shared = true
		return r
	})
}

func newRenewer(b backend.Backend) *renewer {
	r := &renewer{key: b, wake: make(chan struct{}, 1), halve: b != nil && backend.IsCluster(b)}
	r.batch, _ = b.(backend.Batcher)
	return r
}

// startRenewals queues l for its first renewal at ttl/3 from now. l.ttl
// and l.deadline are set and l is not shared yet.
func (l *lease) startRenewals() {
	rs := &l.rs
	rs.idx = -1
	var b backend.Backend
	if rc, ok := l.h.(renewCaller); ok {
		if cb, s, keys, args, ok := rc.renewCall(l.token, l.ttl); ok {
			b = cb
			rs.call = backend.Call{Script: s, Keys: keys, Args: args}
			rs.callTTL = l.ttl
		}
	}
	at, slack := earliest(time.Now().Add(l.ttl/3), l.deadline), l.ttl/renewSlackFactor
	for {
		r := renewerFor(b)
		r.mu.Lock()
		if r.dead {
			r.mu.Unlock()
			continue // it just went idle and left the registry
		}
		rs.r = r
		r.pushLocked(l, at, slack)
		r.mu.Unlock()
		return
	}
}

// stopRenewals ends l's renewals. A renewal in flight is not waited for:
// its outcome is dropped when it comes back (finish checks stopped under
// r.mu, which is also where outcomes are applied), so it can neither move
// the deadline nor queue the lease again. A renewal that reaches Redis
// after the release script finds the token gone and changes nothing; one
// that reaches it before is undone by the release.
func (l *lease) stopRenewals() {
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
		r.signal() // the goroutine exits when nothing is left
	}
}

// reschedule moves l's next renewal to at, when it is queued.
func (r *renewer) reschedule(l *lease, at time.Time, slack time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.rs.stopped || l.rs.idx < 0 {
		return // stopped, or in flight: the renewal in flight queues it
	}
	l.rs.at, l.rs.slack = at, slack
	heap.Fix(&r.q, l.rs.idx)
	if l.rs.idx == 0 {
		r.signal()
	}
}

func (r *renewer) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pushLocked queues l to act at at, starting the goroutine if it is not
// running.
func (r *renewer) pushLocked(l *lease, at time.Time, slack time.Duration) {
	l.rs.at, l.rs.slack = at, slack
	heap.Push(&r.q, l)
	if !r.running {
		r.running = true
		go r.run()
	} else if l.rs.idx == 0 {
		r.signal()
	}
}

// run is the renewer's goroutine: it sleeps until the earliest lease is
// due, then starts the renewals of every lease due within its slack, and
// gives up the leases whose deadline has passed. It never waits for a
// renewal. It exits once no lease has been queued for renewLinger; a
// renewal that queues a lease again restarts it.
func (r *renewer) run() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var idleSince time.Time // when the heap was last found empty; zero while it is not
	for {
		r.mu.Lock()
		if len(r.q) == 0 {
			if r.inflight == 0 {
				// Wait a little for the next lease: a process that
				// locks again soon keeps this goroutine and its registry
				// entry instead of making new ones for every lease.
				if idleSince.IsZero() {
					idleSince = time.Now()
				}
				if left := renewLinger - time.Since(idleSince); left > 0 {
					r.mu.Unlock()
					t.Reset(left)
					select {
					case <-t.C:
					case <-r.wake:
					}
					continue
				}
			}
			if r.exitLocked() {
				return
			}
			continue
		}
		idleSince = time.Time{}
		now := time.Now()
		if wait := r.q[0].rs.at.Sub(now); wait > 0 {
			r.mu.Unlock()
			t.Reset(wait)
			select {
			case <-t.C:
			case <-r.wake:
			}
			continue
		}
		var batch []dueLease
		var solo, late []*lease
		for len(r.q) > 0 && !r.q[0].rs.at.After(now.Add(r.q[0].rs.slack)) {
			l := heap.Pop(&r.q).(*lease)
			l.mu.Lock()
			deadline := l.deadline
			l.mu.Unlock()
			switch {
			case !now.Before(deadline):
				l.rs.stopped = true
				late = append(late, l)
			case l.rs.call.Script == nil || l.rs.lastErr != nil:
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
			go r.renewSolo(l)
		}
		for _, chunk := range chunks(now, batch) {
			go r.renewChunk(chunk)
		}
	}
}

// dueLease is a lease due for renewal and its deadline when it was taken.
type dueLease struct {
	l        *lease
	deadline time.Time
}

// chunks splits the leases due at now into chunks of at most renewChunk.
// A chunk's calls share one context, bounded by the earliest deadline of
// the chunk's; so that a lease close to its deadline (of a much shorter
// TTL) cannot cut short the renewal of leases with time to spare, the
// leases go in order of deadline and a chunk takes only leases with at most
// twice the time left of its first.
func chunks(now time.Time, due []dueLease) [][]*lease {
	slices.SortFunc(due, func(a, b dueLease) int { return a.deadline.Compare(b.deadline) })
	var out [][]*lease
	var cur []*lease
	var limit time.Time
	for _, d := range due {
		if len(cur) == renewChunk || (len(cur) > 0 && d.deadline.After(limit)) {
			out, cur = append(out, cur), nil
		}
		if len(cur) == 0 {
			limit = d.deadline.Add(d.deadline.Sub(now))
			cur = make([]*lease, 0, min(renewChunk, len(due)))
		}
		cur = append(cur, d.l)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// exitLocked is called with r.mu held and the heap empty. It unlocks r.mu
// and reports whether the goroutine is to exit: always, unless a lease was
// queued meanwhile. An idle shared renewer leaves the registry.
func (r *renewer) exitLocked() bool {
	if r.inflight > 0 || !r.shared {
		// Renewals in flight queue their leases again and restart the
		// goroutine; a private renewer with nothing left is done for.
		r.dead = r.inflight == 0
		r.running = false
		r.mu.Unlock()
		return true
	}
	r.mu.Unlock()
	renewers.Lock()
	defer renewers.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.q) > 0 || r.inflight > 0 {
		return false
	}
	r.dead, r.running = true, false
	renewers.DeleteLocked(r.key, r)
	return true
}

// requeue puts l, taken out for a renewal that did not happen, back at
// now+d (not beyond its deadline).
func (r *renewer) requeue(l *lease, d time.Duration) {
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	if !l.rs.stopped {
		r.pushLocked(l, earliest(time.Now().Add(d), deadline), 0)
	}
	r.idleLocked()
}

// idleLocked starts the goroutine when nothing is left and it is not
// running, so that it retires the renewer (the last lease left while in
// flight).
func (r *renewer) idleLocked() {
	if !r.running && !r.dead && len(r.q) == 0 && r.inflight == 0 {
		r.running = true
		go r.run()
	}
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// leaseHeap is a container/heap of leases by the time of their next
// renewal, each knowing its index (rs.idx; -1 once out).
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].rs.at.Before(h[j].rs.at) }

func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].rs.idx, h[j].rs.idx = i, j
}

func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.rs.idx = len(*h)
	*h = append(*h, l)
}

func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.rs.idx = -1
	return l
}

// The renewals themselves: take a lease (its renew token, unless an Extend
// holds it), renew it, apply the outcome.

// job is one lease's renewal.
type job struct {
	l        *lease
	ttl      time.Duration
	deadline time.Time
	start    time.Time
	held     bool
	err      error
}

// take prepares l's renewal: false when it is not to happen (an Extend is
// in flight, and renews the lease: it is looked at again soon; or it was
// stopped).
func (r *renewer) take(l *lease) (job, bool) {
	select {
	case l.renew <- struct{}{}:
	default:
		r.requeue(l, renewBusyRetry)
		return job{}, false
	}
	r.mu.Lock()
	stopped := l.rs.stopped
	if stopped {
		r.inflight--
		r.idleLocked()
	}
	r.mu.Unlock()
	if stopped {
		<-l.renew
		return job{}, false
	}
	l.mu.Lock()
	j := job{l: l, ttl: l.ttl, deadline: l.deadline}
	l.mu.Unlock()
	if rs := &l.rs; rs.call.Script != nil && rs.callTTL != j.ttl { // an Extend changed it
		_, _, _, rs.call.Args, _ = l.h.(renewCaller).renewCall(l.token, j.ttl)
		rs.callTTL = j.ttl
	}
	return j, true
}

// renewSolo renews l alone, bounded by its own deadline, and applies the
// outcome as soon as it comes.
func (r *renewer) renewSolo(l *lease) {
	j, ok := r.take(l)
	if !ok {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), j.deadline)
	j.start = time.Now()
	if c := &l.rs.call; c.Script != nil {
		j.held, j.err = flag(r.key.Eval(ctx, c.Script, c.Keys, c.Args))
	} else {
		j.held, j.err = l.h.extend(ctx, l.token, j.ttl)
	}
	cancel()
	r.finish(&j)
}

// renewChunk renews ls, whose renewals are script calls, in one batch. It
// waits for the replies until the earliest lease's deadline; on a Cluster
// at most half the time that lease has left, so that a lease on a healthy
// node whose chunk waited for a hung one is renewed alone next (see
// finish), with the other half.
func (r *renewer) renewChunk(ls []*lease) {
	jobs := make([]job, 0, len(ls))
	calls := make([]backend.Call, 0, len(ls))
	var first time.Time // the earliest deadline of the chunk's leases
	for _, l := range ls {
		j, ok := r.take(l)
		if !ok {
			continue
		}
		c := &l.rs.call
		calls = append(calls, backend.Call{Script: c.Script, Keys: c.Keys, Args: c.Args})
		jobs = append(jobs, j)
		if first.IsZero() || j.deadline.Before(first) {
			first = j.deadline
		}
	}
	if len(jobs) == 0 {
		return
	}
	start := time.Now()
	until := first
	if r.halve {
		until = start.Add(first.Sub(start) / 2)
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	if r.batch != nil {
		r.batch.EvalBatch(ctx, calls)
	} else {
		evalEach(ctx, r.key, calls)
	}
	cancel()
	for i := range jobs {
		j := &jobs[i]
		j.start = start
		j.held, j.err = flag(calls[i].Value, calls[i].Err)
		r.finish(j)
	}
}

// evalEach runs calls as concurrent Evals on b, renewEvals at a time.
func evalEach(ctx context.Context, b backend.Backend, calls []backend.Call) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(renewEvals, len(calls)) {
		wg.Go(func() {
			for i := range next {
				c := &calls[i]
				c.Value, c.Err = b.Eval(ctx, c.Script, c.Keys, c.Args)
			}
		})
	}
	for i := range calls {
		next <- i
	}
	close(next)
	wg.Wait()
}

// finish applies the outcome of j's renewal, unless the lease was stopped
// meanwhile, then lets Extend in. A success moves the deadline (never
// back, and the Context's timer with it) and queues the next renewal at
// ttl/3 from the renewal's start; a failure retries after max(ttl/10,
// 5ms), on its own, not beyond the deadline; a lease found gone is lost at
// once.
func (r *renewer) finish(j *job) {
	l := j.l
	var lost bool
	var retryIn, left time.Duration
	r.mu.Lock()
	r.inflight--
	switch {
	case l.rs.stopped:
		// Released (or ended) while in flight: the outcome is Release's.
	case j.err != nil:
		l.rs.lastErr = j.err
		l.mu.Lock()
		deadline := l.deadline
		l.mu.Unlock()
		now := time.Now()
		next := now.Add(max(j.ttl/10, renewMinRetry))
		retryIn, left = next.Sub(now), deadline.Sub(now)
		r.pushLocked(l, earliest(next, deadline), 0)
	case !j.held:
		l.rs.stopped = true
		lost = true
	default:
		l.rs.lastErr = nil
		l.mu.Lock()
		if dl := j.start.Add(j.ttl - drift(j.ttl)); dl.After(l.deadline) && !l.done {
			l.deadline = dl
			if l.timer != nil {
				l.timer.Reset(time.Until(dl))
			}
		}
		deadline := l.deadline
		l.mu.Unlock()
		r.pushLocked(l, earliest(j.start.Add(j.ttl/3), deadline), j.ttl/renewSlackFactor)
	}
	r.idleLocked()
	r.mu.Unlock()
	<-l.renew
	switch {
	case lost:
		l.lose(fmt.Errorf("renewal found the lease gone: %w", latchkit.ErrLeaseLost))
	case j.err != nil && retryIn > 0:
		l.logAttrs(slog.LevelWarn, "latchkit: lease renewal failed", slog.String("error", j.err.Error()),
			slog.Duration("left", left), slog.Duration("retry_in", retryIn))
	}
}

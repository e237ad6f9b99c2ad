package primitives

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// The renewer renews every auto-extended lease of one backend in the
// process: one goroutine (running only while it has leases) keeps them in a
// min-heap by the time of their next renewal and, when the earliest is due,
// renews in one batch every lease due within a small slack of it. A batch
// goes out in chunks of at most renewChunk script calls through
// backend.Batcher (one pipeline each), a few chunks in flight at once;
// without a Batcher the calls of a chunk run as concurrent Evals. Holders
// whose renewal is not one script call (renewCaller) are renewed by their
// extend method, a bounded number at once.
const (
	renewChunk       = 512 // script calls per pipeline
	renewChunks      = 4   // chunks in flight per renewer
	renewEvals       = 16  // concurrent Evals per chunk without a Batcher
	renewExtends     = 64  // concurrent extend calls per renewer
	renewBusyRetry   = 5 * time.Millisecond
	renewMinRetry    = 5 * time.Millisecond
	renewSlackFactor = 12                     // a lease due within ttl/12 of now is renewed now
	renewLinger      = 250 * time.Millisecond // how long an idle renewer waits for a lease before it exits
)

// renewState is a lease's place in its renewer. Every field but r (set
// once) and call is guarded by r.mu; call is guarded by the lease's renew
// mutex.
type renewState struct {
	r       *renewer
	idx     int           // index in r.q; -1 when not queued (in flight, or stopped)
	at      time.Time     // when to act: renew, or give up at the deadline
	slack   time.Duration // how much earlier a batch may take it
	stopped bool          // Release, or the lease ended: no more renewals
	lastErr error         // of the last failed renewal, nil after a success

	// call is the script call that renews the lease by callTTL (s nil:
	// renewed by extend), kept so that a renewal allocates nothing for it.
	call    backend.Call
	callTTL time.Duration
}

// renewer renews the leases of one backend.
type renewer struct {
	key     backend.Backend // the registry key; nil for extend-only holders
	shared  bool            // in the registry
	batch   backend.Batcher // key's Batcher, or nil
	wake    chan struct{}   // capacity 1: the earliest lease changed
	chunks  chan struct{}   // a token per chunk in flight
	extends chan struct{}   // a token per extend call in flight

	mu       sync.Mutex
	q        []*lease // min-heap by rs.at
	inflight int      // leases taken out of q by a chunk not yet finished
	running  bool     // the goroutine runs
	dead     bool     // idle and out of the registry: make a new one
}

var renewers struct {
	sync.Mutex
	m map[backend.Backend]*renewer
}

// renewerFor returns the process's renewer for b (nil b: for holders that
// renew by extend only). A backend that cannot be a map key gets a renewer
// of its own.
func renewerFor(b backend.Backend) *renewer {
	if b != nil {
		if t := reflect.TypeOf(b); !t.Comparable() {
			return newRenewer(b, false)
		}
	}
	renewers.Lock()
	defer renewers.Unlock()
	if r := renewers.m[b]; r != nil {
		return r
	}
	if renewers.m == nil {
		renewers.m = make(map[backend.Backend]*renewer)
	}
	r := newRenewer(b, true)
	renewers.m[b] = r
	return r
}

func newRenewer(b backend.Backend, shared bool) *renewer {
	r := &renewer{key: b, shared: shared, wake: make(chan struct{}, 1),
		chunks: make(chan struct{}, renewChunks), extends: make(chan struct{}, renewExtends)}
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
		r.removeLocked(l.rs.idx)
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
	i := l.rs.idx
	l.rs.at, l.rs.slack = at, slack
	r.fixLocked(i)
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
	l.rs.idx = len(r.q)
	r.q = append(r.q, l)
	r.upLocked(l.rs.idx)
	if !r.running {
		r.running = true
		go r.run()
	} else if l.rs.idx == 0 {
		r.signal()
	}
}

func (r *renewer) less(i, j int) bool { return r.q[i].rs.at.Before(r.q[j].rs.at) }

func (r *renewer) swap(i, j int) {
	r.q[i], r.q[j] = r.q[j], r.q[i]
	r.q[i].rs.idx, r.q[j].rs.idx = i, j
}

func (r *renewer) upLocked(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if !r.less(i, p) {
			break
		}
		r.swap(i, p)
		i, moved = p, true
	}
	return moved
}

func (r *renewer) downLocked(i int) {
	n := len(r.q)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && r.less(c+1, c) {
			c++
		}
		if !r.less(c, i) {
			return
		}
		r.swap(i, c)
		i = c
	}
}

func (r *renewer) fixLocked(i int) {
	if !r.upLocked(i) {
		r.downLocked(i)
	}
}

// removeLocked takes the lease at index i out of the heap.
func (r *renewer) removeLocked(i int) *lease {
	l := r.q[i]
	last := len(r.q) - 1
	if i != last {
		r.swap(i, last)
	}
	r.q[last] = nil
	r.q = r.q[:last]
	if i != last {
		r.fixLocked(i)
	}
	l.rs.idx = -1
	return l
}

// run is the renewer's goroutine: it sleeps until the earliest lease is
// due, then hands every lease due within its slack to chunk goroutines,
// and gives up the leases whose deadline has passed. It exits once no
// lease has been queued for renewLinger; a chunk that queues a lease again
// restarts it.
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
		var due []dueLease
		var late []*lease
		var lateErrs []error
		for len(r.q) > 0 && !r.q[0].rs.at.After(now.Add(r.q[0].rs.slack)) {
			l := r.removeLocked(0)
			l.mu.Lock()
			deadline := l.deadline
			l.mu.Unlock()
			if !now.Before(deadline) {
				l.rs.stopped = true
				late, lateErrs = append(late, l), append(lateErrs, l.rs.lastErr)
				continue
			}
			due = append(due, dueLease{l, deadline})
		}
		r.inflight += len(due)
		r.mu.Unlock()
		for i, l := range late {
			l.lose(fmt.Errorf("could not renew before the ttl ran out (last error: %v): %w", lateErrs[i], latchkit.ErrLeaseLost))
		}
		for _, chunk := range chunks(now, due) {
			r.chunks <- struct{}{}
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
// A chunk's calls share one context, whose deadline is the earliest of the
// chunk's; so that a lease close to its deadline (retrying after failures,
// or of a much shorter TTL) cannot cut short the renewal of leases with
// time to spare, the leases go in order of deadline and a chunk takes only
// leases with at most twice the time left of its first.
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
		// Chunks in flight queue their leases again and restart the
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
	if renewers.m[r.key] == r {
		delete(renewers.m, r.key)
	}
	return true
}

// job is one lease's renewal within a chunk.
type job struct {
	l        *lease
	ttl      time.Duration
	deadline time.Time
	call     int // index in the chunk's calls; -1: renewed by extend
	start    time.Time
	held     bool
	err      error
}

// renewChunk renews ls, each under its renew mutex, and queues them again.
func (r *renewer) renewChunk(ls []*lease) {
	defer func() { <-r.chunks }()
	jobs := make([]job, 0, len(ls))
	var calls []backend.Call
	var first time.Time // the earliest deadline of the batched calls
	for _, l := range ls {
		if !l.renew.TryLock() {
			// An Extend is in flight: it renews the lease; look again soon.
			r.requeue(l, renewBusyRetry)
			continue
		}
		r.mu.Lock()
		stopped := l.rs.stopped
		r.mu.Unlock()
		if stopped {
			l.renew.Unlock()
			r.mu.Lock()
			r.inflight--
			r.idleLocked()
			r.mu.Unlock()
			continue
		}
		l.mu.Lock()
		ttl, deadline := l.ttl, l.deadline
		l.mu.Unlock()
		j := job{l: l, ttl: ttl, deadline: deadline, call: -1}
		if rs := &l.rs; rs.call.Script != nil {
			if rs.callTTL != ttl { // an Extend changed it
				_, _, _, rs.call.Args, _ = l.h.(renewCaller).renewCall(l.token, ttl)
				rs.callTTL = ttl
			}
			j.call = len(calls)
			calls = append(calls, backend.Call{Script: rs.call.Script, Keys: rs.call.Keys, Args: rs.call.Args})
			if first.IsZero() || deadline.Before(first) {
				first = deadline
			}
		}
		jobs = append(jobs, j)
	}
	var wg sync.WaitGroup
	for i := range jobs {
		if jobs[i].call >= 0 {
			continue
		}
		j := &jobs[i]
		r.extends <- struct{}{}
		wg.Go(func() {
			defer func() { <-r.extends }()
			ctx, cancel := context.WithDeadline(context.Background(), j.deadline)
			defer cancel()
			j.start = time.Now()
			j.held, j.err = j.l.h.extend(ctx, j.l.token, j.ttl)
		})
	}
	if len(calls) > 0 {
		// One deadline for the chunk: the earliest lease's, so that no
		// lease is given up late because of a hung server. Leases renewed
		// together were due together, so their deadlines are close.
		ctx, cancel := context.WithDeadline(context.Background(), first)
		start := time.Now()
		if r.batch != nil {
			r.batch.EvalBatch(ctx, calls)
		} else {
			evalEach(ctx, r.key, calls)
		}
		cancel()
		for i := range jobs {
			if j := &jobs[i]; j.call >= 0 {
				c := &calls[j.call]
				j.start = start
				j.held, j.err = flag(c.Value, c.Err)
			}
		}
	}
	wg.Wait()
	for i := range jobs {
		r.finish(&jobs[i])
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

// finish applies the outcome of j's renewal, unless the lease was stopped
// meanwhile, then lets Extend in. A success moves the deadline (never
// back) and queues the next renewal at ttl/3 from the renewal's start; a
// failure retries after max(ttl/10, 5ms), not beyond the deadline; a lease
// found gone is lost at once.
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
		if dl := j.start.Add(j.ttl - drift(j.ttl)); dl.After(l.deadline) {
			l.deadline = dl
		}
		deadline := l.deadline
		l.mu.Unlock()
		r.pushLocked(l, earliest(j.start.Add(j.ttl/3), deadline), j.ttl/renewSlackFactor)
	}
	r.idleLocked()
	r.mu.Unlock()
	l.renew.Unlock()
	switch {
	case lost:
		l.lose(fmt.Errorf("renewal found the lease gone: %w", latchkit.ErrLeaseLost))
	case j.err != nil && retryIn > 0:
		l.logAttrs(slog.LevelWarn, "latchkit: lease renewal failed", slog.String("error", j.err.Error()),
			slog.Duration("left", left), slog.Duration("retry_in", retryIn))
	}
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

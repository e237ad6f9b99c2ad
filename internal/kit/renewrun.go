package kit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// The renewals themselves: take a lease (its renew token, unless an Extend
// holds it), renew it, apply the outcome.

// job is one lease's renewal.
type job struct {
	l        *Lease
	ttl      time.Duration
	deadline time.Time
	start    time.Time
	held     bool
	err      error
}

// take prepares l's renewal: false when it is not to happen (an Extend is
// in flight, and renews the lease: it is looked at again soon; or it was
// stopped).
func (r *renewer) take(l *Lease) (job, bool) {
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
		_, _, _, rs.call.Args, _ = l.h.(RenewCaller).RenewCall(l.token, j.ttl)
		rs.callTTL = j.ttl
	}
	return j, true
}

// renewSolo renews l alone, bounded by its own deadline, and applies the
// outcome as soon as it comes.
func (r *renewer) renewSolo(l *Lease) {
	j, ok := r.take(l)
	if !ok {
		return
	}
	ctx, cancel := context.WithDeadline(r.ctx, j.deadline)
	j.start = time.Now()
	if c := &l.rs.call; c.Script != nil {
		j.held, j.err = Flag(r.key.Eval(ctx, c.Script, c.Keys, c.Args))
	} else {
		j.held, j.err = l.h.Extend(ctx, l.token, j.ttl)
	}
	cancel()
	r.finish(&j)
}

// renewChunk renews ls, whose renewals are script calls on one server, in
// one batch. It waits for the replies until the earliest lease's deadline.
func (r *renewer) renewChunk(ls []*Lease) {
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
	ctx, cancel := context.WithDeadline(r.ctx, first)
	if r.batch != nil {
		r.batch.EvalBatch(ctx, calls)
	} else {
		evalEach(ctx, r.key, calls)
	}
	cancel()
	for i := range jobs {
		j := &jobs[i]
		j.start = start
		j.held, j.err = Flag(calls[i].Value, calls[i].Err)
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
		l.rs.lastErr, l.rs.lastAt = j.err, j.start
		l.rs.failed++
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
		l.rs.lastErr, l.rs.lastAt, l.rs.failed = nil, j.start, 0
		l.mu.Lock()
		if dl := j.start.Add(j.ttl - Drift(j.ttl)); dl.After(l.deadline) && !l.done {
			l.deadline = dl
			if l.timer != nil {
				l.timer.Reset(time.Until(dl))
			}
		}
		deadline := l.deadline
		l.mu.Unlock()
		r.pushLocked(l, earliest(j.start.Add(j.ttl/3), deadline), j.ttl/renewSlackFactor)
	}
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

package primitives

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// errUndecided is the error of an instance that had not answered when the
// quorum was decided: as an instance that did not answer, it leaves its
// own outcome unknown.
var errUndecided = &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("redlock: no answer before the quorum was decided")}

// decide runs f, which reports whether an instance holds the token, on
// every instance in parallel, each call bounded by timeout and by calls,
// and returns as soon as the quorum is decided (a quorum holds it, or so
// many do not that none can), every instance answered, or stop is done. A
// slow or hung instance then holds up nobody: its call goes on, its answer
// unused.
func (r *redlock) decide(stop, calls context.Context, timeout time.Duration, f func(ctx context.Context, i int, b backend.Backend) (bool, error)) ([]bool, []error) {
	ctx := calls
	type answer struct {
		i    int
		held bool
		err  error
	}
	answers := make(chan answer, len(r.bs))
	for i, b := range r.bs {
		go func() {
			ictx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			held, err := f(ictx, i, b)
			answers <- answer{i, held, instanceErr(ctx, err)}
		}()
	}
	held := make([]bool, len(r.bs))
	errs := make([]error, len(r.bs))
	for i := range errs {
		errs[i] = errUndecided
	}
	yes, no := 0, 0
	for range r.bs {
		var a answer
		select {
		case a = <-answers:
		case <-stop.Done():
			return held, errs
		}
		held[a.i], errs[a.i] = a.held, a.err
		switch {
		case a.err != nil:
		case a.held:
			yes++
		default:
			no++
		}
		if yes >= r.quorum || no > len(r.bs)-r.quorum {
			break
		}
	}
	return held, errs
}

// quorumOf reports whether at least a quorum of calls returned true. It
// reports false (lost) only when so many instances answered that they do
// not hold it that no quorum can: an instance that did not answer (slow,
// unreachable) may well hold it, and leaves the outcome unknown, an error.
func (r *redlock) quorumOf(held []bool, errs []error) (bool, error) {
	yes, no := 0, 0
	for i, h := range held {
		switch {
		case errs[i] != nil:
		case h:
			yes++
		default:
			no++
		}
	}
	if yes >= r.quorum {
		return true, nil
	}
	if no > len(r.bs)-r.quorum {
		return false, nil // a quorum can no longer hold it
	}
	return false, fmt.Errorf("%d of %d instances hold it, %d do not, %d did not answer; quorum %d: %w",
		yes, len(r.bs), no, len(r.bs)-yes-no, r.quorum, errors.Join(errs...))
}

// releasedBefore returns the instances that released token on an earlier
// try whose outcome was unknown, nil when there was none.
func (r *redlock) releasedBefore(token string) []bool {
	r.relMu.Lock()
	defer r.relMu.Unlock()
	return r.released[token].by
}

// noteReleased keeps, once a release of token has had an unknown
// outcome, which instances released it on any try (for its retries:
// releasedBefore), adding those of every later try, whatever its outcome:
// a retry of the caller's and the background retry of lease.Release may
// run at once, and the one that decides first must not make the other
// forget the earlier tries. What it keeps is dropped once its lease could
// no longer be held anyway (TTL + 1 s, at most a minute), by the next
// release of unknown outcome. A release decided on its first try, the
// common path, keeps nothing.
func (r *redlock) noteReleased(token string, held []bool, errs []error, unknown bool) {
	r.relMu.Lock()
	defer r.relMu.Unlock()
	rb, had := r.released[token]
	if !unknown && !had {
		return
	}
	now := time.Now()
	if unknown {
		for t, old := range r.released {
			if now.Sub(old.at) > r.cfg.Window() {
				delete(r.released, t)
			}
		}
	}
	// A new slice each time: a retry reads the one releasedBefore gave it
	// without the lock, while another may note its own outcome.
	by := make([]bool, len(held))
	copy(by, rb.by)
	for i := range held {
		by[i] = by[i] || held[i] && errs[i] == nil
	}
	if r.released == nil {
		r.released = map[string]releasedBy{}
	}
	r.released[token] = releasedBy{at: now, by: by}
}

// Package handoff records, in-process, who holds one contended lock as
// clients take turns on it: hand-overs between clients, a releaser taking
// it straight back, the longest wait, and overlaps (which must not
// happen). latchctl bench and the bench module both report from it.
package handoff

import (
	"slices"
	"sync"
	"time"
)

// Result is what a Recorder saw.
type Result struct {
	Acquisitions int
	Handoffs     int             // grants to a different client than the previous holder
	SelfReacq    int             // grants to the client that released just before
	Handoff      []time.Duration // release by A (call begins) to grant to B (call returns)
	MaxWait      time.Duration   // longest Lock call, or wait still pending at the end
	GaveUp       int             // Lock calls the library abandoned by itself
	ReleaseErrs  int             // releases that failed
	Violations   int             // grants while another client held the lock: must be 0
}

// Recorder keeps the order of grants under one mutex. Grants of one lock
// are serialized, so the order of its calls is their order.
type Recorder struct {
	mu           sync.Mutex
	holder       int // -1: free
	lastReleaser int // -1: none yet
	lastRelease  time.Time
	r            Result
}

// NewRecorder returns a Recorder of a free lock.
func NewRecorder() *Recorder { return &Recorder{holder: -1, lastReleaser: -1} }

// Granted records that client id's Lock, called at waitStart, returned
// granted, after gaveUp attempts the library abandoned by itself.
func (rc *Recorder) Granted(id int, waitStart time.Time, gaveUp int) {
	now := time.Now()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.r.GaveUp += gaveUp
	if rc.holder != -1 {
		rc.r.Violations++
	}
	rc.holder = id
	rc.r.Acquisitions++
	rc.r.MaxWait = max(rc.r.MaxWait, now.Sub(waitStart))
	switch rc.lastReleaser {
	case -1:
	case id:
		rc.r.SelfReacq++
	default:
		rc.r.Handoffs++
		rc.r.Handoff = append(rc.r.Handoff, now.Sub(rc.lastRelease))
	}
}

// Releasing records that client id begins its Release.
func (rc *Recorder) Releasing(id int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.holder == id {
		rc.holder = -1
	}
	rc.lastReleaser = id
	rc.lastRelease = time.Now()
}

// Failed records a Release that failed.
func (rc *Recorder) Failed() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.r.ReleaseErrs++
}

// Pending records a Lock, called at waitStart, still waiting at the end.
func (rc *Recorder) Pending(waitStart time.Time, gaveUp int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.r.MaxWait = max(rc.r.MaxWait, time.Since(waitStart))
	rc.r.GaveUp += gaveUp
}

// Result returns what was recorded so far.
func (rc *Recorder) Result() Result {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r := rc.r
	r.Handoff = slices.Clone(r.Handoff)
	return r
}

// Quantile is the q-quantile (0..1) of ds, by nearest rank.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Median of xs (the mean of the middle two for an even count).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

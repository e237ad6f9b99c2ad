package primitives

import (
	"time"

	"github.com/latchkit/latchkit/backend"
)

// renewCaller is the optional method of a holder whose extend is one script
// call on one backend: the renewer batches those calls (backend.Batcher)
// instead of making a round trip per lease. renewCall returns the backend,
// script, keys and arguments that extend would run for token and ttl; its
// reply decodes with flag, exactly as extend's does. ok is false when the
// grant cannot be extended by one call (Redlock over several backends, a
// MultiLock split across cluster nodes): the renewer then calls extend.
// The returned slices are not modified by the caller and may be kept.
type renewCaller interface {
	renewCall(token string, ttl time.Duration) (b backend.Backend, s *backend.Script, keys, args []string, ok bool)
}

// extendArgs is the ARGV of every extend script: the token, then the TTL.
func extendArgs(token string, ttl time.Duration) []string { return []string{token, ms(ttl)} }

// renewCall mirrors mutex.extend.
func (m *mutex) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return m.b, mutexExtend, m.keys, extendArgs(token, ttl), true
}

// renewCall mirrors fairSemaphore.extend.
func (s *fairSemaphore) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return s.b, fairExtend, s.keys, extendArgs(token, ttl), true
}

// renewCall mirrors semaphore.extend.
func (s *semaphore) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return s.b, semExtend, s.keys, extendArgs(token, ttl), true
}

// renewCall mirrors rwReader.extend.
func (r rwReader) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return r.b, rwReadExtend, []string{r.keys[0], r.keys[3], r.keys[4], r.keys[5], r.keys[6]}, extendArgs(token, ttl), true
}

// renewCall mirrors rwWriter.extend.
func (w rwWriter) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return w.b, rwWriteExtend, w.keys, extendArgs(token, ttl), true
}

// renewCall mirrors multiLock.extend: one script over every name, unless
// the names are split over cluster nodes (then extend runs name by name).
func (ml *multiLock) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	if ml.split {
		return nil, nil, nil, nil, false
	}
	return ml.b, multiExtend, ml.keys, extendArgs(token, ttl), true
}

// renewCall: a Redlock renewal needs a quorum of several backends, which
// is extend's job.
func (r *redlock) renewCall(string, time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return nil, nil, nil, nil, false
}

package primitives

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkit/latchkit/backend"
)

// renewCaller is the optional method of a holder whose extend is one script
// call on one backend: the renewer batches those calls (backend.Batcher)
// instead of making a round trip per lease. renewCall returns the backend,
// script, keys and arguments that extend would run for token and ttl; its
// reply decodes with flag, exactly as extend's does. ok is false when the
// renewer must call extend instead: when the grant cannot be extended by
// one call (Redlock over several backends, a MultiLock split across
// cluster nodes; the call is then nil), or when each extension waits for
// its replicas (WithReplicaAck, see extendBy). The returned slices are not
// modified by the caller and may be kept.
type renewCaller interface {
	renewCall(token string, ttl time.Duration) (b backend.Backend, s *backend.Script, keys, args []string, ok bool)
}

// extendBy is the extend of a holder whose renewal is one script call: it
// runs the call renewCall describes, so that extend and the renewer's
// batches cannot drift apart.
//
// With WithReplicaAck the call is followed by WAIT, as a grant is: an
// extension that fewer replicas than asked acknowledged is an error
// matching ErrNotReplicated with held true (the master has it). The lease
// then keeps its deadline (see lease.Extend and the renewer), so that the
// deadline never lies beyond the expiry a replica promoted by a failover
// holds; a renewal that is not acknowledged is tried again, and a lease
// none of whose renewals is acknowledged ends at its TTL.
func extendBy(ctx context.Context, rc renewCaller, cfg *config, token string, ttl time.Duration) (bool, error) {
	b, s, keys, args, _ := rc.renewCall(token, ttl)
	if cfg.ackReplicas == 0 {
		return flag(b.Eval(ctx, s, keys, args))
	}
	v, acks, err := cfg.evalAcquire(ctx, b, s, keys, args)
	held, err := flag(v, err)
	if err != nil || !held || acks >= cfg.ackReplicas {
		return held, err
	}
	return true, fmt.Errorf("%w: WAIT confirmed the extension on %d of %d replicas within %v", ErrNotReplicated, acks, cfg.ackReplicas, cfg.ackTimeout)
}

// extendArgs is the ARGV of every extend script: the token, then the TTL.
func extendArgs(token string, ttl time.Duration) []string { return []string{token, ms(ttl)} }

// renewCall is mutex's one extend call.
func (m *mutex) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return m.b, mutexExtend, m.keys, extendArgs(token, ttl), m.cfg.ackReplicas == 0
}

// renewCall is fairSemaphore's one extend call.
func (s *fairSemaphore) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return s.b, fairExtend, s.keys, extendArgs(token, ttl), s.cfg.ackReplicas == 0
}

// renewCall is semaphore's one extend call.
func (s *semaphore) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return s.b, semExtend, s.keys, extendArgs(token, ttl), s.cfg.ackReplicas == 0
}

// renewCall is rwReader's one extend call.
func (r rwReader) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return r.b, rwReadExtend, []string{r.keys[0], r.keys[3], r.keys[4], r.keys[5], r.keys[6]}, extendArgs(token, ttl), r.cfg.ackReplicas == 0
}

// renewCall is rwWriter's one extend call.
func (w rwWriter) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return w.b, rwWriteExtend, w.keys, extendArgs(token, ttl), w.cfg.ackReplicas == 0
}

// renewCall is multiLock's one extend call over every name, unless the
// names are split over cluster nodes (then extend runs name by name).
func (ml *multiLock) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	if ml.split {
		return nil, nil, nil, nil, false
	}
	return ml.b, multiExtend, ml.keys, extendArgs(token, ttl), ml.cfg.ackReplicas == 0
}

// renewCall: a Redlock renewal needs a quorum of several backends, which
// is extend's job.
func (r *redlock) renewCall(string, time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return nil, nil, nil, nil, false
}

package primitives

import (
	"context"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
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

// extendArgs is the ARGV of every extend script: the token, the TTL, then
// the companions, keys the script touches only where they exist. An extend
// script declares as KEYS only the keys that hold its token or its
// entries, which exist as long as the lease does: in a Cluster, a slot
// MIGRATING to another master is served only to a script whose every key
// its master has (TRYAGAIN otherwise), so that a renewal declaring a key
// that may be absent (an annotation, weights) would fail until the keys
// move, and a lease shorter than the migration would be lost although its
// keys never moved (see companion in lua/prelude.lua). The TTL scripts
// declare their KEYS by the same rule.
func extendArgs(token string, ttl time.Duration, companions ...string) []string {
	return append([]string{token, ms(ttl)}, companions...)
}

// extendCall is the keys and ARGV of mutex_extend for token: the lock, and
// the annotation as a companion. A Redlock runs it on each instance.
func (m *mutex) extendCall(token string, ttl time.Duration) (keys, args []string) {
	return m.keys[:1], extendArgs(token, ttl, m.keys[3])
}

// renewCall is mutex's one extend call.
func (m *mutex) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	keys, args := m.extendCall(token, ttl)
	return m.b, mutexExtend, keys, args, m.cfg.ackReplicas == 0
}

// renewCall is fairSemaphore's one extend call: the queue, liveness and
// holders as KEYS; the ticket counter, annotations and weights as
// companions.
func (s *fairSemaphore) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return s.b, fairExtend, []string{s.keys[0], s.keys[1], s.keys[4]}, extendArgs(token, ttl, s.keys[2], s.keys[6], s.keys[8]),
		s.cfg.ackReplicas == 0
}

// renewCall is semaphore's one extend call: holders and their fences as
// KEYS; annotations and weights as companions.
func (s *semaphore) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return s.b, semExtend, []string{s.keys[0], s.keys[2]}, extendArgs(token, ttl, s.keys[4], s.keys[5]), s.cfg.ackReplicas == 0
}

// renewCall is rwReader's one extend call: readers and their fences as
// KEYS; annotations as a companion.
func (r rwReader) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return r.b, rwReadExtend, []string{r.keys[0], r.keys[4]}, extendArgs(token, ttl, r.keys[6], ""), r.cfg.ackReplicas == 0
}

// renewCall is rwWriter's one extend call: the writer as KEYS;
// annotations and fences as companions.
func (w rwWriter) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return w.b, rwWriteExtend, w.keys[1:2], extendArgs(token, ttl, w.keys[6], w.keys[4]), w.cfg.ackReplicas == 0
}

// locks are the locks of a MultiLock's names, in the order of its keys:
// the KEYS of multi_extend and multi_ttl.
func (ml *multiLock) locks() []string {
	n := len(keyspace.MutexLayout.Keys)
	locks := make([]string, 0, len(ml.keys)/n)
	for i := 0; i < len(ml.keys); i += n {
		locks = append(locks, ml.keys[i])
	}
	return locks
}

// renewCall is multiLock's one extend call over every name (their locks
// as KEYS, their annotations as companions), unless the names are split
// over cluster nodes (then extend runs name by name).
func (ml *multiLock) renewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	if ml.split {
		return nil, nil, nil, nil, false
	}
	n := len(keyspace.MutexLayout.Keys)
	notes := make([]string, 0, len(ml.keys)/n)
	for i := 3; i < len(ml.keys); i += n {
		notes = append(notes, ml.keys[i])
	}
	return ml.b, multiExtend, ml.locks(), extendArgs(token, ttl, notes...), ml.cfg.ackReplicas == 0
}

// renewCall: a Redlock renewal needs a quorum of several backends, which
// is extend's job.
func (r *redlock) renewCall(string, time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return nil, nil, nil, nil, false
}

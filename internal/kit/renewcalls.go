package kit

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
)

// RenewCaller is the optional method of a holder whose extend is one script
// call on one backend: the renewer batches those calls (backend.Batcher)
// instead of making a round trip per lease. renewCall returns the backend,
// script, keys and arguments that extend would run for token and ttl; its
// reply decodes with flag, exactly as extend's does. ok is false when the
// renewer must call extend instead: when the grant cannot be extended by
// one call (Redlock over several backends, a MultiLock split across
// cluster nodes; the call is then nil), or when each extension waits for
// its replicas (WithReplicaAck, see ExtendBy). The returned slices are not
// modified by the caller and may be kept.
type RenewCaller interface {
	RenewCall(token string, ttl time.Duration) (b backend.Backend, s *backend.Script, keys, args []string, ok bool)
}

// ExtendBy is the extend of a holder whose renewal is one script call: it
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
func ExtendBy(ctx context.Context, rc RenewCaller, cfg *Config, token string, ttl time.Duration) (bool, error) {
	b, s, keys, args, _ := rc.RenewCall(token, ttl)
	if cfg.AckReplicas == 0 {
		return Flag(b.Eval(ctx, s, keys, args))
	}
	v, acks, err := cfg.EvalAcquire(ctx, b, s, keys, args)
	held, err := Flag(v, err)
	if err != nil || !held || acks >= cfg.AckReplicas {
		return held, err
	}
	return true, fmt.Errorf("%w: WAIT confirmed the extension on %d of %d replicas within %v", latchkit.ErrNotReplicated, acks, cfg.AckReplicas, cfg.AckTimeout)
}

// ExtendArgs is the ARGV of every extend script: the token, the TTL, then
// the companions, keys the script touches only where they exist. An extend
// script declares as KEYS only the keys that hold its token or its
// entries, which exist as long as the lease does: in a Cluster, a slot
// MIGRATING to another master is served only to a script whose every key
// its master has (TRYAGAIN otherwise), so that a renewal declaring a key
// that may be absent (an annotation, weights) would fail until the keys
// move, and a lease shorter than the migration would be lost although its
// keys never moved (see companion in lua/prelude.lua). The TTL scripts
// declare their KEYS by the same rule.
func ExtendArgs(token string, ttl time.Duration, companions ...string) []string {
	return append([]string{token, Ms(ttl)}, companions...)
}

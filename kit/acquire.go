package kit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	engine "github.com/latchkit/latchkit/internal/kit"
)

// Acquisition is one logical acquisition of a Site's primitive: its
// attempts share one token, so that a retried attempt whose reply was lost
// is recognized by the script, and what an acquisition that ends without
// a grant may have left is given back.
type Acquisition struct {
	// Op is the primitive's method ("Take", "Acquire"): middleware sees it
	// as latchkit.Request.Op ("Try" in front for a Try) and errors name it
	// in lower case.
	Op string
	// Kind, when set, names the acquisition's kind in place of the
	// layout's (an RWLock's reader and writer: read_lock, write_lock).
	Kind latchkit.Kind
	// Try: one attempt, which never waits.
	Try bool
	// Attempt is the attempt script (see the package doc for its ARGV and
	// reply), given Args after the header.
	Attempt *Script
	Args    []string
	// Holder, when set, makes a grant a lease (renewed while
	// WithAutoExtend is on, released by Lease.Release and the Client's
	// Close), whose fence is the n of the attempt's {1, n} reply.
	Holder *Holder
	// GiveBack undoes what the token may have taken or left (a grant whose
	// reply was lost, a place in a queue) and keeps the token from taking
	// anything later (a late copy of its attempt); it runs when the
	// acquisition ends without a grant after an attempt of unknown
	// outcome, or, with Queues, after a waiting attempt found the
	// primitive held. It must be idempotent. Nil: Holder.Release (in mode
	// "1"), or nothing to give back.
	GiveBack *Script
	// Queues: a waiting attempt that finds the primitive held leaves
	// something behind (a place in a queue), given back when the
	// acquisition ends without a grant.
	Queues bool
}

// Holder is how a grant is held: the scripts its lease renews, releases
// and reads the remaining time of, each checking that the token holds.
type Holder struct {
	// Extend: ARGV 1 token, 2 ttl ms; reply 1 extended, 0 not held. It
	// declares only keys that hold the token while it holds (on a Cluster,
	// a slot moving to another node serves a script only when every key
	// it declares is there).
	Extend *Script
	// Release: ARGV 1 token, 2 the release channel, 3 mode ("" a release,
	// "1" a give-back: the acquisition ended without seeing its grant, so
	// the token is also kept from taking anything later); reply 1 released
	// (or by an earlier try), 0 not held.
	Release *Script
	// TTL: ARGV 1 token; reply the ms left, or -3 when not held.
	TTL *Script
	// Companions name the layout's keys Extend touches only where they
	// exist (an annotation, weights): given in ARGV after the ttl, not as
	// KEYS (see Extend).
	Companions []string
}

// Acquire runs a through the wait loop: the options' middleware around
// attempts, each waiting attempt that is told "not now" followed by a
// sleep until a message on the release channel, the hint or the retry
// policy's delay; the give-back when it ends without a grant; the
// Client's Close withdrawing it. Granted, it returns the lease (nil
// without a Holder: a take, a permit the script counts). A Try told "not
// now", and a retry policy that gives up, return an error matching
// latchkit.ErrNotAcquired (a *latchkit.HeldError with the hint); ctx's end,
// its error; a closed Client, latchkit.ErrClosed; a key of another type or
// an argument the script refuses, latchkit.ErrInvalid, without a
// give-back. Every error is a *latchkit.OpError.
func (s *Site) Acquire(ctx context.Context, a Acquisition) (latchkit.Lease, error) {
	op := strings.ToLower(a.Op)
	if s == nil {
		return nil, errNilSite(op)
	}
	kind := s.l.Kind
	if a.Kind != "" {
		kind = a.Kind
	}
	keys, err := s.keysOf(a.Attempt)
	if err != nil {
		return nil, engine.OpErr(op, kind, s.name, err)
	}
	var h *holder
	if a.Holder != nil {
		if h, err = s.holder(a.Holder); err != nil {
			return nil, engine.OpErr(op, kind, s.name, err)
		}
	}
	wait := "0"
	if !a.Try {
		wait = engine.Ms(s.cfg.WaiterTimeout)
	}
	ttl := engine.Ms(s.cfg.TTL)
	ea := engine.Acquisition{Op: op, Method: a.Op, Kind: kind, Name: s.name, Chans: s.chans, Try: a.Try, Queues: a.Queues, NoLease: h == nil,
		Attempt: func(ctx context.Context, at *engine.Attempt) (latchkit.Lease, error) {
			start := time.Now()
			argv := append([]string{at.Token, ttl, wait, at.Annotation, s.cfg.RetArg}, a.Args...)
			v, acks, err := s.cfg.EvalAcquire(ctx, s.b, a.Attempt.s, keys, argv)
			if err != nil {
				return nil, s.keyErr(ctx, a.Attempt, keys, err)
			}
			if h == nil {
				granted, hint, holder, err := engine.Pair(v)
				if err != nil || granted {
					return nil, err
				}
				return nil, engine.HeldErr(hint, holder)
			}
			l, err := engine.Grant(ctx, v, h, kind, s.name, at.Token, start, &s.cfg)
			return s.cfg.Acked(ctx, l, err, acks)
		}}
	switch {
	case a.GiveBack != nil:
		gkeys, err := s.keysOf(a.GiveBack)
		if err != nil {
			return nil, engine.OpErr(op, kind, s.name, err)
		}
		ea.GiveBack = func(ctx context.Context, token string) error {
			_, err := s.b.Eval(ctx, a.GiveBack.s, gkeys, releaseArgs(token, s.channel, "1"))
			return err
		}
	case h != nil:
		ea.GiveBack = func(ctx context.Context, token string) error {
			_, err := s.b.Eval(ctx, h.h.Release.s, h.rel, releaseArgs(token, s.channel, "1"))
			return err
		}
	}
	return s.cfg.Acquire(ctx, s.b, ea)
}

// Wait waits until check, a read of the primitive, returns nil: the wait
// loop without a grant (a latch, a barrier). check returns an error
// wrapping a *latchkit.HeldError while the primitive is not ready (its
// WaitHint the longest to sleep before reading again; a message on the
// release channel wakes the wait sooner), or another error to end the
// wait with it. op is the method ("Wait"), as Acquisition.Op. The errors
// are Acquire's.
func (s *Site) Wait(ctx context.Context, op string, check func(ctx context.Context) error) error {
	lop := strings.ToLower(op)
	if s == nil {
		return errNilSite(lop)
	}
	if check == nil {
		return engine.Invalid(lop, s.l.Kind, s.name, "a nil check")
	}
	_, err := s.cfg.Acquire(ctx, s.b, engine.Acquisition{Op: lop, Method: op, Kind: s.l.Kind, Name: s.name, Chans: s.chans, NoLease: true,
		Attempt: func(ctx context.Context, _ *engine.Attempt) (latchkit.Lease, error) { return nil, check(ctx) }})
	return err
}

// releaseArgs is the ARGV of a Holder's Release (and of a give-back).
func releaseArgs(token, channel, mode string) []string {
	return []string{token, channel, mode}
}

// holder is a Holder at a Site, for an acquisition's leases: what the
// machinery calls to renew, release and read them.
type holder struct {
	s              *Site
	h              *Holder
	ext, rel, ttlk []string // the scripts' KEYS
	companions     []string // the companions' keys
}

func (s *Site) holder(h *Holder) (*holder, error) {
	x := &holder{s: s, h: h}
	if len(h.Companions) > 0 {
		x.companions = make([]string, 0, len(h.Companions))
	}
	for _, c := range h.Companions {
		k := s.Key(c)
		if k == "" {
			return nil, fmt.Errorf("%w: companion %q is not a key of layout %s", latchkit.ErrInvalid, c, s.l.Kind)
		}
		x.companions = append(x.companions, k)
	}
	var err error
	if x.ext, err = s.keysOf(h.Extend); err != nil {
		return nil, err
	}
	if x.rel, err = s.keysOf(h.Release); err != nil {
		return nil, err
	}
	if x.ttlk, err = s.keysOf(h.TTL); err != nil {
		return nil, err
	}
	return x, nil
}

func (x *holder) RenewCall(token string, ttl time.Duration) (backend.Backend, *backend.Script, []string, []string, bool) {
	return x.s.b, x.h.Extend.s, x.ext, engine.ExtendArgs(token, ttl, x.companions...), x.s.cfg.AckReplicas == 0
}

func (x *holder) Extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return engine.ExtendBy(ctx, x, &x.s.cfg, token, ttl)
}

func (x *holder) Release(ctx context.Context, token string) (bool, error) {
	return engine.Flag(x.s.b.Eval(ctx, x.h.Release.s, x.rel, releaseArgs(token, x.s.channel, "")))
}

// Pass frees a grant WithReplicaAck refused without ending the
// acquisition: a release (which does not keep the token from a later
// grant).
func (x *holder) Pass(ctx context.Context, token string) (bool, error) { return x.Release(ctx, token) }

func (x *holder) TTL(ctx context.Context, token string) (time.Duration, bool, error) {
	return engine.Remaining(x.s.b.Eval(ctx, x.h.TTL.s, x.ttlk, []string{token}))
}

package primitives

import (
	"context"
	"log/slog"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/kit"
	"github.com/latchkit/latchkit/internal/nilness"
	pkit "github.com/latchkit/latchkit/kit"
	"github.com/latchkit/latchkit/retry"
)

// Option configures a lock, a semaphore or an election: it is what
// NewMutex, NewReentrantMutex, NewFairMutex, NewMultiLock, NewRWLock,
// NewSemaphore, NewFairSemaphore and NewElection take. NewRedlock takes
// RedlockOption and NewLatch LatchOption: an option that does not apply
// to a family does not compile there, and each With function's result
// names the families it fits.
type Option interface {
	pkit.Option
	lockOption(*kit.Config)
}

// RedlockOption configures a Redlock (NewRedlock).
type RedlockOption interface{ redlockOption(*kit.Config) }

// LatchOption configures a Latch (NewLatch).
type LatchOption interface{ latchOption(*kit.Config) }

// The options' types, one per set of families an option fits: the
// methods say which, so that not even a type assertion turns an option
// into one of a family it does not fit.
type (
	anyOption   func(*kit.Config) // every family
	leaseOption func(*kit.Config) // the primitives that grant leases: locks, semaphores, elections, Redlocks
	lockOption  func(*kit.Config) // locks, semaphores and elections
	keptOption  func(*kit.Config) // those, and latches: the kinds that keep a counter for a retention
	redlockOpt  func(*kit.Config) // Redlocks
)

// ApplyOption makes each option a kit.Option too (the lock family's
// options are what a primitive written on package kit takes).
func (o anyOption) ApplyOption(c *kit.Config)   { applyTo(o, c) }
func (o leaseOption) ApplyOption(c *kit.Config) { applyTo(o, c) }
func (o lockOption) ApplyOption(c *kit.Config)  { applyTo(o, c) }
func (o keptOption) ApplyOption(c *kit.Config)  { applyTo(o, c) }

// applyTo applies f to c unless c is nil.
func applyTo[F ~func(*kit.Config)](f F, c *kit.Config) {
	if c != nil {
		f(c)
	}
}

func (o anyOption) lockOption(c *kit.Config)      { o(c) }
func (o anyOption) redlockOption(c *kit.Config)   { o(c) }
func (o anyOption) latchOption(c *kit.Config)     { o(c) }
func (o leaseOption) lockOption(c *kit.Config)    { o(c) }
func (o leaseOption) redlockOption(c *kit.Config) { o(c) }
func (o lockOption) lockOption(c *kit.Config)     { o(c) }
func (o keptOption) lockOption(c *kit.Config)     { o(c) }
func (o keptOption) latchOption(c *kit.Config)    { o(c) }
func (o redlockOpt) redlockOption(c *kit.Config)  { o(c) }

// MinTTL is the shortest lease time a primitive accepts (WithTTL, and
// Lease.Extend): 5ms. A lease's Context ends at the drift allowance
// (TTL/100 + 2ms) before its TTL runs out, counted from the start of the
// call that granted it (the server may count its TTL up to 2ms short: it
// counts in whole milliseconds); from 5ms on, a lease lives at least half
// its TTL from that call.
const MinTTL = kit.MinTTL

// MaxName is the longest name a primitive accepts, in bytes: 1024 (for a
// MultiLock, each of its names). A longer name is refused by the
// constructor with an error matching latchkit.ErrInvalid. A name is an
// identifier (an invoice, a job, a path), written into every key and
// channel of the primitive and every message that wakes its waiters, and
// printed whole by latchctl; hash a longer natural key into one.
const MaxName = kit.MaxName

// WithTTL sets the lease time (default 10s). It must be at least MinTTL
// (5ms): a shorter one is refused by the constructor with an error
// matching latchkit.ErrInvalid.
func WithTTL(d time.Duration) interface {
	Option
	RedlockOption
} {
	return leaseOption(func(c *kit.Config) { c.TTL = d })
}

// WithAutoExtend turns watchdog renewal on or off (default on). A renewing
// lease is extended every TTL/3; when a renewal finds the lease gone, or
// Redis cannot be reached before the TTL runs out, the lease's Context is
// cancelled.
func WithAutoExtend(on bool) interface {
	Option
	RedlockOption
} {
	return leaseOption(func(c *kit.Config) { c.AutoExtend = on })
}

// WithMiddleware adds middleware around every acquisition, the first
// outermost. A middleware sees one call per Lock, TryLock or Acquire, the
// waiting included, and each attempt through Request.OnAttempt; and one
// per latch Wait, whose chain returns a nil Lease (see latchkit.Acquire).
func WithMiddleware(m ...latchkit.Middleware) interface {
	Option
	RedlockOption
	LatchOption
} {
	return anyOption(func(c *kit.Config) { c.Middleware = append(c.Middleware, m...) })
}

// WithRetry sets how Lock and Acquire pace their attempts
// (default retry.Exponential()); for a Latch, how Wait paces its reads
// while the subscription is down, and how TrySetCount and CountDown pace
// their tries while Redis cannot be reached. A nil policy is refused
// (ErrInvalid) by the constructor.
func WithRetry(p retry.Policy) interface {
	Option
	RedlockOption
	LatchOption
} {
	return anyOption(func(c *kit.Config) { c.Retry, c.NoRetry = p, nilness.Is(p) })
}

// WithWaiterTimeout sets how long a waiter keeps its place in a queue
// (a Mutex's or FairSemaphore's queue, an RWLock writer's intent) after its
// last attempt (default 3s). Waiting calls re-attempt every third of it, so
// only an abandoned waiter (its process gone) ever times out. It also
// bounds how long a lock or permit handed over to a waiter waits for that
// waiter to confirm (at most the TTL). It must be at least 3ms.
func WithWaiterTimeout(d time.Duration) Option {
	return lockOption(func(c *kit.Config) { c.WaiterTimeout = d })
}

// WithRetention sets how long a Semaphore's or FairSemaphore's stored
// limit (SetLimit) outlives the name's last grant or SetLimit, and a set
// latch its last change (default 24h). The other kinds keep nothing that
// long (their fences come from the server's clock) and do not use it. It
// must be at least 1ms; every user of a name should give the same.
func WithRetention(d time.Duration) interface {
	Option
	LatchOption
} {
	return keptOption(func(c *kit.Config) { c.Retention = d })
}

// WithInstanceTimeout bounds each call to one instance of a Redlock; it
// must be far below the TTL (the default is a twentieth of it, between 5ms
// and 100ms, and at most half of it), and one at or above the TTL is
// refused by NewRedlock with an error matching latchkit.ErrInvalid.
func WithInstanceTimeout(d time.Duration) RedlockOption {
	return redlockOpt(func(c *kit.Config) { c.InstanceTimeout = d })
}

// ErrNotReplicated is latchkit.ErrNotReplicated, kept here where
// WithReplicaAck is: the error of an attempt whose grant WAIT did not
// confirm on enough replicas.
var ErrNotReplicated = latchkit.ErrNotReplicated

// WithReplicaAck makes a grant, and every extension, count only once WAIT
// confirms that n replicas have it, waiting at most timeout, so that the
// lock survives a failover to one of them; otherwise the attempt fails with
// an error matching ErrNotReplicated (Lock tries again). It needs n >= 1,
// 1ms <= timeout < TTL and a backend.ReplicaAcker (all four adapters are),
// or the constructor returns an error matching latchkit.ErrInvalid.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return lockOption(func(c *kit.Config) { c.AckReplicas, c.AckTimeout = n, timeout })
}

// WithLogger logs what a lease's holder may otherwise not see in time: a
// lease lost (a renewal found it gone or could not reach Redis before the
// TTL ran out, or it expired without auto-extend) at Warn, and each failed
// renewal at Warn with the time the lease has left. Records carry the
// kind, name and fence, never the token. Default: nothing is logged.
func WithLogger(l *slog.Logger) interface {
	Option
	RedlockOption
} {
	return leaseOption(func(c *kit.Config) { c.Log = l })
}

// WithHeldWarning logs one record at Warn for every lease still held d
// after its grant (by this process's clock): its kind, name and fence, its
// age, and the name, host, pid and id of its Client (never the token),
// through WithLogger's logger, or slog.Default() without one. It is per
// primitive, since what is too long depends on the work a lock guards (a
// request's lock, a nightly job's). Default 0: off. A negative d is
// refused by the constructor with an error matching latchkit.ErrInvalid.
// middleware.Tracing's latchkit.lease.oldest_age is the metric of the
// same question.
func WithHeldWarning(d time.Duration) interface {
	Option
	RedlockOption
} {
	return leaseOption(func(c *kit.Config) { c.HeldWarning = d })
}

// WithPrefix sets the key namespace (default "latch:"). It must not be
// empty (latchkit's keys would mix with the application's) nor contain
// '{' or '}', which would break the hash tag that keeps a primitive's keys
// in one Cluster slot.
func WithPrefix(p string) interface {
	Option
	RedlockOption
	LatchOption
} {
	return anyOption(func(c *kit.Config) { c.Prefix = p })
}

// WithOwner returns a context carrying owner, the identity under which a
// ReentrantMutex is re-entered: a Lock under the same owner while it holds
// the lock succeeds at once. Use one owner per logical thread of work (a
// request, a job), never a constant shared by unrelated work. A nil ctx
// gives nil, which every call refuses (latchkit.ErrInvalid).
func WithOwner(ctx context.Context, owner string) context.Context {
	if ctx == nil {
		return nil
	}
	return context.WithValue(ctx, kit.OwnerKey{}, owner)
}

// newSite is a semaphore's configuration (newConfig) and keys in layout l
// (kit.NewSite).
func newSite(l keyspace.Layout, kind latchkit.Kind, cl *kit.Client, name string, limit int, opts []Option) (kit.Site, error) {
	cfg, err := newConfig(kind, cl, name, opts)
	if err != nil {
		return kit.Site{}, err
	}
	return kit.NewSite(l, kind, cfg, name, limit)
}

// newConfig applies opts and checks the arguments every primitive shares,
// its name among them.
func newConfig(kind latchkit.Kind, cl *kit.Client, name string, opts []Option) (kit.Config, error) {
	return newConfigNames(kind, cl, name, []string{name}, opts)
}

// newConfigNames is newConfig for a primitive over names (a MultiLock's,
// whose name is them joined), each checked.
func newConfigNames(kind latchkit.Kind, cl *kit.Client, name string, names []string, opts []Option) (kit.Config, error) {
	return kit.NewConfig(kind, cl, name, names, func(c *kit.Config) {
		for _, o := range opts {
			if o != nil {
				o.lockOption(c)
			}
		}
	})
}

// latchOptions are a Latch's options as kit's, for kit.NewSite.
func latchOptions(opts []LatchOption) []pkit.Option {
	return kitOptions(lockOptions(opts, LatchOption.latchOption))
}

// kitOptions are opts as kit's (each Option is one), for kit.NewSite.
func kitOptions(opts []Option) []pkit.Option {
	if len(opts) == 0 {
		return nil
	}
	out := make([]pkit.Option, 0, len(opts))
	for _, o := range opts {
		out = append(out, o)
	}
	return out
}

// lockOptions are a Redlock's or a Latch's options as the lock family's,
// for newConfig.
func lockOptions[O any](opts []O, apply func(O, *kit.Config)) []Option {
	out := make([]Option, 0, len(opts))
	for _, o := range opts {
		if !nilness.Is(o) {
			out = append(out, lockOption(func(c *kit.Config) { apply(o, c) }))
		}
	}
	return out
}

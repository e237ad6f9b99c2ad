package primitives

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/nilness"
	"github.com/latchkit/latchkit/retry"
)

// defaultTTL is the lease time when WithTTL is not given.
const defaultTTL = 10 * time.Second

// defaultPrefix is the key namespace when WithPrefix is not given.
const defaultPrefix = keyspace.DefaultPrefix

// Option configures a lock, a semaphore or an election: it is what
// NewMutex, NewReentrantMutex, NewFairMutex, NewMultiLock, NewRWLock,
// NewSemaphore, NewFairSemaphore and NewElection take. NewRedlock takes
// RedlockOption and NewLatch LatchOption: an option that does not apply
// to a family does not compile there, and each With function's result
// names the families it fits.
type Option interface{ lockOption(*config) }

// RedlockOption configures a Redlock (NewRedlock).
type RedlockOption interface{ redlockOption(*config) }

// LatchOption configures a Latch (NewLatch).
type LatchOption interface{ latchOption(*config) }

// The options' types, one per set of families an option fits: the
// methods say which, so that not even a type assertion turns an option
// into one of a family it does not fit.
type (
	anyOption   func(*config) // every family
	leaseOption func(*config) // the primitives that grant leases: locks, semaphores, elections, Redlocks
	lockOption  func(*config) // locks, semaphores and elections
	keptOption  func(*config) // those, and latches: the kinds that keep a counter for a retention
	redlockOpt  func(*config) // Redlocks
)

func (o anyOption) lockOption(c *config)      { o(c) }
func (o anyOption) redlockOption(c *config)   { o(c) }
func (o anyOption) latchOption(c *config)     { o(c) }
func (o leaseOption) lockOption(c *config)    { o(c) }
func (o leaseOption) redlockOption(c *config) { o(c) }
func (o lockOption) lockOption(c *config)     { o(c) }
func (o keptOption) lockOption(c *config)     { o(c) }
func (o keptOption) latchOption(c *config)    { o(c) }
func (o redlockOpt) redlockOption(c *config)  { o(c) }

type config struct {
	cl         *Client   // the primitive's (a Redlock's first)
	cls        []*Client // every Client whose Close releases its leases: {cl}, or a Redlock's
	ttl        time.Duration
	autoExtend bool
	mws        []latchkit.Middleware
	retry      retry.Policy
	noRetry    bool // WithRetry(nil): refused
	prefix     string

	waiterTimeout   time.Duration
	retention       time.Duration // WithRetention
	retArg          string        // retention, ms: the last ARGV of every script that raises a fence
	instanceTimeout time.Duration // Redlock; 0: derived from the ttl

	ackReplicas int           // WithReplicaAck; 0: off
	ackTimeout  time.Duration // WithReplicaAck

	log *slog.Logger // WithLogger; nil: discard
}

// MinTTL is the shortest lease time a primitive accepts (WithTTL, and
// Lease.Extend): 3ms, the first whole millisecond above the drift
// allowance of a lease (TTL/100 + 2ms), by which a holder counts its lease
// gone before the server does. A TTL at or below that allowance would make
// a lease lost as soon as it is granted.
const MinTTL = 3 * time.Millisecond

// WithTTL sets the lease time (default 10s). It must be at least MinTTL
// (3ms): a shorter one is refused by the constructor with an error
// matching latchkit.ErrInvalid.
func WithTTL(d time.Duration) interface {
	Option
	RedlockOption
} {
	return leaseOption(func(c *config) { c.ttl = d })
}

// WithAutoExtend turns watchdog renewal on or off (default on). A renewing
// lease is extended every TTL/3; when a renewal finds the lease gone, or
// Redis cannot be reached before the TTL runs out, the lease's Context is
// cancelled.
func WithAutoExtend(on bool) interface {
	Option
	RedlockOption
} {
	return leaseOption(func(c *config) { c.autoExtend = on })
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
	return anyOption(func(c *config) { c.mws = append(c.mws, m...) })
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
	return anyOption(func(c *config) { c.retry, c.noRetry = p, nilness.Is(p) })
}

// WithWaiterTimeout sets how long a waiter keeps its place in a queue
// (a Mutex's or FairSemaphore's queue, an RWLock writer's intent) after its
// last attempt (default 3s). Waiting calls re-attempt every third of it, so
// only an abandoned waiter (its process gone) ever times out. It also
// bounds how long a lock or permit handed over to a waiter waits for that
// waiter to confirm (at most the TTL). It must be at least 3ms.
func WithWaiterTimeout(d time.Duration) Option {
	return lockOption(func(c *config) { c.waiterTimeout = d })
}

// defaultRetention is how long a primitive's fence counter outlives its
// last grant when WithRetention is not given.
const defaultRetention = keyspace.DefaultRetention

// WithRetention sets how long a Semaphore's, FairSemaphore's or RWLock's
// fence counter (and a stored limit) outlives the name's last grant or
// SetLimit, and a set latch its last change (default 24h). A Mutex,
// ReentrantMutex, MultiLock and Election keep no counter and do not use
// it. It must be at least 1ms; every user of a name should give the same.
func WithRetention(d time.Duration) interface {
	Option
	LatchOption
} {
	return keptOption(func(c *config) { c.retention = d })
}

// WithInstanceTimeout bounds each call to one instance of a Redlock; it
// must be far below the TTL (the default is a twentieth of it, between 5ms
// and 100ms).
func WithInstanceTimeout(d time.Duration) RedlockOption {
	return redlockOpt(func(c *config) { c.instanceTimeout = d })
}

// WithReplicaAck makes a grant, and every extension, count only once WAIT
// confirms that n replicas have it, waiting at most timeout, so that the
// lock survives a failover to one of them; otherwise the attempt fails with
// an error matching ErrNotReplicated (Lock tries again). It needs n >= 1,
// 1ms <= timeout < TTL and a backend.ReplicaAcker (all four adapters are),
// or the constructor returns an error matching latchkit.ErrInvalid.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return lockOption(func(c *config) { c.ackReplicas, c.ackTimeout = n, timeout })
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
	return leaseOption(func(c *config) { c.log = l })
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
	return anyOption(func(c *config) { c.prefix = p })
}

type ownerKey struct{}

// WithOwner returns a context carrying owner, the identity under which a
// ReentrantMutex is re-entered: a Lock under the same owner while it holds
// the lock succeeds at once. Use one owner per logical thread of work (a
// request, a job), never a constant shared by unrelated work.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// ownerFrom returns the owner set by WithOwner, if any.
func ownerFrom(ctx context.Context) string {
	s, _ := ctx.Value(ownerKey{}).(string)
	return s
}

// newConfig applies opts and checks the arguments every primitive shares.
func newConfig(kind latchkit.Kind, cl *Client, name string, opts []Option) (config, error) {
	c := config{cl: cl, cls: []*Client{cl}, ttl: defaultTTL, autoExtend: true, prefix: defaultPrefix, waiterTimeout: defaultWaiterTimeout, retention: defaultRetention}
	for _, o := range opts {
		if o != nil {
			o.lockOption(&c)
		}
	}
	fail := func(format string, a ...any) (config, error) {
		return c, invalid("new", kind, name, format, a...)
	}
	if err := checkClient(cl); err != nil {
		return c, &latchkit.OpError{Op: "new", Kind: kind, Name: name, Err: err}
	}
	b := cl.b
	switch {
	case name == "":
		return fail("empty name")
	case c.ttl < MinTTL:
		return fail("%s", shortTTL(c.ttl))
	case c.instanceTimeout < 0:
		return fail("instance timeout %v is negative", c.instanceTimeout)
	case c.waiterTimeout < 3*time.Millisecond:
		return fail("waiter timeout %v is below 3ms", c.waiterTimeout)
	case c.retention < time.Millisecond:
		return fail("retention %v is below 1ms", c.retention)
	case c.prefix == "":
		return fail("empty prefix: latchkit's keys would mix with the application's (the default is %q)", defaultPrefix)
	case strings.ContainsAny(c.prefix, "{}"):
		return fail("prefix %q contains '{' or '}'", c.prefix)
	case c.noRetry:
		return fail("nil retry policy (leave WithRetry out for the default)")
	case c.ackTimeout != 0 && c.ackReplicas < 1:
		return fail("replica ack of %d replicas: it must be at least 1", c.ackReplicas)
	case c.ackReplicas != 0 && c.ackTimeout < time.Millisecond:
		return fail("replica ack timeout %v is below 1ms", c.ackTimeout)
	case c.ackReplicas != 0 && c.ackTimeout >= c.ttl:
		return fail("replica ack timeout %v is not below the ttl %v", c.ackTimeout, c.ttl)
	}
	if _, ok := b.(backend.ReplicaAcker); c.ackReplicas != 0 && !ok {
		return fail("replica ack needs a backend implementing backend.ReplicaAcker (script and WAIT on one connection); %T does not", b)
	}
	if c.retry == nil {
		c.retry = defaultRetry
	}
	c.retArg = ms(c.retention)
	return c, nil
}

// shortTTL says why ttl, below MinTTL, is refused.
func shortTTL(ttl time.Duration) string {
	return fmt.Sprintf("ttl %v is below the least ttl %v: it must exceed the drift allowance (ttl/100 + 2ms) by which a lease counts itself gone before the server does", ttl, MinTTL)
}

// use adds m after the user's middleware: innermost, around the wait
// loop.
func (c *config) use(m latchkit.Middleware) {
	c.mws = append(c.mws[:len(c.mws):len(c.mws)], m)
}

// defaultRetry is the policy when WithRetry is not given. Policies are
// immutable values, safe to share.
var defaultRetry = retry.Exponential()

// lockOptions are a Redlock's or a Latch's options as the lock family's,
// for newConfig.
func lockOptions[O any](opts []O, apply func(O, *config)) []Option {
	out := make([]Option, 0, len(opts))
	for _, o := range opts {
		if !nilness.Is(o) {
			out = append(out, lockOption(func(c *config) { apply(o, c) }))
		}
	}
	return out
}

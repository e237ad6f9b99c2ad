package kit

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

// DefaultWaiterTimeout is how long a waiter's place (a writer's intent on
// an RWLock, a ticket in a FairSemaphore) outlives its last attempt when
// WithWaiterTimeout is not given. A waiting Lock re-attempts at a third of
// it, so a live waiter never loses its place; an abandoned one (its process
// gone) stops blocking others after it.
const DefaultWaiterTimeout = 3 * time.Second

// defaultTTL is the lease time when WithTTL is not given.
const defaultTTL = 10 * time.Second

// DefaultPrefix is the key namespace when WithPrefix is not given.
const DefaultPrefix = keyspace.DefaultPrefix

// Config is a primitive's configuration: the options every primitive
// shares, set by package primitives' With functions over the defaults and
// checked by NewConfig.
type Config struct {
	Cl         *Client   // the primitive's (a Redlock's first)
	Cls        []*Client // every Client whose Close releases its leases: {cl}, or a Redlock's
	TTL        time.Duration
	AutoExtend bool
	Middleware []latchkit.Middleware
	Retry      retry.Policy
	NoRetry    bool // WithRetry(nil): refused
	Prefix     string

	WaiterTimeout   time.Duration
	Retention       time.Duration // WithRetention
	RetArg          string        // retention, ms: the last ARGV of every script that raises a fence
	InstanceTimeout time.Duration // Redlock; 0: derived from the ttl

	AckReplicas int           // WithReplicaAck; 0: off
	AckTimeout  time.Duration // WithReplicaAck

	Log *slog.Logger // WithLogger; nil: discard

	HeldWarning time.Duration // WithHeldWarning; 0: off
}

// Option is an option every primitive of the lock family takes
// (kit.Option, and the values package primitives' With functions return):
// its effect on a Config. A nil c changes nothing.
type Option interface{ ApplyOption(c *Config) }

// ApplyOptions applies opts, nil ones skipped, to c.
func ApplyOptions[O Option](opts []O, c *Config) {
	for _, o := range opts {
		if !nilness.Is(o) {
			o.ApplyOption(c)
		}
	}
}

// MinTTL is the shortest lease time a primitive accepts (WithTTL, and
// Lease.Extend): 5ms, the first whole millisecond at which a lease lives at
// least half its TTL from the call that granted it, the drift allowance
// (Drift: TTL/100 + 2ms) taking at most the other half.
const MinTTL = 5 * time.Millisecond

// MaxName is the longest name a primitive accepts, in bytes (each of a
// MultiLock's names): see primitives.MaxName.
const MaxName = 1024

// defaultRetention is how long a stored limit (SetLimit) or a set latch
// outlives its last write when WithRetention is not given.
const defaultRetention = keyspace.DefaultRetention

// OwnerKey is the context key of the owner primitives.WithOwner sets (see
// ownerFrom).
type OwnerKey struct{}

// ownerFrom returns the owner set by WithOwner, if any.
func ownerFrom(ctx context.Context) string {
	s, _ := ctx.Value(OwnerKey{}).(string)
	return s
}

// shortTTL says why ttl, below MinTTL, is refused.
func shortTTL(ttl time.Duration) string {
	return fmt.Sprintf("ttl %v is below the least ttl %v: a lease must live at least half its ttl, and the drift allowance (ttl/100 + 2ms), by which it counts itself gone before the server does, takes the rest", ttl, MinTTL)
}

// Use adds m after the user's middleware: innermost, around the wait
// loop.
func (c *Config) Use(m latchkit.Middleware) {
	c.Middleware = append(c.Middleware[:len(c.Middleware):len(c.Middleware)], m)
}

// CheckCtx is the error of a call given a nil ctx, bad input refused
// before anything is sent (backend.ErrNilContext, matching
// latchkit.ErrInvalid); nil otherwise.
func CheckCtx(ctx context.Context) error {
	if ctx == nil {
		return backend.ErrNilContext
	}
	return nil
}

// BeginCall is Begin for a call given ctx, which is refused first when it
// is nil (CheckCtx).
func (c *Config) BeginCall(ctx context.Context) error {
	if err := CheckCtx(ctx); err != nil {
		return err
	}
	return c.Begin()
}

// defaultRetry is the policy when WithRetry is not given. Policies are
// immutable values, safe to share.
var defaultRetry = retry.Exponential()

// NewConfig is the configuration of a primitive of kind named name on cl:
// the defaults, then apply (its options), checked. names are the names the
// primitive locks, each checked (not empty, at most MaxName bytes): {name},
// or a MultiLock's, whose name is them joined.
func NewConfig(kind latchkit.Kind, cl *Client, name string, names []string, apply func(*Config)) (Config, error) {
	c := Config{Cl: cl, Cls: []*Client{cl}, TTL: defaultTTL, AutoExtend: true, Prefix: DefaultPrefix, WaiterTimeout: DefaultWaiterTimeout, Retention: defaultRetention}
	apply(&c)
	fail := func(format string, a ...any) (Config, error) {
		return c, Invalid("new", kind, name, format, a...)
	}
	if err := CheckClient(cl); err != nil {
		return c, &latchkit.OpError{Op: "new", Kind: kind, Name: name, Err: err}
	}
	b := cl.b
	for _, n := range names {
		switch {
		case n == "":
			return fail("an empty name")
		case len(n) > MaxName:
			return fail("name of %d bytes, above the longest, %d (primitives.MaxName): a name is an identifier; hash a longer key into one", len(n), MaxName)
		}
	}
	switch {
	case len(names) == 0:
		return fail("no names")
	case c.TTL < MinTTL:
		return fail("%s", shortTTL(c.TTL))
	case c.HeldWarning < 0:
		return fail("held warning %v is negative (0 turns it off)", c.HeldWarning)
	case c.InstanceTimeout < 0:
		return fail("instance timeout %v is negative", c.InstanceTimeout)
	case c.WaiterTimeout < 3*time.Millisecond:
		return fail("waiter timeout %v is below 3ms", c.WaiterTimeout)
	case c.Retention < time.Millisecond:
		return fail("retention %v is below 1ms", c.Retention)
	case c.Prefix == "":
		return fail("empty prefix: latchkit's keys would mix with the application's (the default is %q)", DefaultPrefix)
	case strings.ContainsAny(c.Prefix, "{}"):
		return fail("prefix %q contains '{' or '}'", c.Prefix)
	case c.NoRetry:
		return fail("nil retry policy (leave WithRetry out for the default)")
	case c.AckTimeout != 0 && c.AckReplicas < 1:
		return fail("replica ack of %d replicas: it must be at least 1", c.AckReplicas)
	case c.AckReplicas != 0 && c.AckTimeout < time.Millisecond:
		return fail("replica ack timeout %v is below 1ms", c.AckTimeout)
	case c.AckReplicas != 0 && c.AckTimeout >= c.TTL:
		return fail("replica ack timeout %v is not below the ttl %v", c.AckTimeout, c.TTL)
	}
	if _, ok := b.(backend.ReplicaAcker); c.AckReplicas != 0 && !ok {
		return fail("replica ack needs a backend implementing backend.ReplicaAcker (script and WAIT on one connection); %T does not", b)
	}
	if c.Retry == nil {
		c.Retry = defaultRetry
	}
	c.RetArg = Ms(c.Retention)
	return c, nil
}

package backend

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"time"
)

// Value is a normalized Redis reply. It is always one of:
//
//	nil      a nil reply (Lua false, a nil bulk string)
//	int64    an integer reply (Lua numbers are truncated to integers by Redis)
//	string   a bulk or status reply
//	[]Value  an array reply, whose elements are Values again
//
// No other type is ever returned by a conforming Backend.
type Value = any

// Script is a Lua script with its SHA1 computed once. Scripts are created at
// package initialization and shared by every backend.
type Script struct {
	src  string
	hash string
}

// NewScript returns a Script for the Lua source src.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, hash: hex.EncodeToString(sum[:])}
}

// Source is the Lua source ("" for a nil Script, which every Backend
// refuses).
func (s *Script) Source() string {
	if s == nil {
		return ""
	}
	return s.src
}

// Hash is the hex SHA1 of the source, as EVALSHA wants it ("" for a nil
// Script).
func (s *Script) Hash() string {
	if s == nil {
		return ""
	}
	return s.hash
}

// Message is a message received on a subscribed channel.
type Message struct {
	Channel string
	Payload string
}

// Handler receives the events of a Subscription. Its functions are called
// from one goroutine per subscription, in order; they must not block. A nil
// function is not called.
type Handler struct {
	// Message is called for every message on a subscribed channel.
	Message func(Message)
	// Dropped is called once when the subscription's connection is lost or
	// the subscription can no longer deliver messages. After it, no more
	// messages arrive and the Subscription is dead: the caller opens a new
	// one. It is not called after Close.
	Dropped func(err error)
}

// Backend is what a Redis driver provides. Implementations must be safe for
// concurrent use. They never retry and never sleep: the portable layers do.
// Errors are wrapped so that errors.Is matches both the driver's own error
// and, where it applies, ErrUnavailable or ErrClosed; context errors are
// matched by errors.Is(err, context.Canceled / DeadlineExceeded). Bad input
// (a nil context, ErrNilContext; a nil script) is refused with an error
// matching ErrInvalid before anything is sent, by every method of the
// Backend, its optional interfaces and its Subscription.
type Backend interface {
	// Eval runs s with the given keys and arguments: EVALSHA, then EVAL when
	// the server answers NOSCRIPT. A nil reply is (nil, nil). A script error
	// or error reply is returned as an error wrapping a *ReplyError.
	Eval(ctx context.Context, s *Script, keys []string, args []string) (Value, error)
	// Subscribe opens a subscription on one connection, initially to no
	// channel, delivering its events to h.
	Subscribe(ctx context.Context, h Handler) (Subscription, error)
}

// Subscription is one pub/sub connection whose channel set grows and shrinks.
// Its methods are safe for concurrent use.
type Subscription interface {
	// Add subscribes to channels. It returns once the server has confirmed
	// the subscription, so that a message published after Add returns is
	// delivered.
	Add(ctx context.Context, channels ...string) error
	// Remove unsubscribes from channels.
	Remove(ctx context.Context, channels ...string) error
	// Close ends the subscription and releases its connection.
	Close() error
}

// Unwrapper is an optional interface of a Backend that hands back the native
// client it wraps: As sets target (a pointer to the client's type) and
// reports whether it could. Callers fall back to not using the native
// client when a Backend does not implement it.
type Unwrapper interface {
	As(target any) bool
}

// ReplicaAcker is an optional interface of a Backend that can tell how many
// replicas a script's writes reached: it runs the script, then WAIT on the
// same connection. WAIT counts only the writes made on its own connection
// and cannot run inside a script, so Eval followed by a separate command
// would count nothing. primitives.WithReplicaAck needs it; a Backend without
// it makes that option fail with an error wrapping latchkit.ErrInvalid.
type ReplicaAcker interface {
	// EvalAck runs s as Eval does, then WAIT replicas timeout on the
	// connection that ran it (on a Cluster, the connection to the master
	// of the keys' slot). It returns the script's reply and the number of
	// replicas that had acknowledged the connection's writes when WAIT
	// returned. timeout must stay below the context's deadline and the
	// client's read timeout.
	EvalAck(ctx context.Context, s *Script, keys, args []string, replicas int, timeout time.Duration) (Value, int, error)
}

// Cluster is an optional interface of a Backend whose keys may live on
// different servers (Redis Cluster). A script may only touch keys of one
// slot there, so primitives over several names (MultiLock) run one script
// per name instead of one for all. A Backend that does not implement it is
// taken to be a single server (or a Sentinel-managed one): a wrapper
// around a cluster Backend forwards it, else a MultiLock over names of
// several slots sends their keys in one script, which latchkit's rueidis
// and valkey-go adapters refuse with an error matching ErrInvalid (and a
// Cluster answers CROSSSLOT).
type Cluster interface {
	// Cluster reports whether keys of different hash slots may live on
	// different servers.
	Cluster() bool
}

// Validator is an optional interface of a Backend whose adapter accepts a
// client that it cannot serve correctly (a client type whose routing of
// scripts or subscriptions latchkit's guarantees cannot rest on). The
// constructors of package primitives call Validate and refuse a backend
// that returns an error, with an error wrapping latchkit.ErrInvalid and
// the reason, before anything is written.
type Validator interface {
	Validate() error
}

// IsCluster reports whether b says it is a cluster.
func IsCluster(b Backend) bool {
	c, ok := b.(Cluster)
	return ok && c.Cluster()
}

// Call is one script call of a batch (Batcher.EvalBatch): the script, its
// keys and arguments, and, once the batch has run, its reply and error
// exactly as Eval would have returned them.
type Call struct {
	Script *Script
	Keys   []string
	Args   []string
	// Value is the normalized reply (nil for a nil reply or an error).
	Value Value
	// Err is the call's own error, wrapped as Eval wraps it: an error
	// reply of one call (WRONGTYPE, a script error) leaves the others
	// alone; a connection failure or a done context fails every call it
	// reached.
	Err error
}

// Batcher is an optional interface of a Backend that runs many script
// calls in few round trips (a pipeline): what the lease renewer uses to
// renew thousands of leases without a round trip each. Each call runs by
// EVALSHA, then by EVAL when the server answers NOSCRIPT, as Eval does.
// Calls may touch keys of different hash slots: on a Cluster the adapter
// routes each to its slot's master. The calls are not a transaction, and
// their order of execution is only guaranteed within one slot.
type Batcher interface {
	// EvalBatch runs calls and fills in each call's Value and Err in
	// place. It returns when every call has its outcome; a done ctx gives
	// every call not yet answered the context's error.
	EvalBatch(ctx context.Context, calls []Call)
}

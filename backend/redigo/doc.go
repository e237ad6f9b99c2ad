// Package redigo adapts a *redis.Pool of github.com/gomodule/redigo to
// backend.Backend.
//
// # One server
//
// redigo talks to one server: it has no Cluster client and routes nothing
// by hash slot. The adapter therefore serves a single redis-server (or
// Valkey), or a Sentinel-managed master when the pool's Dial function asks
// the sentinels for the master's address (SENTINEL get-master-addr-by-name)
// before it dials: redigo has no Sentinel support of its own. The
// conformance suite runs on Sentinel that way (see conformance_test.go).
// After a failover, connections the pool keeps to the old master fail, or,
// once it rejoins as a replica, answer READONLY: give such a pool a
// TestOnBorrow that checks ROLE, or a short MaxConnLifetime. The adapter
// does not implement backend.Cluster, so primitives over several
// names run one script for all their keys, as on any single server. A pool
// whose connections reach a Redis Cluster node cannot work: the node
// answers MOVED (or ASK, CROSSSLOT) for keys of other slots, and the
// adapter returns that reply as an error saying so (a *backend.ReplyError).
// Use the goredis or rueidis adapter with a Cluster.
//
// # Deadlines
//
// Every call returns by its context's deadline or cancellation, whatever
// the pool's options, even with no read timeout at all (redigo's default)
// against a server that accepts connections and never answers. Commands
// run with redigo's DoContext, which closes the connection when the context
// ends, so a connection whose reply is still on its way is discarded, never
// returned to the pool where the next call would read the stale reply.
// Taking a connection from the pool may block where redigo does not watch
// the context (a Dial without a context, a TestOnBorrow that pings), so a
// call whose context can end runs on a goroutine of its own and returns at
// the context's end, abandoning the call: it ends when redigo does, and may
// still run on the server, which latchkit already treats as an unknown
// outcome. The pool's Dial must return connections that implement
// redis.ConnWithContext and redis.ConnWithTimeout, as redis.Dial's do.
//
// # Subscriptions
//
// Subscribe dials a connection of its own with the pool's DialContext (or
// Dial), outside the pool: it is not counted in MaxActive, and closing the
// subscription closes it. It is kept alive by a PING every health interval
// (WithHealthCheck); when no reply of any kind arrives for two intervals
// the connection is taken as dead and the subscription reports itself
// dropped.
//
// # Errors
//
// A refused or broken connection and an exhausted pool match
// backend.ErrUnavailable, a closed pool backend.ErrClosed (redigo exports
// no error for it: its message is matched), an error reply a
// *backend.ReplyError; the driver's own error stays reachable with
// errors.As.
package redigo

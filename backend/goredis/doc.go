// Package goredis adapts github.com/redis/go-redis/v9 to backend.Backend.
//
// *redis.Client, *redis.ClusterClient and the Sentinel-backed failover
// client (a *redis.Client) work. A *redis.Ring is refused (by the
// backend's Validate, see backend.Validator): it shards keys by hash with
// neither a Cluster's redirects nor pub/sub that follows the keys, so a
// MultiLock over names on two shards would hold nothing on one of them,
// and release messages would miss their waiters. Shard with a Redis
// Cluster instead, or use a Redlock over independent servers.
//
// Every call returns by its context's deadline or cancellation, whatever
// the client's options. go-redis itself ignores context deadlines unless
// the client is created with ContextTimeoutEnabled: true; without it a call
// to a hung server returns only after the client's ReadTimeout (or when
// the server resumes), whatever the context says. So when the client does
// not say it honours contexts (the option is false, or the client is not
// one of go-redis's own types and its options cannot be read), the adapter
// runs each call on a goroutine of its own and returns at the context's
// end, abandoning the call: it runs on in the background until go-redis's
// own timeouts end it, holding its connection meanwhile, and its result is
// discarded. An abandoned call may still run on the server, which latchkit
// already treats as an unknown outcome. Setting the option remains
// recommended, because it avoids a goroutine per call and frees the
// connection at the deadline, but safety no longer depends on it:
//
//	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	b := goredis.New(client)
//
// A subscription's Add and Remove always run that way: go-redis holds a
// subscription's lock while it redials the subscription's connection,
// whatever the option says.
//
// go-redis also retries a command that timed out (Options.MaxRetries); the
// latchkit scripts are written so that running an attempt twice is safe.
//
// A call its context cuts short while go-redis is still trying to connect
// ends, from go-redis, with the context's error alone; the adapter watches
// the client's dials (a hook New adds, below) so that such a call also
// matches latchkit.ErrUnavailable and names the failed dial, as the other
// drivers' errors do.
//
// # The dial hook
//
// New adds a hook to c (redis.Hook; once per client, however many
// backends are made over it) that watches its dials: it keeps the time and
// error of the latest one, and hooks nothing else (commands and pipelines
// do not go through it). A call that go-redis ends with no more than its
// context's error, which it does when the context ends while it is still
// dialing or pausing between its own retries (a call against a dead
// address lasts about 1.7 s with the default options), then also matches
// latchkit.ErrUnavailable and names the dial's error ("connection
// refused"), when the latest dial since the call began failed. The hook
// goes on a *redis.Client (a Sentinel failover client included) and, for a
// *redis.ClusterClient, on each node client the cluster client creates
// after New (through OnNewNode): nodes it created before are not watched.
// Other clients (a *redis.Ring, a wrapper of a client) get no hook; a call
// cut short there says only that its context ended. The hook is one more
// in the client's list: go-redis's AutoPipeliner, on a client with hooks,
// arms its guard against a hook reading a result inside the chain (a
// goroutine lookup per batch).
package goredis

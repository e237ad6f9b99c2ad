// Package kit is the machinery every primitive of package primitives
// shares, so that primitives holds one file per primitive over it:
//
//   - Client: the calls in flight, Close, and the goroutines a Client owns
//     (renewers, the pub/sub Hub, give-backs);
//   - Config: the options every primitive shares, checked (NewConfig);
//   - the wait loop (Config.Acquire over an Acquisition): attempts, waiting
//     for a release message, the retry policy, and the give-back of what
//     an acquisition that ends without a grant may hold or have queued;
//   - Lease, the lease of every primitive, over a Holder (a primitive's
//     owner-checked extend, release and TTL), and the renewer that keeps
//     auto-extended leases alive, batching the holders that are a
//     RenewCaller;
//   - the script loader (LoadScript), which puts the blocks of
//     lua/prelude.lua a script uses in front of it, and the decoding of
//     script replies and errors (Pair, Flag, Remaining, ScriptErr, KeyErr).
//
// The key layout is package keyspace's. Nothing here is API: its exported
// names exist for package primitives (and its tests), and may change with
// it. A public kit for user-defined primitives may grow from it later.
package kit

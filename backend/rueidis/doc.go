// Package rueidis adapts github.com/redis/rueidis to backend.Backend.
//
// What the adapter does lives in respkit.RESP, shared with the adapter
// over valkey-go (a fork of rueidis of the same shape) and generic over
// the driver's types: this package only instantiates it for rueidis and
// gives it rueidis's pub/sub hooks.
//
// Every call returns by its context's deadline or cancellation. rueidis
// honours contexts on an open connection, but not everywhere around a
// dial: a call that finds its connection being dialed by another call
// waits for that dial (bounded by the other call's context, or by the
// dial timeout, 5 s by default); a dial's handshake ignores a cancellation
// without a deadline until the dial timeout; and a dedicated connection
// (a subscription's) is dialed without the caller's context. So a call
// whose context can end runs on a goroutine of its own, and returns at the
// context's end, abandoning the call: it runs on in the background until
// rueidis's own timeouts end it, and may still run on the server, which
// latchkit already treats as an unknown outcome. Eval does this at the
// cost of one allocation (the goroutine's; the state it shares with the
// caller is pooled); a call with a context that can never end
// (context.Background()) is made directly.
//
// Note that without a deadline a read-only command to an unreachable
// server may be retried indefinitely: give latchkit calls a context with a
// deadline.
//
// Against miniredis (the embedded default of the demo and tests) the client
// needs DisableCache: true (miniredis has no CLIENT TRACKING) and
// AlwaysRESP2: true (with RESP3 a connection that ran SUBSCRIBE refuses
// other commands on miniredis). A real Redis needs neither.
package rueidis

// Package valkey adapts github.com/valkey-io/valkey-go, Valkey's official
// Go client, to backend.Backend. It serves valkey-go's single-server,
// Sentinel (ClientOption.Sentinel) and Cluster clients, against Valkey or
// Redis alike (the protocol is the same).
//
// valkey-go is a fork of rueidis with renamed types, so what the adapter
// does lives in respkit.RESP, shared with the rueidis adapter and generic
// over the driver's types: this package only instantiates it for
// valkey-go and gives it valkey-go's pub/sub hooks. It behaves as the
// rueidis adapter does:
//
// Every call returns by its context's deadline or cancellation, including
// on a client made with default options. valkey-go honours contexts on an
// open connection but not everywhere around a dial (a call waits for
// another call's dial; a handshake ignores a cancellation without a
// deadline; a subscription's dedicated connection is dialed without the
// caller's context), so a call whose context can end runs on a goroutine
// of its own and returns at the context's end, abandoning the call: it
// runs on until valkey-go's own timeouts end it, and may still run on the
// server, an unknown outcome latchkit already allows for. A call with a
// context that can never end (context.Background()) is made directly.
// Without a deadline a read-only command to an unreachable server may be
// retried indefinitely: give latchkit calls a context with a deadline.
//
// Errors are classified as for every adapter: valkey-go's ErrClosing and
// ErrDedicatedClientRecycled as backend.ErrClosed, an error reply as a
// *backend.ReplyError (NOSCRIPT is answered by EVAL), anything else,
// connection loss included, as backend.ErrUnavailable.
//
// Against miniredis (the embedded default of the demo and tests) the
// client needs DisableCache: true (miniredis has no CLIENT TRACKING) and
// AlwaysRESP2: true (with RESP3 a connection that ran SUBSCRIBE refuses
// other commands on miniredis). A real server needs neither.
//
// valkey-go's options that send commands to replicas (ReplicaOnly,
// SendToReplicas) do not suit latchkit, whose scripts write: the adapter
// cannot see them on a client, so it cannot refuse them.
package valkey

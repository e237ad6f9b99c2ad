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

import (
	vk "github.com/valkey-io/valkey-go"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/nilness"
	"github.com/latchkit/latchkit/internal/respkit"
)

// adapter is the backend.Backend over a valkey-go client that New returns:
// respkit.RESP, whose methods (Eval, EvalBatch, EvalAck, Subscribe, As,
// Cluster) are written once for rueidis and valkey-go.
type adapter = respkit.RESP[vk.Completed, vk.ValkeyResult, vk.ValkeyMessage, *vk.ValkeyMessage, *vk.ValkeyError]

// New returns the backend for primitives.NewClient over c, which the
// caller keeps and closes; nil for a nil c (which NewClient refuses). It
// is a backend.Batcher, ReplicaAcker, Cluster and Unwrapper (As takes a *valkey.Client).
func New(c vk.Client) backend.Backend {
	if nilness.Is(c) {
		return nil // refused by every constructor of package primitives (ErrInvalid)
	}
	hooks := func(deliver func(backend.Message)) vk.PubSubHooks {
		return vk.PubSubHooks{OnMessage: func(m vk.PubSubMessage) { deliver(backend.Message{Channel: m.Channel, Payload: m.Message}) }}
	}
	return respkit.NewRESP(c, vk.IsValkeyErr, hooks, vk.ErrClosing, vk.ErrDedicatedClientRecycled)
}

var (
	_ backend.Backend      = (*adapter)(nil)
	_ backend.Batcher      = (*adapter)(nil)
	_ backend.ReplicaAcker = (*adapter)(nil)
	_ backend.Unwrapper    = (*adapter)(nil)
	_ backend.Cluster      = (*adapter)(nil)
)

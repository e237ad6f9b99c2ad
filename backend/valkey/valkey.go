// Package valkey adapts github.com/valkey-io/valkey-go, Valkey's official
// Go client, to backend.Backend. It serves valkey-go's single-server,
// Sentinel (ClientOption.Sentinel) and Cluster clients, against Valkey or
// Redis alike (the protocol is the same).
//
// valkey-go is a fork of rueidis with renamed types, so what the adapter
// does lives in backend.RESP, shared with the rueidis adapter: this
// package only says how valkey-go builds and sends the few commands it
// needs. It behaves as the rueidis adapter does:
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
)

// Backend is a backend.Backend over a valkey-go client. Its Eval,
// EvalBatch (backend.Batcher), EvalAck (backend.ReplicaAcker) and
// Subscribe are those of the embedded backend.RESP.
type Backend struct {
	c vk.Client
	*backend.RESP[vk.Completed, vk.ValkeyResult, vk.ValkeyMessage, *vk.ValkeyMessage, *vk.ValkeyError]
}

// New returns a Backend over c. The caller keeps ownership of c: closing
// the Backend does not close the client.
func New(c vk.Client) *Backend {
	return &Backend{c: c, RESP: backend.NewRESP[vk.Completed, vk.ValkeyResult, vk.ValkeyMessage, *vk.ValkeyMessage, *vk.ValkeyError](driver(c))}
}

// driver is how c builds and sends commands.
func driver(c vk.Client) backend.RESPDriver[vk.Completed, vk.ValkeyResult] {
	return backend.RESPDriver[vk.Completed, vk.ValkeyResult]{
		Do: c.Do, DoMulti: c.DoMulti,
		Script: func(s *backend.Script, keys, args []string, source bool) vk.Completed {
			if source {
				return c.B().Eval().Script(s.Source()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
			}
			return c.B().Evalsha().Sha1(s.Hash()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		},
		Wait: func(n, ms int64) vk.Completed { return c.B().Wait().Numreplicas(n).Timeout(ms).Build() },
		Ping: func() vk.Completed { return c.B().Ping().Build() },
		Channels: func(unsubscribe bool, channels []string) vk.Completed {
			if unsubscribe {
				return c.B().Unsubscribe().Channel(channels...).Build()
			}
			return c.B().Subscribe().Channel(channels...).Build()
		},
		Dedicate: func(deliver func(backend.Message)) (backend.RESPConn[vk.Completed, vk.ValkeyResult], <-chan error) {
			dc, cancel := c.Dedicate()
			ended := dc.SetPubSubHooks(vk.PubSubHooks{OnMessage: func(m vk.PubSubMessage) {
				deliver(backend.Message{Channel: m.Channel, Payload: m.Message})
			}})
			return backend.RESPConn[vk.Completed, vk.ValkeyResult]{Do: dc.Do, Close: func() { dc.Close(); cancel() }}, ended
		},
		Closed: []error{vk.ErrClosing, vk.ErrDedicatedClientRecycled},
	}
}

// As sets target, which must be a *valkey.Client (of valkey-go), to the
// wrapped client.
func (b *Backend) As(target any) bool {
	t, ok := target.(*vk.Client)
	if ok {
		*t = b.c
	}
	return ok
}

// Cluster reports whether the client spreads keys over a Cluster.
func (b *Backend) Cluster() bool { return b.c.Mode() == vk.ClientModeCluster }

// Normalize turns a valkey-go reply into a backend.Value (see
// backend.NormalizeRESP).
func Normalize(m vk.ValkeyMessage) (backend.Value, error) { return backend.NormalizeRESP(&m) }

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Batcher      = (*Backend)(nil)
	_ backend.ReplicaAcker = (*Backend)(nil)
	_ backend.Unwrapper    = (*Backend)(nil)
	_ backend.Cluster      = (*Backend)(nil)
)

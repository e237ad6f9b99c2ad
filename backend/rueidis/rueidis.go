// Package rueidis adapts github.com/redis/rueidis to backend.Backend.
//
// What the adapter does lives in backend.RESP, shared with the adapter
// over valkey-go (a fork of rueidis of the same shape): this package only
// says how rueidis builds and sends the few commands it needs.
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

import (
	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/backend"
)

// Backend is a backend.Backend over a rueidis client. Its Eval, EvalBatch
// (backend.Batcher), EvalAck (backend.ReplicaAcker) and Subscribe are
// those of the embedded backend.RESP.
type Backend struct {
	c rd.Client
	*backend.RESP[rd.Completed, rd.RedisResult, rd.RedisMessage, *rd.RedisMessage, *rd.RedisError]
}

// New returns a Backend over c. The caller keeps ownership of c: closing
// the Backend does not close the client.
func New(c rd.Client) *Backend {
	return &Backend{c: c, RESP: backend.NewRESP[rd.Completed, rd.RedisResult, rd.RedisMessage, *rd.RedisMessage, *rd.RedisError](driver(c))}
}

// driver is how c builds and sends commands.
func driver(c rd.Client) backend.RESPDriver[rd.Completed, rd.RedisResult] {
	return backend.RESPDriver[rd.Completed, rd.RedisResult]{
		Do: c.Do, DoMulti: c.DoMulti,
		Script: func(s *backend.Script, keys, args []string, source bool) rd.Completed {
			if source {
				return c.B().Eval().Script(s.Source()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
			}
			return c.B().Evalsha().Sha1(s.Hash()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		},
		Wait: func(n, ms int64) rd.Completed { return c.B().Wait().Numreplicas(n).Timeout(ms).Build() },
		Ping: func() rd.Completed { return c.B().Ping().Build() },
		Channels: func(unsubscribe bool, channels []string) rd.Completed {
			if unsubscribe {
				return c.B().Unsubscribe().Channel(channels...).Build()
			}
			return c.B().Subscribe().Channel(channels...).Build()
		},
		Dedicate: func(deliver func(backend.Message)) (backend.RESPConn[rd.Completed, rd.RedisResult], <-chan error) {
			dc, cancel := c.Dedicate()
			ended := dc.SetPubSubHooks(rd.PubSubHooks{OnMessage: func(m rd.PubSubMessage) {
				deliver(backend.Message{Channel: m.Channel, Payload: m.Message})
			}})
			return backend.RESPConn[rd.Completed, rd.RedisResult]{Do: dc.Do, Close: func() { dc.Close(); cancel() }}, ended
		},
		Closed: []error{rd.ErrClosing, rd.ErrDedicatedClientRecycled},
	}
}

// As sets target, which must be a *rueidis.Client, to the wrapped client.
func (b *Backend) As(target any) bool {
	t, ok := target.(*rd.Client)
	if ok {
		*t = b.c
	}
	return ok
}

// Cluster reports whether the client spreads keys over a Redis Cluster.
func (b *Backend) Cluster() bool { return b.c.Mode() == rd.ClientModeCluster }

// Normalize turns a rueidis reply into a backend.Value (see
// backend.NormalizeRESP).
func Normalize(m rd.RedisMessage) (backend.Value, error) { return backend.NormalizeRESP(&m) }

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Batcher      = (*Backend)(nil)
	_ backend.ReplicaAcker = (*Backend)(nil)
	_ backend.Unwrapper    = (*Backend)(nil)
	_ backend.Cluster      = (*Backend)(nil)
)

package rueidis

import (
	rd "github.com/redis/rueidis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/nilness"
	"github.com/latchkit/latchkit/internal/respkit"
)

// adapter is the backend.Backend over a rueidis client that New returns:
// respkit.RESP, whose methods (Eval, EvalBatch, EvalAck, Subscribe, As,
// Cluster) are written once for rueidis and valkey-go.
type adapter = respkit.RESP[rd.Completed, rd.RedisResult, rd.RedisMessage, *rd.RedisMessage, *rd.RedisError]

// New returns the backend for primitives.NewClient over c, which the
// caller keeps and closes; nil for a nil c (which NewClient refuses). It
// is a backend.Batcher, ReplicaAcker, Cluster and Unwrapper (As takes a *rueidis.Client).
func New(c rd.Client) backend.Backend {
	if nilness.Is(c) {
		return nil // refused by every constructor of package primitives (ErrInvalid)
	}
	hooks := func(deliver func(backend.Message)) rd.PubSubHooks {
		return rd.PubSubHooks{OnMessage: func(m rd.PubSubMessage) { deliver(backend.Message{Channel: m.Channel, Payload: m.Message}) }}
	}
	return respkit.NewRESP(c, rd.IsRedisErr, hooks, rd.ErrClosing, rd.ErrDedicatedClientRecycled)
}

var (
	_ backend.Backend      = (*adapter)(nil)
	_ backend.Batcher      = (*adapter)(nil)
	_ backend.ReplicaAcker = (*adapter)(nil)
	_ backend.Unwrapper    = (*adapter)(nil)
	_ backend.Cluster      = (*adapter)(nil)
)

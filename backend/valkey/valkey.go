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

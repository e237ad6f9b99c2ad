// Package redigoreply turns replies of github.com/gomodule/redigo into
// backend.Values: what the redigo adapter (backend/redigo) does with every
// reply, and what latchctl does with the replies of its plain commands
// over a redigo pool.
package redigoreply

import (
	"errors"
	"strings"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/adapterkit"
)

// Normalize turns a redigo reply into a backend.Value: a bulk string
// ([]byte) into a string, a status reply stays a string, an integer an
// int64, an array a []backend.Value. An error reply, anywhere in the reply,
// is returned as an error wrapping a *backend.ReplyError (its message as
// Msg gives it); a type redigo never returns is an error, never a panic.
func Normalize(v any) (backend.Value, error) {
	switch x := v.(type) {
	case nil, int64, string:
		return x, nil
	case []byte:
		return string(x), nil
	case []any:
		return adapterkit.NormalizeArray(x, Normalize)
	case redis.Error:
		return nil, &backend.Error{Class: &backend.ReplyError{Msg: Msg(x)}, Cause: x}
	}
	return nil, BadReply(errUnexpected)
}

var errUnexpected = errors.New("redigo: unexpected reply type")

// BadReply is the error of a reply that is not what its command answers:
// a *backend.ReplyError saying so, caused by err.
func BadReply(err error) error {
	return &backend.Error{Class: &backend.ReplyError{Msg: "unexpected reply: " + err.Error()}, Cause: err}
}

// Msg is the message of an error reply, explained first when it says
// that the server is a Cluster node: that is no passing redirect (which
// backend.Wrap would read as Redis unavailable for now) but a pool that
// can never work, a *backend.ReplyError.
func Msg(e redis.Error) string {
	msg := strings.TrimSpace(string(e))
	for _, p := range []string{"MOVED ", "ASK ", "CROSSSLOT "} {
		if strings.HasPrefix(msg, p) {
			return "the redigo adapter serves a single server, not a Redis Cluster (use the goredis or rueidis adapter): " + msg
		}
	}
	return msg
}

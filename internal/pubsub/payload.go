package pubsub

import (
	"crypto/rand"
	"encoding/hex"
	"reflect"
	"strconv"

	"github.com/latchkit/latchkit/backend"
)

// The payloads of release messages. Scripts publish them (package
// primitives puts these very constants into its Lua), and the Hub wakes
// waiters by them.
const (
	// WakeOne is the payload of a release that freed one holder: it wakes
	// one local waiter of the channel. Any positive count n wakes n.
	WakeOne = "1"
	// WakeAll is the payload of a release message that frees every waiter
	// (a writer's release of an RWLock, a forced release).
	WakeAll = "*"
	// TargetPrefix starts the payload of a targeted release message (see
	// Target).
	TargetPrefix = "="
)

// Target is the payload of a release message that wakes only the waiter that
// joined with id (see JoinAs): a release that handed the primitive over to
// that waiter. Processes without such a waiter ignore it. The payload may
// go on after the id, past a space, with what the hand-over tells its new
// holder: the waiter reads it with Waiter.Handed (Wake.Handed).
func Target(id string) string { return TargetPrefix + id }

// Inbox is the channel on which a release hands a primitive over to a
// waiter of this process on b (see Target): the primitive's release channel
// plus an id of b unique in the process and a random id of the process, so
// that a hand-over's message reaches one connection, not every process
// subscribed to the release channel. It is stable for b's life.
func Inbox(b backend.Backend, channel string) string {
	id := processID
	if v := reflect.ValueOf(b); v.Kind() == reflect.Pointer {
		id += "." + strconv.FormatUint(uint64(v.Pointer()), 36)
	}
	return channel + ":to:" + id
}

// processID tells this process's inboxes from other processes'. Set once.
var processID = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

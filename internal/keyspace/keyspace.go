// Package keyspace is the key layout of every primitive: the one
// description of the keys each kind keeps, in its scripts' order, which the
// primitives make their keys from, latchctl reads and releases primitives
// by, and the conformance suite and the fault tests inspect them by.
package keyspace

import (
	"strings"
	"time"
)

// Layout is the key layout of one kind of primitive: the keys it keeps
// below its KeyBase, in the order its scripts take them as KEYS, each with
// its Redis type, and its release channel. It is the one description of
// the layout: the primitives make their keys from it, latchctl reads and
// releases primitives by it, and the conformance suite inspects them by it.
type Layout struct {
	// Kind names the layout: "mutex", "rw", "sem", "fairsem", "election" or "latch".
	Kind string
	// Sub follows the KeyBase in every key: "", ":rw", ":sem", ":fair",
	// ":latch".
	Sub string
	// Keys are the keys, in script order; Keys[i].Suffix follows Sub.
	Keys []LayoutKey
}

// LayoutKey is one key of a Layout.
type LayoutKey struct {
	Suffix string // after the KeyBase and the layout's Sub
	Type   string // its Redis type: "string", "zset" or "hash"
	// Fence marks the fence counter: kept for as long as fences must
	// keep increasing, never deleted by a forced release.
	Fence bool
	// Setting marks a key that holds a setting rather than state (a
	// semaphore's stored limit, see SetLimit): a forced release keeps it.
	Setting bool
	// Memory marks a key that outlives the name's leases for a while:
	// the tokens that finished (and a Mutex's fence while ahead of the
	// clock), a fence counter, the reserved keys. A name with no other key
	// is remembered, not held.
	Memory bool
	// LockFence marks a Mutex lock, whose value is "token fence": the
	// holder's fence lives in it, and the fence outlives it beside the
	// finished tokens (member "#") while it may be ahead of the clock.
	LockFence bool
}

// The layouts. A Mutex's is also that of a ReentrantMutex, of each name of
// a MultiLock and of a Redlock on each instance (which uses its first
// five keys); a FairMutex is a FairSemaphore of one permit.
// DefaultPrefix is the key namespace of a primitive made without
// WithPrefix (primitives, latchctl).
const DefaultPrefix = "latch:"

// MaxAnnotation is the longest latchkit.Request.Annotation a primitive
// stores beside a grant; a longer one is not stored.
const MaxAnnotation = 256

// DefaultRetention is how long a primitive's fence counter, and a stored
// limit, outlive the name's last grant without WithRetention.
const DefaultRetention = 24 * time.Hour

var (
	// MutexLayout: the lock ("token fence": the holder's token and its
	// fence, PX ttl), two reserved keys (":fence", the fence counter of
	// latchkit 0.x, and ":released", a release marker: no script writes
	// or reads them; they keep their places so that the others keep
	// theirs in every script's KEYS), the holder's annotation, the tokens
	// that finished in the last markerTTL (zset token -> server ms:
	// released, handed over or given back; see remember in
	// lua/prelude.lua: a retried release finds its token there, a late
	// copy of an attempt is refused by it), and under the member "#" the
	// last fence while it may be ahead of the server's clock (see
	// keep_fence), the wait queue (zset entry -> place) and the waiters'
	// liveness (zset entry -> expiry). Once a name's last lease has
	// ended, it keeps one key, the finished tokens, markerTTL after the
	// last release or give-back, whatever the number of releases.
	MutexLayout = Layout{"mutex", "", []LayoutKey{{Suffix: "", Type: "string", LockFence: true}, {Suffix: ":fence", Type: "string", Memory: true},
		{Suffix: ":released", Type: "string", Memory: true}, {Suffix: ":who", Type: "string"}, {Suffix: ":gone", Type: "zset", Memory: true},
		{Suffix: ":q", Type: "zset"}, {Suffix: ":qlive", Type: "zset"}}}
	// RWLayout: readers (zset token -> expiry), the writer, waiting
	// writers' intents, the fence counter, holders' fences, the tokens
	// that recently finished, holders' annotations.
	RWLayout = Layout{"rw", ":rw", []LayoutKey{{Suffix: ":readers", Type: "zset"}, {Suffix: ":writer", Type: "string"},
		{Suffix: ":waiting", Type: "zset"}, {Suffix: ":fence", Type: "string", Fence: true, Memory: true}, {Suffix: ":fences", Type: "hash"},
		{Suffix: ":released", Type: "zset", Memory: true}, {Suffix: ":who", Type: "hash"}}}
	// SemLayout: holders (zset token -> expiry), the fence counter,
	// holders' fences, the tokens that recently finished, holders'
	// annotations, holders' weights (hash token -> permits, only above
	// one), the stored limit (SetLimit).
	SemLayout = Layout{"sem", ":sem", []LayoutKey{{Suffix: "", Type: "zset"}, {Suffix: ":fence", Type: "string", Fence: true, Memory: true},
		{Suffix: ":fences", Type: "hash"}, {Suffix: ":released", Type: "zset", Memory: true}, {Suffix: ":who", Type: "hash"},
		{Suffix: ":weights", Type: "hash"}, {Suffix: ":limit", Type: "string", Setting: true, Memory: true}}}
	// FairLayout: the ticket queue, liveness, the ticket counter, the fence
	// counter, holders (hash token -> fence), the tokens that recently
	// finished, holders' annotations, waiters' inboxes, tickets' weights
	// (hash token -> permits, only above one), the stored limit
	// (SetLimit).
	FairLayout = Layout{"fairsem", ":fair", []LayoutKey{{Suffix: ":queue", Type: "zset"}, {Suffix: ":alive", Type: "zset"},
		{Suffix: ":tickets", Type: "string"}, {Suffix: ":fence", Type: "string", Fence: true, Memory: true}, {Suffix: ":holders", Type: "hash"},
		{Suffix: ":released", Type: "zset", Memory: true}, {Suffix: ":who", Type: "hash"}, {Suffix: ":box", Type: "hash"},
		{Suffix: ":weights", Type: "hash"}, {Suffix: ":limit", Type: "string", Setting: true, Memory: true}}}
	// LatchLayout: one hash holding the count, the count set, the round
	// (the setting call's id) and the ids of the calls that set or
	// counted (see lua/latch_set.lua). A latch has no fence counter.
	LatchLayout = Layout{"latch", ":latch", []LayoutKey{{Suffix: "", Type: "hash"}}}
)

// ElectionLayout: an Election is a Mutex of its own (its first seven keys
// are the Mutex layout's, under ":el") with the seat (hash v -> the
// leader's value, f -> its fence, expiring with the lock) and the waiting
// candidates' values (hash queue entry -> value).
var ElectionLayout = Layout{"election", ":el", append(append([]LayoutKey(nil), MutexLayout.Keys...),
	LayoutKey{Suffix: ":seat", Type: "hash"}, LayoutKey{Suffix: ":cand", Type: "hash"})}

// Layouts are every layout, for tools that look at Redis.
func Layouts() []Layout {
	return []Layout{MutexLayout, RWLayout, SemLayout, FairLayout, ElectionLayout, LatchLayout}
}

// KeysOf returns the keys of the primitive named name under prefix, in
// script order.
func (l Layout) KeysOf(prefix, name string) []string {
	return l.Names(prefix, name)[:len(l.Keys):len(l.Keys)]
}

// names returns the primitive's keys in script order followed by its
// channel (len(l.Keys)+1 strings), made with three allocations whatever
// their number: they are slices of one string. A primitive is often made
// for one use (a Mutex per entity name), so its construction counts.
func (l Layout) Names(prefix, name string) []string {
	base := KeyBase(prefix, name)
	n := (len(base)+len(l.Sub))*(len(l.Keys)+1) + len(channelSuffix)
	for _, k := range l.Keys {
		n += len(k.Suffix)
	}
	var b strings.Builder
	b.Grow(n)
	for _, k := range l.Keys {
		b.WriteString(base)
		b.WriteString(l.Sub)
		b.WriteString(k.Suffix)
	}
	b.WriteString(base)
	b.WriteString(l.Sub)
	b.WriteString(channelSuffix)
	all, stem := b.String(), len(base)+len(l.Sub)
	out := make([]string, len(l.Keys)+1)
	for i, k := range l.Keys {
		out[i], all = all[:stem+len(k.Suffix)], all[stem+len(k.Suffix):]
	}
	out[len(l.Keys)] = all
	return out
}

// Channel is the channel the primitive's releases are published on, and
// its waiters listen to.
func (l Layout) Channel(prefix, name string) string {
	return KeyBase(prefix, name) + l.Sub + channelSuffix
}

// channelSuffix ends a primitive's channel (see Channel and names).
const channelSuffix = ":rel"

// KeyBase is the hash-tagged root of a primitive's keys: prefix{name}, the
// name escaped so that a '{' or '}' inside it cannot move the tag ('%',
// '{' and '}' become %25, %7B and %7D): every key of a primitive then
// hashes to one Cluster slot, whatever its name. A Mutex's lock is this key
// itself; the other primitives add a suffix (":rw", ":sem", ":fair",
// ":latch"). Tools that inspect Redis (latchctl) use it to find a
// primitive's keys.
func KeyBase(prefix, name string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(name) + 2)
	b.WriteString(prefix)
	b.WriteByte('{')
	for i := 0; i < len(name); i++ {
		switch ch := name[i]; ch {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(ch)
		}
	}
	b.WriteByte('}')
	return b.String()
}

// ParseKeyBase splits a key made by KeyBase, possibly followed by a suffix
// (":fence", ":sem:holders", ...), into the prefix, the unescaped name and
// the suffix. It reports false for a key KeyBase did not make.
func ParseKeyBase(key string) (prefix, name, suffix string, ok bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", "", "", false
	}
	end := strings.IndexByte(key[open:], '}')
	if end < 0 {
		return "", "", "", false
	}
	end += open
	esc := key[open+1 : end]
	if strings.IndexByte(esc, '{') >= 0 { // KeyBase escapes every brace of a name
		return "", "", "", false
	}
	var b strings.Builder
	for i := 0; i < len(esc); i++ {
		if esc[i] != '%' {
			b.WriteByte(esc[i])
			continue
		}
		if i+2 >= len(esc) {
			return "", "", "", false
		}
		switch esc[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		default:
			return "", "", "", false
		}
		i += 2
	}
	return key[:open], b.String(), key[end+1:], true
}

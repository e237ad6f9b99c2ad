// Package keyspace is the key layout of every primitive: the one
// description of the keys each kind keeps, in its scripts' order, which the
// primitives make their keys from, latchctl reads and releases primitives
// by, and the conformance suite and the fault tests inspect them by.
package keyspace

import (
	"strconv"
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
	// Setting marks a key that holds a setting rather than state (a
	// semaphore's stored limit, see SetLimit): a forced release keeps it.
	Setting bool
	// Memory marks a key that outlives the name's leases for a while:
	// the tokens that finished or were given back (and the fence while
	// ahead of the clock), a stored limit, the reserved keys (a
	// Mutex-layout lock key that is a free marker is memory too: see
	// Lock). A name with no other key is remembered, not held.
	Memory bool
	// LockFence marks a Mutex lock, whose value is "token fence[ flags]",
	// or a free marker "~ fence[ flags]" that keeps the name's last fence
	// (and its flags) for a while after the lock was freed (see Lock).
	LockFence bool
	// HeldFences marks a key of the other kinds that holds their holders'
	// fences: a zset of holders (a Semaphore's, an RWLock's readers) whose
	// members "#"+token are scored by the token's fence (µs; the tokens
	// themselves by their expiry, ms), a hash of holders (a
	// FairSemaphore's: token -> fence), or a writer whose value is "token
	// fence". A grant's fence is above every fence held and the one kept
	// beside the given-back tokens (GivenBack).
	HeldFences bool
	// Legacy marks a key of latchkit 0.x that no script reads or writes,
	// listed so that tools show and a forced release deletes what an older
	// version left. Legacy keys come last, and the scripts do not take
	// them (see Scripted).
	Legacy bool
	// GivenBack marks the zset of tokens given back by acquisitions that
	// ended without a grant they saw (token -> server ms, kept MarkerTTL),
	// where the other kinds also keep, under the member "#", the last
	// fence while it is not behind the server's clock: the next grant's
	// fence is above it.
	GivenBack bool
}

// Lock is what the value of a Mutex-layout lock key says (see lock_read in
// internal/kit/lua/prelude.lua for the flags).
type Lock struct {
	Owner string // the holder's token; "" for a free marker
	Fence int64  // the holder's fence, or the last the name granted
	// Flags are the value's flag fields after the fence: "a" (an
	// annotation is stored), "q" (waiters may be queued), ">" (the fence
	// was ahead of the clock at its grant), "g<ms>" (tokens given back
	// until then), "@<ms>" (the hold ends then, the key living longer).
	Flags []string
	// Until is the hold's logical end ("@<ms>", server ms), 0 when the
	// hold ends with the key.
	Until int64
}

// ParseLock reads v, the value of a Mutex-layout lock key. A bare token
// (latchkit 0.x wrote one) is its own owner, with no fence.
func ParseLock(v string) Lock {
	f := strings.Fields(v)
	if len(f) == 0 {
		return Lock{}
	}
	l := Lock{Owner: f[0]}
	if len(f) > 1 {
		l.Fence, _ = strconv.ParseInt(f[1], 10, 64)
		l.Flags = f[2:]
	}
	if l.Owner == "~" {
		l.Owner = ""
	}
	for _, fl := range l.Flags {
		if strings.HasPrefix(fl, "@") {
			l.Until, _ = strconv.ParseInt(fl[1:], 10, 64)
		}
	}
	return l
}

// HeldAt is the token holding the lock at server time nowMs (ms), "" when
// it is free: a marker, or a hold past its logical end.
func (l Lock) HeldAt(nowMs int64) string {
	if l.Until != 0 && l.Until <= nowMs {
		return ""
	}
	return l.Owner
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

// DefaultRetention is how long a stored limit outlives the name's last
// grant or SetLimit, and a set latch its last change, without
// WithRetention.
const DefaultRetention = 24 * time.Hour

var (
	// MutexLayout: the lock ("token fence[ flags]", or a free marker "~
	// fence[ flags]": see Lock and lock_read in lua/prelude.lua), two
	// reserved keys (":fence", the fence counter of latchkit 0.x, and
	// ":released", a release marker: no script writes or reads them; they
	// keep their places so that the others keep theirs in every script's
	// KEYS), the holder's annotation, the tokens given back in the last
	// MarkerTTL (zset token -> server ms; see remember: a late copy of a
	// given-up attempt is refused by it, while the lock's key carries the
	// flag g), the wait queue (zset entry -> place) and the waiters'
	// liveness (zset entry -> expiry). A release writes only the lock: a
	// released name keeps no key past its marker's millisecond; after a
	// give-back, its lock key and given-back tokens for MarkerTTL.
	MutexLayout = Layout{"mutex", "", []LayoutKey{{Suffix: "", Type: "string", LockFence: true}, {Suffix: ":fence", Type: "string", Memory: true},
		{Suffix: ":released", Type: "string", Memory: true}, {Suffix: ":who", Type: "string"}, {Suffix: ":gone", Type: "zset", Memory: true},
		{Suffix: ":q", Type: "zset"}, {Suffix: ":qlive", Type: "zset"}}}
	// RWLayout: readers (zset token -> expiry, and "#"+token -> its fence:
	// see HeldFences), the writer ("token fence", as a Mutex's lock),
	// waiting writers' intents, the tokens given back in the last
	// MarkerTTL and under the member "#" the last fence while it is not
	// behind the server's clock (see GivenBack), holders' annotations;
	// then two legacy keys, latchkit 0.x's fence counter and holders'
	// fences.
	RWLayout = Layout{"rw", ":rw", []LayoutKey{{Suffix: ":readers", Type: "zset", HeldFences: true}, {Suffix: ":writer", Type: "string", HeldFences: true},
		{Suffix: ":waiting", Type: "zset"}, {Suffix: ":released", Type: "zset", Memory: true, GivenBack: true}, {Suffix: ":who", Type: "hash"},
		{Suffix: ":fence", Type: "string", Memory: true, Legacy: true}, {Suffix: ":fences", Type: "hash", Legacy: true}}}
	// SemLayout: holders (zset token -> expiry, and "#"+token -> its
	// fence), the tokens given back (and the fence kept while ahead),
	// holders' annotations, holders' weights (hash token -> permits, only
	// above one; and the waiters' marks "~" and "!"), the stored limit
	// (SetLimit); then two legacy keys, as the RWLock's.
	SemLayout = Layout{"sem", ":sem", []LayoutKey{{Suffix: "", Type: "zset", HeldFences: true},
		{Suffix: ":released", Type: "zset", Memory: true, GivenBack: true}, {Suffix: ":who", Type: "hash"},
		{Suffix: ":weights", Type: "hash"}, {Suffix: ":limit", Type: "string", Setting: true, Memory: true},
		{Suffix: ":fence", Type: "string", Memory: true, Legacy: true}, {Suffix: ":fences", Type: "hash", Legacy: true}}}
	// FairLayout: the ticket queue, liveness, holders (hash token ->
	// fence), the tokens given back (and the fence kept while ahead),
	// holders' annotations, waiters' inboxes, tickets' weights (hash token
	// -> permits, only above one), the stored limit (SetLimit); then two
	// legacy keys, latchkit 0.x's ticket and fence counters.
	FairLayout = Layout{"fairsem", ":fair", []LayoutKey{{Suffix: ":queue", Type: "zset"}, {Suffix: ":alive", Type: "zset"},
		{Suffix: ":holders", Type: "hash", HeldFences: true}, {Suffix: ":released", Type: "zset", Memory: true, GivenBack: true},
		{Suffix: ":who", Type: "hash"}, {Suffix: ":box", Type: "hash"}, {Suffix: ":weights", Type: "hash"},
		{Suffix: ":limit", Type: "string", Setting: true, Memory: true},
		{Suffix: ":tickets", Type: "string", Memory: true, Legacy: true}, {Suffix: ":fence", Type: "string", Memory: true, Legacy: true}}}
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

// Scripted is how many of the layout's keys its scripts take, in order:
// all of them but the legacy ones, which come last.
func (l Layout) Scripted() int {
	n := len(l.Keys)
	for n > 0 && l.Keys[n-1].Legacy {
		n--
	}
	return n
}

// KeysOf returns the keys of the primitive named name under prefix, in
// script order (the legacy keys last: see Scripted).
func (l Layout) KeysOf(prefix, name string) []string {
	return l.Names(prefix, name)[:len(l.Keys):len(l.Keys)]
}

// Names returns the primitive's keys in script order followed by its
// channel (len(l.Keys)+1 strings), made with three allocations whatever
// their number (see Join). A primitive is often made for one use (a Mutex
// per entity name), so its construction counts.
func (l Layout) Names(prefix, name string) []string {
	return Join(KeyBase(prefix, name), l.Sub, l.Keys, func(k LayoutKey) string { return k.Suffix }, channelSuffix)
}

// Join returns base and sub followed by the suffix of each of keys, then
// base and sub followed by last: slices of one string, made with two
// allocations whatever their number. It lays out the keys and channel of a
// built-in (Layout.Names) and of a primitive written on package kit.
func Join[K any](base, sub string, keys []K, suffix func(K) string, last string) []string {
	stem := len(base) + len(sub)
	n := stem*(len(keys)+1) + len(last)
	for _, k := range keys {
		n += len(suffix(k))
	}
	var b strings.Builder
	b.Grow(n)
	for _, k := range keys {
		b.WriteString(base)
		b.WriteString(sub)
		b.WriteString(suffix(k))
	}
	b.WriteString(base)
	b.WriteString(sub)
	b.WriteString(last)
	all := b.String()
	out := make([]string, len(keys)+1)
	for i, k := range keys {
		m := stem + len(suffix(k))
		out[i], all = all[:m], all[m:]
	}
	out[len(keys)] = all
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

package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/clienttest"
	"github.com/latchkit/latchkit/primitives"
)

// crc16 is the CRC16-CCITT (XModem) that Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is the Cluster hash slot of key, as CLUSTER KEYSLOT computes it:
// only the part between the first '{' and the first '}' after it is
// hashed, when that part is not empty.
func keySlot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return crc16(key) & 16383
}

func TestKeySlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 = %#x", got)
	}
	for key, want := range map[string]uint16{"foo": 12182, "{foo}bar": 12182, "a{}b": keySlot("a{}b"), "{user1000}.following": keySlot("user1000")} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("a{}b") == keySlot("{}") {
		t.Error("an empty tag must not be hashed alone")
	}
}

// FuzzKeyBase checks that ParseKeyBase inverts KeyBase: for any name and
// any prefix without '{' or '}', ParseKeyBase(KeyBase(prefix, name)+suffix)
// returns prefix, name and suffix, whatever the suffix, and the key hashes
// to the Cluster slot of KeyBase(prefix, name) when name is not empty. It
// also checks that ParseKeyBase never panics on arbitrary input, and that
// a key it accepts is one KeyBase makes (KeyBase of what it returned, plus
// the suffix, gives the key back).
func FuzzKeyBase(f *testing.F) {
	for _, s := range [][3]string{
		{"latch:", "invoice:42", ""},
		{"latch:", "invoice:42", ":fence"},
		{"", "", ""},
		{"", "a{b}c", ":sem:holders"},
		{"p:", "%7B", ":x}"},
		{"p:", "%", ""},
		{"p:", "100%", "%"},
		{"p:", "{}", "{}"},
		{"p:", "}{", ""},
		{"p:", "\x00nul\x00", "\x00"},
		{"日本:", "名前ü", ":ü"},
		{"p:", "\xff\xfe", ""},
		{"a{b", "n", ""}, // a prefix KeyBase callers refuse: only ParseKeyBase must not panic
		{"x{a{b}", "", ""},
		{"x{%7b}", "", ""},
		{"x{%2", "", ""},
		{"x{%}", "", ""},
		{"}x{", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, prefix, name, suffix string) {
		// Arbitrary input: no panic, and what it accepts KeyBase makes.
		raw := prefix + name + suffix
		if p, n, s, ok := keyspace.ParseKeyBase(raw); ok {
			if back := keyspace.KeyBase(p, n) + s; back != raw {
				t.Errorf("ParseKeyBase(%q) = %q, %q, %q, true, but KeyBase makes %q of them", raw, p, n, s, back)
			}
		}
		if strings.ContainsAny(prefix, "{}") {
			return
		}
		base := keyspace.KeyBase(prefix, name)
		p, n, s, ok := keyspace.ParseKeyBase(base + suffix)
		if !ok || p != prefix || n != name || s != suffix {
			t.Fatalf("ParseKeyBase(KeyBase(%q, %q)+%q) = %q, %q, %q, %v", prefix, name, suffix, p, n, s, ok)
		}
		if name != "" && keySlot(base+suffix) != keySlot(base) {
			t.Fatalf("KeyBase(%q, %q)+%q hashes to slot %d, the base to %d", prefix, name, suffix, keySlot(base+suffix), keySlot(base))
		}
	})
}

// Option bits of FuzzConstructors.
const (
	optTTL = 1 << iota
	optPrefix
	optWaiter
	optInstance
	optAck
	optNoAutoExtend
	optNilOption
)

// fuzzEnv is the Redis a FuzzConstructors run works on: three miniredis
// servers (the instances of a Redlock), a go-redis backend on each.
type fuzzEnv struct {
	ms []*miniredis.Miniredis
	bs []backend.Backend
}

func newFuzzEnv(f *testing.F) *fuzzEnv {
	e := &fuzzEnv{}
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			f.Fatal(err)
		}
		f.Cleanup(m.Close)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		f.Cleanup(func() { _ = c.Close() })
		e.ms = append(e.ms, m)
		e.bs = append(e.bs, goredis.New(c))
	}
	return e
}

func (e *fuzzEnv) flush() {
	for _, m := range e.ms {
		m.FlushAll()
	}
}

// keys lists the keys of every server.
func (e *fuzzEnv) keys() []string {
	var ks []string
	for _, m := range e.ms {
		ks = append(ks, keyspace.WithoutClientRecords(m.Keys())...)
	}
	return ks
}

// fuzzCase is one input of FuzzConstructors, decoded.
type fuzzCase struct {
	name, prefix                          string
	ttl, waiter, instance, ackTimeout     time.Duration
	limit, ackN                           int
	bits                                  uint8
	nBackends                             int
	nilBackend, dupBackend, emptyBackends bool
}

// lockOptions are the case's options that fit a lock, a semaphore or an
// election (every bit but the instance timeout, a Redlock's).
func (c *fuzzCase) lockOptions() []primitives.Option {
	var o []primitives.Option
	if c.bits&optTTL != 0 {
		o = append(o, primitives.WithTTL(c.ttl))
	}
	if c.bits&optPrefix != 0 {
		o = append(o, primitives.WithPrefix(c.prefix))
	}
	if c.bits&optWaiter != 0 {
		o = append(o, primitives.WithWaiterTimeout(c.waiter))
	}
	if c.bits&optAck != 0 {
		o = append(o, primitives.WithReplicaAck(c.ackN, c.ackTimeout))
	}
	if c.bits&optNoAutoExtend != 0 {
		o = append(o, primitives.WithAutoExtend(false))
	}
	if c.bits&optNilOption != 0 {
		o = append(o, nil)
	}
	return o
}

// redlockOptions are the case's options that fit a Redlock (not the
// waiter timeout nor the replica ack, which do not compile there).
func (c *fuzzCase) redlockOptions() []primitives.RedlockOption {
	var o []primitives.RedlockOption
	if c.bits&optTTL != 0 {
		o = append(o, primitives.WithTTL(c.ttl))
	}
	if c.bits&optPrefix != 0 {
		o = append(o, primitives.WithPrefix(c.prefix))
	}
	if c.bits&optInstance != 0 {
		o = append(o, primitives.WithInstanceTimeout(c.instance))
	}
	if c.bits&optNoAutoExtend != 0 {
		o = append(o, primitives.WithAutoExtend(false))
	}
	if c.bits&optNilOption != 0 {
		o = append(o, nil)
	}
	return o
}

// latchOptions are the case's options that fit a Latch: the prefix.
func (c *fuzzCase) latchOptions() []primitives.LatchOption {
	var o []primitives.LatchOption
	if c.bits&optPrefix != 0 {
		o = append(o, primitives.WithPrefix(c.prefix))
	}
	if c.bits&optNilOption != 0 {
		o = append(o, nil)
	}
	return o
}

// The values the constructors use, defaults applied.
func (c *fuzzCase) effTTL() time.Duration {
	if c.bits&optTTL != 0 {
		return c.ttl
	}
	return 10 * time.Second // the default TTL
}

func (c *fuzzCase) effPrefix() string {
	if c.bits&optPrefix != 0 {
		return c.prefix
	}
	return keyspace.DefaultPrefix
}

func (c *fuzzCase) effWaiter() time.Duration {
	if c.bits&optWaiter != 0 {
		return c.waiter
	}
	return (3 * time.Second)
}

func (c *fuzzCase) effInstance() time.Duration {
	if c.bits&optInstance != 0 {
		return c.instance
	}
	return 0
}

func (c *fuzzCase) ack() (int, time.Duration) {
	if c.bits&optAck != 0 {
		return c.ackN, c.ackTimeout
	}
	return 0, 0
}

// valid reports whether the documented rules shared by every constructor
// accept the case's name and options.
func (c *fuzzCase) valid(name string) bool { return nameValid(name) && c.optsValid() }

// nameValid reports whether a primitive's name is accepted: not empty, at
// most primitives.MaxName bytes (issue 38, finding 6).
func nameValid(name string) bool { return name != "" && len(name) <= primitives.MaxName }

// optsValid reports whether the options are accepted. A TTL below
// primitives.MinTTL (5ms) is refused: a lease that short would live less
// than half its TTL (the drift allowance, TTL/100+2ms, takes the rest).
func (c *fuzzCase) optsValid() bool {
	n, at := c.ack()
	ttl := c.effTTL()
	switch {
	case ttl < primitives.MinTTL,
		c.effWaiter() < 3*time.Millisecond, !c.prefixValid(),
		at != 0 && n < 1, n != 0 && at < time.Millisecond, n != 0 && at >= ttl:
		return false
	}
	return true
}

// multiNames splits the name into MultiLock names at ','.
func (c *fuzzCase) multiNames() []string { return strings.Split(c.name, ",") }

func (c *fuzzCase) multiValid() bool {
	if !c.optsValid() {
		return false
	}
	sorted := slices.Clone(c.multiNames())
	slices.Sort(sorted)
	for i, n := range sorted {
		if !nameValid(n) || i > 0 && sorted[i-1] == n {
			return false
		}
	}
	return true
}

func (c *fuzzCase) redlockBackends(e *fuzzEnv) []backend.Backend {
	if c.emptyBackends {
		return nil
	}
	bs := slices.Clone(e.bs[:c.nBackends])
	if c.nilBackend {
		bs[len(bs)-1] = nil
	}
	if c.dupBackend && len(bs) > 1 {
		bs[1] = bs[0]
	}
	return bs
}

func (c *fuzzCase) redlockValid() bool {
	switch {
	case !nameValid(c.name), c.effTTL() < primitives.MinTTL, c.effInstance() < 0, !c.prefixValid(),
		c.emptyBackends, c.nilBackend, c.dupBackend && c.nBackends > 1:
		return false
	}
	return c.redlockTimeout() < c.effTTL()
}

// prefixValid reports whether the case's prefix is accepted: not empty,
// without a brace.
func (c *fuzzCase) prefixValid() bool {
	return c.effPrefix() != "" && !strings.ContainsAny(c.effPrefix(), "{}")
}

// redlockTimeout is the documented per-instance timeout of a Redlock: the
// caller's, or a twentieth of the TTL, between 5ms and 100ms, at most half
// the TTL.
func (c *fuzzCase) redlockTimeout() time.Duration {
	if t := c.effInstance(); t != 0 {
		return t
	}
	return min(max(c.effTTL()/20, 5*time.Millisecond), 100*time.Millisecond, c.effTTL()/2)
}

// checkKeys checks that every key on the servers is a key of the
// primitive: it parses back (ParseKeyBase) to the prefix and one of names,
// and hashes to the Cluster slot of that name's KeyBase, so that the keys
// written for one name share one slot.
func checkKeys(t *testing.T, e *fuzzEnv, step, prefix string, names []string) {
	t.Helper()
	for _, k := range e.keys() {
		p, n, _, ok := keyspace.ParseKeyBase(k)
		if !ok || p != prefix || !slices.Contains(names, n) {
			t.Fatalf("%s wrote key %q: ParseKeyBase = %q, %q, %v; want prefix %q and one of %q", step, k, p, n, ok, prefix, names)
		}
		if s, want := keySlot(k), keySlot(keyspace.KeyBase(prefix, n)); s != want {
			t.Fatalf("%s wrote key %q in slot %d, not in its name's slot %d", step, k, s, want)
		}
	}
}

// ctor is one constructor under test, with the Try* calls that prove the
// primitive works.
type ctor struct {
	kind  string
	names []string
	valid bool
	build func() (any, error)
	tries func(p any) []func(context.Context) (latchkit.Lease, error)
}

func mutexTry(p any) []func(context.Context) (latchkit.Lease, error) {
	return []func(context.Context) (latchkit.Lease, error){p.(primitives.Mutex).TryLock}
}

func semTry(p any) []func(context.Context) (latchkit.Lease, error) {
	return []func(context.Context) (latchkit.Lease, error){p.(primitives.Semaphore).TryAcquire}
}

// latchTry checks a latch that was accepted: set, counted down to zero
// and waited for, every key it writes checked; it grants no lease, so it
// adds no Try* to run.
func latchTry(t *testing.T, e *fuzzEnv, c *fuzzCase, names []string) func(p any) []func(context.Context) (latchkit.Lease, error) {
	return func(p any) []func(context.Context) (latchkit.Lease, error) {
		t.Helper()
		l := p.(primitives.Latch)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.flush()
		if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
			t.Fatalf("latch %q: TrySetCount(2): %v, %v", c.name, ok, err)
		}
		checkKeys(t, e, "latch set", c.effPrefix(), names)
		for i := 0; i < 2; i++ {
			if err := l.CountDown(ctx); err != nil {
				t.Fatalf("latch %q: CountDown: %v", c.name, err)
			}
		}
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("latch %q: Wait at zero: %v", c.name, err)
		}
		if n, err := l.Count(ctx); n != 0 || err != nil {
			t.Fatalf("latch %q: Count at zero: %d, %v", c.name, n, err)
		}
		checkKeys(t, e, "latch at zero", c.effPrefix(), names)
		return nil
	}
}

func rwTry(p any) []func(context.Context) (latchkit.Lease, error) {
	rw := p.(primitives.RWLock)
	return []func(context.Context) (latchkit.Lease, error){rw.TryRLock, rw.TryLock}
}

// FuzzConstructors puts arbitrary names (bytes: braces, '%', NUL, UTF-8,
// empty), TTLs, limits, prefixes, waiter and instance timeouts and
// replica-ack settings through every constructor (NewMutex,
// NewReentrantMutex, NewRWLock, NewSemaphore, NewFairSemaphore,
// NewFairMutex, NewMultiLock over the name split at ',', NewRedlock over
// 1-3 backends, some nil or given twice, NewLatch, which refuses
// WithReplicaAck and is set, counted down and waited for instead of a
// Try*) on embedded miniredis servers.
// Properties: nothing panics; a constructor rejects exactly the arguments
// the documented rules reject, with an error matching latchkit.ErrInvalid,
// and writes no key (no constructor touches Redis); an accepted primitive
// grants a Try* (with WithReplicaAck, which miniredis's WAIT never
// confirms, it fails with ErrNotReplicated instead) whose lease releases,
// and every key written, while held and after the release, parses back
// with ParseKeyBase to the prefix and the primitive's name and lies in
// that name's Cluster hash slot.
func FuzzConstructors(f *testing.F) {
	type seed struct {
		name, prefix                      string
		ttl, waiter, instance, ackTimeout int64
		limit, ackN                       int
		bits, redlock                     uint8
	}
	ms := int64(time.Millisecond)
	all := uint8(optTTL | optPrefix | optWaiter | optInstance)
	for _, s := range []seed{
		{name: "invoice:42"},
		{name: ""},
		{name: "a{b}c", prefix: "p:", ttl: 5000 * ms, bits: all, waiter: 3 * ms, limit: 2},
		{name: "}{", limit: 1},
		{name: "100%", limit: 3, redlock: 2},
		{name: "%7B%7D", limit: 1},
		{name: "nul\x00byte", limit: 1},
		{name: "名前ü", prefix: "日本:", bits: optPrefix, limit: 1},
		{name: "\xff\xfe", limit: 1},
		{name: "x", prefix: "bad{", bits: optPrefix, limit: 1},
		{name: "x", prefix: "bad}", bits: optPrefix, limit: 1},
		{name: "x", prefix: "", bits: optPrefix, limit: 1},
		{name: "x", ttl: 0, bits: optTTL, limit: 1},
		{name: "x", ttl: -ms, bits: optTTL, limit: 1},
		{name: "x", ttl: ms - 1, bits: optTTL, limit: 1},
		{name: "x", ttl: ms, bits: optTTL, limit: 1},
		{name: "x", ttl: int64(primitives.MinTTL) - 1, bits: optTTL, limit: 1},
		{name: "x", ttl: int64(primitives.MinTTL), bits: optTTL, limit: 1},
		{name: "x", ttl: 1<<63 - 1, bits: optTTL, limit: 1},
		{name: "x", ttl: -1 << 63, bits: optTTL, limit: 1},
		{name: "x", limit: 0},
		{name: "x", limit: -1},
		{name: "x", limit: 1<<63 - 1},
		{name: "x", waiter: 3*ms - 1, bits: optWaiter, limit: 1},
		{name: "x", waiter: 0, bits: optWaiter, limit: 1},
		{name: "x", waiter: 1<<63 - 1, bits: optWaiter, limit: 1},
		{name: "x", instance: -1, bits: optInstance, limit: 1},
		{name: "x", instance: 1, bits: optInstance, limit: 1, redlock: 2},
		{name: "x", ttl: 10 * ms, instance: 10 * ms, bits: optTTL | optInstance, limit: 1},
		{name: "x", ttl: 4 * ms, bits: optTTL, limit: 1, redlock: 1},
		{name: "x", ackN: 1, ackTimeout: 5 * ms, bits: optAck, limit: 1},
		{name: "x", ackN: 0, ackTimeout: 5 * ms, bits: optAck, limit: 1},
		{name: "x", ackN: -1, ackTimeout: 0, bits: optAck, limit: 1},
		{name: "x", ackN: 1, ackTimeout: ms - 1, bits: optAck, limit: 1},
		{name: "x", ackN: 2, ackTimeout: 10 * ms, ttl: 10 * ms, bits: optAck | optTTL, limit: 1},
		{name: "x", ackN: 1, ackTimeout: ms, bits: optAck, limit: 1, redlock: 2},
		{name: "x", bits: optNoAutoExtend | optNilOption, limit: 1},
		{name: "a,b,c", limit: 1},
		{name: "b,a", limit: 1},
		{name: "a,a", limit: 1},
		{name: "a,", limit: 1},
		{name: ",", limit: 1},
		{name: "{x},x,%", limit: 1},
		{name: "x", limit: 1, redlock: 1 << 2},          // nil backend
		{name: "x", limit: 1, redlock: 2 | 1<<3},        // a backend twice
		{name: "x", limit: 1, redlock: 1 << 4},          // no backends
		{name: "x", limit: 1, redlock: 1 | 1<<2 | 1<<3}, // two, the second nil
		// Names at the cap (accepted and granted by every constructor, a
		// MultiLock's each) and one byte past it (refused): issue 38,
		// finding 6.
		{name: strings.Repeat("n", primitives.MaxName), limit: 1, redlock: 2},
		{name: strings.Repeat("{", primitives.MaxName), limit: 1},
		{name: strings.Repeat("n", primitives.MaxName+1), limit: 1, redlock: 2},
		{name: strings.Repeat("a", primitives.MaxName) + "," + strings.Repeat("b", primitives.MaxName), limit: 1},
		{name: strings.Repeat("a", primitives.MaxName+1) + ",b", limit: 1},
	} {
		f.Add(s.name, s.prefix, s.ttl, s.waiter, s.instance, s.ackTimeout, s.limit, s.ackN, s.bits, s.redlock)
	}
	e := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, name, prefix string, ttl, waiter, instance, ackTimeout int64, limit, ackN int, bits, redlock uint8) {
		c := &fuzzCase{
			name: name, prefix: prefix,
			ttl: time.Duration(ttl), waiter: time.Duration(waiter),
			instance: time.Duration(instance), ackTimeout: time.Duration(ackTimeout),
			limit: limit, ackN: ackN, bits: bits,
			nBackends:     1 + int(redlock%4)%3,
			nilBackend:    redlock&(1<<2) != 0,
			dupBackend:    redlock&(1<<3) != 0,
			emptyBackends: redlock&(1<<4) != 0,
		}
		b := e.bs[0]
		opts := c.lockOptions()
		one := []string{name}
		ctors := []ctor{
			{"NewMutex", one, c.valid(name), func() (any, error) { return primitives.NewMutex(clienttest.For(t, b), name, opts...) }, mutexTry},
			{"NewReentrantMutex", one, c.valid(name), func() (any, error) { return primitives.NewReentrantMutex(clienttest.For(t, b), name, opts...) }, mutexTry},
			{"NewRWLock", one, c.valid(name), func() (any, error) { return primitives.NewRWLock(clienttest.For(t, b), name, opts...) }, rwTry},
			{"NewSemaphore", one, c.valid(name) && limit >= 1, func() (any, error) { return primitives.NewSemaphore(clienttest.For(t, b), name, limit, opts...) }, semTry},
			{"NewFairSemaphore", one, c.valid(name) && limit >= 1, func() (any, error) { return primitives.NewFairSemaphore(clienttest.For(t, b), name, limit, opts...) }, semTry},
			{"NewFairMutex", one, c.valid(name), func() (any, error) { return primitives.NewFairMutex(clienttest.For(t, b), name, opts...) }, mutexTry},
			{"NewMultiLock", c.multiNames(), c.multiValid(), func() (any, error) { return primitives.NewMultiLock(clienttest.For(t, b), c.multiNames(), opts...) }, mutexTry},
			{"NewRedlock", one, c.redlockValid(), func() (any, error) {
				return primitives.NewRedlock(clienttest.All(t, c.redlockBackends(e)), name, c.redlockOptions()...)
			}, mutexTry},
			{"NewLatch", one, nameValid(name) && c.prefixValid(), func() (any, error) { return primitives.NewLatch(clienttest.For(t, b), name, c.latchOptions()...) }, latchTry(t, e, c, one)},
		}
		for _, k := range ctors {
			e.flush()
			p, err := k.build()
			step := fmt.Sprintf("%s(%s)", k.kind, shortName(name))
			if ks := e.keys(); len(ks) != 0 {
				t.Fatalf("%s wrote keys %q (err %v)", step, ks, err)
			}
			if err != nil {
				if !errors.Is(err, latchkit.ErrInvalid) {
					t.Fatalf("%s: error %v does not match ErrInvalid", step, err)
				}
				if k.valid {
					t.Fatalf("%s refused valid arguments: %v", step, err)
				}
				continue
			}
			if !k.valid {
				shown := *c
				shown.name = shortName(c.name)
				t.Fatalf("%s accepted invalid arguments (%+v)", step, shown)
			}
			for i, try := range k.tries(p) {
				e.flush()
				tryStep(t, e, c, k, fmt.Sprintf("%s try %d", step, i), try)
			}
		}
	})
}

// shortName quotes name for a message, cut to its first 40 bytes and its
// length when it is longer.
func shortName(name string) string {
	if len(name) <= 40 {
		return fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("%q... (%d bytes)", name[:40], len(name))
}

// tryStep makes one Try* on a primitive that was accepted and releases the
// lease it grants, checking the keys written.
func tryStep(t *testing.T, e *fuzzEnv, c *fuzzCase, k ctor, step string, try func(context.Context) (latchkit.Lease, error)) {
	t.Helper()
	prefix := c.effPrefix()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = primitives.WithOwner(ctx, "fuzz") // a ReentrantMutex needs one
	l, err := try(ctx)
	checkKeys(t, e, step, prefix, k.names)
	if n, _ := c.ack(); n > 0 && k.kind != "NewRedlock" { // a Redlock has no replica ack
		// miniredis's WAIT answers 0 replicas at once.
		if !errors.Is(err, primitives.ErrNotReplicated) {
			t.Fatalf("%s with replica ack: %v, want ErrNotReplicated", step, err)
		}
		return
	}
	if err != nil {
		if k.kind == "NewRedlock" && c.redlockTimeout() < 20*time.Millisecond {
			return // each instance may get too short a time to answer
		}
		if errors.Is(err, latchkit.ErrUnavailable) && c.effTTL() < time.Second {
			return // a grant that came back after its few ms of TTL is given back, not handed out dead
		}
		t.Fatalf("%s: %v", step, err)
	}
	if l.Name() != strings.Join(slices.Sorted(slices.Values(k.names)), ",") {
		t.Fatalf("%s: lease name %q", step, l.Name())
	}
	err = l.Release(ctx)
	checkKeys(t, e, step+" release", prefix, k.names)
	if err != nil && !(errors.Is(err, latchkit.ErrLeaseLost) && c.effTTL() < time.Second) {
		t.Fatalf("%s release: %v", step, err)
	}
}

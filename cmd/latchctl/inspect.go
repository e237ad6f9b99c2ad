package main

// The inspection tools: inspect, list and release. They read (and, for
// release, delete) a primitive's keys directly, in the layouts the scripts
// of package primitives document:
//
//	latchctl inspect NAME [-kind KIND] [-layout SPEC] [-addr host:port] [-prefix latch:]
//	latchctl list [-prefix latch:] [-layout SPEC] [-addr host:port]
//	latchctl release NAME -kind KIND -force -confirm NAME [-addr host:port] [-prefix latch:]
//
// KIND is mutex, rwlock, semaphore, fair_semaphore, election or latch:
// the latchkit.Kind names that spans, metrics and logs use (an RWLock's
// readers and writer, rwlock_read and rwlock_write, share one layout:
// rwlock). -kind also takes every latchkit.Kind whose keys a layout holds
// (reentrant_mutex, multilock and redlock are a mutex's, fair_mutex a
// fair_semaphore's, rwlock_read and rwlock_write an rwlock's) and the
// spellings of earlier versions (rw, sem, fairsem).
//
// inspect prints who holds a primitive, one line per holder (and per
// waiter where Redis knows them): a token prefix (never a whole token: it
// lets whoever knows it release the lease), the fence, the TTL left by the
// server's clock, and the trace id of the holder's W3C traceparent when the
// holder stored one; for a latch, its count (and the count it was set
// to), whether it is open, the time its key has left and how many
// count-down and set calls it has recorded (their ids, kept to recognize a
// resent call). It reads everything in one script, so the picture is
// consistent. list finds names by SCAN (never KEYS) and prints each
// primitive's state as inspect shows it (view.state). release deletes
// a stuck primitive's keys and wakes its waiters, in one script; it keeps
// the highest fence beside the finished (or given-back) tokens, so that
// fences never repeat or go backwards. A released latch is open: its
// waiters return.
//
// A primitive written on package kit is shown when its layout is given
// (-layout KIND:KEY=SUFFIX/TYPE,...): each of its keys as it is, and the
// Client of every member or field that is a token (userlayout.go).
//
// They connect to one server (-addr, default localhost:6379); on a Redis
// Cluster, list sees only the keys of the node it reaches.

import (
	"cmp"
	"context"
	_ "embed" // the scripts in lua/
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// kind is the key layout of one kind of primitive (keyspace.Layout),
// and how inspect shows it.
type kind struct {
	name    string   // latchctl's name of it, in -kind and output: a latchkit.Kind (see layoutNames)
	aliases []string // the other -kind values it answers to
	sub     string   // after the base: "", ":rw", ":sem", ":fair", ":latch"
	// lockFence: its lock's value is "token fence[ flags]" (the Mutex
	// layout), or a free marker keeping the name's last fence for a while
	// (see keyspace.ParseLock).
	lockFence bool
	// heldFences are the suffixes (after sub) of the keys that hold the
	// holders' fences (a Semaphore's, RWLock's and FairSemaphore's: see
	// keyspace.LayoutKey.HeldFences), and givenBack the suffix of the
	// zset where the fence outlives them (member "#") while it may be
	// ahead of the server's clock; none for the other kinds.
	heldFences []string
	givenBack  string
	keys       []keySpec // every key, in the layout's order
	// memory are the suffixes (after sub) of the keys that outlive the
	// leases for a while: a name with no other key is remembered, not held.
	memory map[string]bool
	// head is what inspect's first line says after the name: the fence
	// counter, a latch's count.
	head func(k func(suffix string) keyState) string
	// status is the kind's own word for its state (see view.state),
	// given that it has a key besides its memory: "held" or "free", a
	// latch's "open" or "closed".
	status func(k func(suffix string) keyState) string
	// show prints the holders and waiters, and the state when there is
	// no holder.
	show func(w io.Writer, now int64, state string, k func(suffix string) keyState, who clients)
	// people are its holders (with their fences) and waiters, for list
	// and top (holders.go).
	people func(k func(suffix string) keyState) ([]holder, []string)
}

// keySpec is one key of a kind: its suffix after sub, its Redis type, and
// whether it holds a setting that a forced release keeps (a stored limit).
type keySpec struct {
	suffix, typ string
	setting     bool
}

// kinds are the layouts of package primitives, with inspect's way of
// showing each. A Mutex's layout is also that of a ReentrantMutex, of each
// name of a MultiLock and of a Redlock on each instance; a FairMutex is a
// FairSemaphore of one permit.
var kinds = func() []kind {
	show := map[string]func(io.Writer, int64, string, func(string) keyState, clients){
		"mutex": showMutex, "rw": showRW, "sem": showSem, "fairsem": showFair, "election": showElection, "latch": showLatch,
	}
	status := map[string]func(func(string) keyState) string{
		"mutex": mutexStatus, "rw": rwStatus, "sem": semStatus, "fairsem": fairStatus, "election": mutexStatus, "latch": latchStatus,
	}
	people := map[string]func(func(string) keyState) ([]holder, []string){
		"mutex": mutexPeople, "rw": rwPeople, "sem": semPeople, "fairsem": fairPeople, "election": mutexPeople, "latch": noPeople,
	}
	var ks []kind
	for _, l := range keyspace.Layouts() {
		k := kind{name: l.Kind, sub: l.Sub, show: show[l.Kind], status: status[l.Kind], people: people[l.Kind]}
		if n, ok := layoutNames[l.Kind]; ok {
			k.name, k.aliases = n.name, n.aliases
		}
		k.memory = map[string]bool{}
		for _, lk := range l.Keys {
			if lk.Memory {
				k.memory[lk.Suffix] = true
			}
			if lk.LockFence {
				k.lockFence, k.head = true, lockFenceHead
			}
			if lk.HeldFences {
				k.heldFences = append(k.heldFences, lk.Suffix)
			}
			if lk.GivenBack {
				k.givenBack = lk.Suffix
			}
			k.keys = append(k.keys, keySpec{lk.Suffix, lk.Type, lk.Setting})
		}
		switch {
		case l.Kind == "latch":
			k.head = latchHead
		case k.heldFences != nil:
			k.head = k.heldFenceHead
		}
		ks = append(ks, k)
	}
	return ks
}()

// layoutNames maps the Kind of a keyspace.Layout to latchctl's name of
// it, the latchkit.Kind of the primitives it holds as spans, metrics and
// logs name them (one vocabulary), and the other -kind values it
// takes: the latchkit.Kinds whose keys the layout also holds, and the
// layout's own name (what latchctl took and printed before). An RWLock's
// readers and writer are two latchkit.Kinds in one layout: rwlock.
var layoutNames = map[string]struct {
	name    string
	aliases []string
}{
	"mutex": {string(latchkit.KindMutex), []string{
		string(latchkit.KindReentrantMutex), string(latchkit.KindMultiLock), string(latchkit.KindRedlock)}},
	"rw":       {"rwlock", []string{string(latchkit.KindWriteLock), string(latchkit.KindReadLock), "rw"}},
	"sem":      {string(latchkit.KindSemaphore), []string{"sem"}},
	"fairsem":  {string(latchkit.KindFairSemaphore), []string{string(latchkit.KindFairMutex), "fairsem"}},
	"election": {string(latchkit.KindElection), nil},
	"latch":    {string(latchkit.KindLatch), nil},
}

// kindHelp is the -kind flag's help after what it is for.
var kindHelp = kindNames + "; also the kinds of spans and metrics that share a layout " +
	"(reentrant_mutex, multilock, redlock: mutex; rwlock_read, rwlock_write: rwlock; fair_mutex: fair_semaphore) " +
	"and the older rw, sem, fairsem"

// kindSynopsis is the -kind values in a usage line: "mutex|rwlock|...".
var kindSynopsis = func() string {
	var names []string
	for _, k := range kinds {
		names = append(names, k.name)
	}
	return strings.Join(names, "|")
}()

// kindNames is the -kind values, for messages: "mutex, rwlock, ... or latch".
var kindNames = func() string {
	var names []string
	for _, k := range kinds {
		names = append(names, k.name)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}()

// kindByName is the kind a -kind value names: its name or an alias.
func kindByName(ks []kind, s string) (*kind, error) {
	for i := range ks {
		if ks[i].name == s || slices.Contains(ks[i].aliases, s) {
			return &ks[i], nil
		}
	}
	return nil, fmt.Errorf("%w: -kind %q: want %s", errUsage, s, kindNames)
}

// kindOfSuffix returns the kind a key's suffix (after its KeyBase) belongs
// to, or nil for a key no primitive makes.
func kindOfSuffix(kinds []kind, suffix string) *kind {
	for i, k := range kinds {
		for _, ks := range k.keys {
			if suffix == k.sub+ks.suffix {
				return &kinds[i]
			}
		}
	}
	return nil
}

// channel is where the primitive's waiters listen for releases.
func (k *kind) channel(base string) string { return base + k.sub + ":rel" }

// specs are the kind's keys, in its layout's order.
func (k *kind) specs() []keySpec { return k.keys }

// allKeys are the kind's keys under base.
func (k *kind) allKeys(base string) []string {
	var keys []string
	for _, ks := range k.specs() {
		keys = append(keys, base+k.sub+ks.suffix)
	}
	return keys
}

// releaseKeys is allKeys without the settings (a stored limit): the keys a
// forced release deletes (or, the finished tokens, keeps).
func (k *kind) releaseKeys(base string) []string {
	var keys []string
	for _, ks := range k.specs() {
		if !ks.setting {
			keys = append(keys, base+k.sub+ks.suffix)
		}
	}
	return keys
}

// The scripts inspect and release -force run; each file's header gives its
// KEYS, ARGV and reply.
var (
	//go:embed lua/snapshot.lua
	snapshotSource string
	//go:embed lua/forcerelease.lua
	forceReleaseSource string

	snapshotScript = backend.NewScript(snapshotSource)
	releaseScript  = backend.NewScript(forceReleaseSource)
)

// keyState is one key as the snapshot script read it.
type keyState struct {
	typ  string            // TYPE: "none", "string", "zset", "hash", ...
	pttl int64             // PTTL: -1 for no expiry
	val  string            // a string's value
	zset []member          // a sorted set's members, by score
	hash map[string]string // a hash's fields
	now  int64             // the server's time of the snapshot, ms
}

// mutexLock reads s as a Mutex-layout lock key: what its value says, and
// its holder at the snapshot's time ("" when it is free: absent, a free
// marker, or a hold past its logical end).
func (s keyState) mutexLock() (keyspace.Lock, string) {
	if s.typ != "string" {
		return keyspace.Lock{}, ""
	}
	l := keyspace.ParseLock(s.val)
	return l, l.HeldAt(s.now)
}

// holdLeft is how long the holder of the Mutex-layout lock s holds it
// for: the hold's logical end, or the key's expiry.
func (s keyState) holdLeft(l keyspace.Lock) string {
	switch {
	case l.Until != 0:
		return ttlField(l.Until - s.now)
	case s.pttl >= 0:
		return ttlField(s.pttl)
	}
	return "ttl=none"
}

type member struct {
	token string
	score int64
}

func (s keyState) exists() bool { return s.typ != "" && s.typ != "none" }

// score returns the score of token in a sorted set.
func (s keyState) score(token string) (int64, bool) {
	i := slices.IndexFunc(s.zset, func(m member) bool { return m.token == token })
	if i < 0 {
		return 0, false
	}
	return s.zset[i].score, true
}

// snapshot reads keys in one script: the server's time in ms and each
// key's state.
func snapshot(ctx context.Context, b backend.Backend, keys []string) (int64, map[string]keyState, error) {
	v, err := b.Eval(ctx, snapshotScript, keys, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("read keys: %w", err)
	}
	bad := func() (int64, map[string]keyState, error) {
		return 0, nil, fmt.Errorf("read keys: unexpected reply %#v", v)
	}
	a, ok := v.([]backend.Value)
	if !ok || len(a) != len(keys)+1 {
		return bad()
	}
	now, ok := a[0].(int64)
	if !ok {
		return bad()
	}
	states := make(map[string]keyState, len(keys))
	for i, key := range keys {
		e, ok := a[i+1].([]backend.Value)
		if !ok || len(e) != 3 {
			return bad()
		}
		typ, ok1 := e[0].(string)
		pttl, ok2 := e[1].(int64)
		items, ok3 := e[2].([]backend.Value)
		if !ok1 || !ok2 || !ok3 {
			return bad()
		}
		s := make([]string, len(items))
		for j, it := range items {
			if s[j], ok = it.(string); !ok {
				return bad()
			}
		}
		st := keyState{typ: typ, pttl: pttl, now: now}
		switch {
		case typ == "string" && len(s) == 1:
			st.val = s[0]
		case typ == "zset":
			for j := 0; j+1 < len(s); j += 2 {
				f, err := strconv.ParseFloat(s[j+1], 64)
				if err != nil {
					return 0, nil, fmt.Errorf("read keys: score %q of %s: %w", s[j+1], key, err)
				}
				st.zset = append(st.zset, member{s[j], int64(f)})
			}
		case typ == "hash":
			st.hash = make(map[string]string, len(s)/2)
			for j := 0; j+1 < len(s); j += 2 {
				st.hash[s[j]] = s[j+1]
			}
		}
		states[key] = st
	}
	return now, states, nil
}

// view is every kind's keys under one name, read in one script (they
// share the name's hash tag), and the server's time then.
type view struct {
	base   string
	now    int64
	states map[string]keyState
}

// readView reads the keys of every kind of ks (kinds, and those -layout
// adds) under the name whose keys begin with base.
func readView(ctx context.Context, b backend.Backend, base string, ks []kind) (view, error) {
	var keys []string
	for i := range ks {
		keys = append(keys, ks[i].allKeys(base)...)
	}
	now, states, err := snapshot(ctx, b, keys)
	return view{base, now, states}, err
}

// of returns kind k's keys in v, by their suffix after k.sub.
func (v view) of(k *kind) func(suffix string) keyState {
	return func(suffix string) keyState { return v.states[v.base+k.sub+suffix] }
}

// state is the one word for the state of kind k under v's name, the word
// list prints and inspect shows: "" when the name has no key of the kind;
// "remembered" when only the keys that outlive the leases are left (the
// finished tokens, fences, a stored limit), and expire; else the kind's
// own word: "held" (a holder, reader, writer or leader) or "free" (keys
// but no holder: waiters), and for a latch "open" (count 0) or "closed".
func (v view) state(k *kind) string {
	get, any, live := v.of(k), false, false
	for _, ks := range k.specs() {
		if st := get(ks.suffix); st.exists() {
			any = true
			if ks.suffix == "" && k.lockFence {
				// A Mutex-layout lock key is a free marker (memory)
				// once released, until it expires.
				_, holder := st.mutexLock()
				live = live || holder != ""
			} else {
				live = live || !k.memory[ks.suffix]
			}
		}
	}
	switch {
	case !any:
		return ""
	case !live:
		return "remembered"
	}
	return k.status(get)
}

// heldOrFree is "held" when there is a holder, else "free".
func heldOrFree(held bool) string {
	if held {
		return "held"
	}
	return "free"
}

// mutexStatus: a Mutex (or an Election) is held while its lock key has a
// holder.
func mutexStatus(k func(string) keyState) string {
	_, holder := k("").mutexLock()
	return heldOrFree(holder != "")
}

// rwStatus: an RWLock is held by its writer or its readers.
func rwStatus(k func(string) keyState) string {
	readers, _ := holdersOf(k(":readers"), 0)
	return heldOrFree(k(":writer").typ == "string" || len(readers.zset) > 0)
}

// semStatus: a Semaphore is held while its set of holders has a holder.
func semStatus(k func(string) keyState) string {
	holders, _ := holdersOf(k(""), 0)
	return heldOrFree(len(holders.zset) > 0)
}

// fairStatus: a FairSemaphore is held while a ticket holds (the holders
// hash); the others in the queue wait.
func fairStatus(k func(string) keyState) string { return heldOrFree(len(k(":holders").hash) > 0) }

// latchStatus: a latch is closed while its count is above zero, else open
// (as Wait and Count read it: a missing count is 0).
func latchStatus(k func(string) keyState) string {
	if c := k("").hash["count"]; c != "" && c != "0" {
		return "closed"
	}
	return "open"
}

// toolFlags are the flags inspect, list and release share.
type toolFlags struct {
	target
	prefix string
}

// flagSet makes the command's flag set with -addr, -driver and -prefix.
func (o *toolFlags) flagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet(name, synopsis, stderr)
	fs.StringVar(&o.addr, "addr", "localhost:6379", "Redis address host:port")
	fs.StringVar(&o.driver, "driver", "goredis", "driver: goredis, rueidis, valkey or redigo")
	fs.StringVar(&o.prefix, "prefix", keyspace.DefaultPrefix, "key prefix of the primitives (primitives.WithPrefix)")
	o.verboseFlag(fs, stderr)
	return fs
}

// parse parses args, flags before or after the positional arguments (a
// "--" ends the flags), and returns the NAME argument when wantName.
func (o *toolFlags) parse(fs *flag.FlagSet, args []string, wantName bool) (string, error) {
	pos, err := o.parseArgs(fs, args)
	if err != nil {
		return "", err
	}
	switch {
	case wantName && len(pos) == 0:
		return "", fmt.Errorf("%w: missing NAME (usage: latchctl %s NAME [flags])", errUsage, fs.Name())
	case wantName && pos[0] == "":
		return "", fmt.Errorf("%w: empty NAME", errUsage)
	case wantName && len(pos) > 1:
		return "", fmt.Errorf("%w: unexpected argument %q", errUsage, pos[1])
	case !wantName && len(pos) > 0:
		return "", fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	if wantName {
		return pos[0], nil
	}
	return "", nil
}

// parseArgs parses args, flags before or after the positional arguments (a
// "--" ends the flags), checks the shared flags and returns the positional
// arguments.
func (o *toolFlags) parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	switch {
	case o.addr == "":
		return nil, fmt.Errorf("%w: -addr is empty", errUsage)
	case strings.ContainsAny(o.prefix, "{}"):
		return nil, fmt.Errorf("%w: -prefix %q contains '{' or '}'", errUsage, o.prefix)
	}
	return pos, nil
}

// connect runs f with a client of the server, closed afterwards.
func (o *toolFlags) connect(ctx context.Context, f func(backend.Backend, func(context.Context, ...string) (any, error)) error) error {
	if err := o.open(); err != nil {
		return err
	}
	defer o.close()
	b, do, closeFn, err := o.client(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	return f(b, do)
}

// runInspect is `latchctl inspect`: who holds a primitive, read in one
// script. Without -kind it shows every kind of primitive that has keys
// under NAME, and fails when there is none; with -kind it shows that
// kind, and fails, saying what NAME does hold, when NAME has no key of
// it.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o toolFlags
	fs := o.flagSet("inspect", "NAME [-kind "+kindSynopsis+"] [flags]", stderr)
	kindFlag := fs.String("kind", "", "the kind: "+kindHelp+" (default: every kind with keys under NAME)")
	var layouts layoutFlags
	fs.Var(&layouts, "layout", layoutHelp)
	name, err := o.parse(fs, args, true)
	if err != nil {
		return err
	}
	kinds, err := layouts.kinds()
	if err != nil {
		return err
	}
	var want *kind
	if *kindFlag != "" {
		if want, err = kindByName(kinds, *kindFlag); err != nil {
			return err
		}
	}
	base := keyspace.KeyBase(o.prefix, name)
	return o.connect(ctx, func(b backend.Backend, do func(context.Context, ...string) (any, error)) error {
		v, err := readView(ctx, b, base, kinds)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", printable(name), err)
		}
		who := clients{}
		if err := who.lookup(ctx, do, o.prefix, v.tokens()); err != nil {
			return fmt.Errorf("inspect %s: %w", printable(name), err)
		}
		var held []string // the kinds with keys under name
		for i := range kinds {
			if v.state(&kinds[i]) != "" {
				held = append(held, kinds[i].name)
			}
		}
		switch {
		case want == nil && len(held) == 0:
			return fmt.Errorf("no primitive named %s under prefix %q (try -prefix or latchctl list)", printable(name), o.prefix)
		case want != nil && v.state(want) == "":
			return fmt.Errorf("no %s named %s under prefix %q: %s", want.name, printable(name), o.prefix, holding(want, held))
		}
		for i := range kinds {
			k := &kinds[i]
			state := v.state(k)
			if want != nil && k != want || state == "" {
				continue
			}
			get := v.of(k)
			fmt.Fprintf(stdout, "%s %s: %s\n", k.name, printable(name), k.head(get))
			for _, ks := range k.specs() {
				if st := get(ks.suffix); st.exists() && st.typ != ks.typ {
					fmt.Fprintf(stdout, "  warning: %s is a %s, not a %s: the primitive fails until it is fixed\n", printable(base+k.sub+ks.suffix), st.typ, ks.typ)
				}
			}
			k.show(stdout, v.now, state, get, who)
		}
		return nil
	})
}

// holding says what a name that has no key of kind want holds instead:
// the kinds with keys under it, held.
func holding(want *kind, held []string) string {
	var s string
	switch len(held) {
	case 0:
		s = "nothing is under it (try -prefix or latchctl list)"
	case 1:
		s = "it holds " + article(held[0]) + " (try -kind " + held[0] + ")"
	default:
		for i, h := range held {
			held[i] = article(h)
		}
		s = "it holds " + strings.Join(held[:len(held)-1], ", ") + " and " + held[len(held)-1]
	}
	if want.name == string(latchkit.KindLatch) {
		s += "; a latch never set, or expired, is open"
	}
	return s
}

// article puts "a" or "an" before a kind's name, as it is read ("an
// rwlock": an R-W lock).
func article(kind string) string {
	if strings.IndexByte("aeiour", kind[0]) >= 0 {
		return "an " + kind
	}
	return "a " + kind
}

// heldFenceHead is the head of a kind whose holders keep their fences
// (see kind.heldFences): the highest fence held, or the one kept beside
// the given-back tokens while it may be ahead of the clock, or none.
func (k *kind) heldFenceHead(get func(string) keyState) string {
	var held int64
	for _, suffix := range k.heldFences {
		held = max(held, highestFence(get(suffix)))
	}
	if held > 0 {
		return fmt.Sprintf("fence %d (the highest held)", held)
	}
	if f, ok := get(k.givenBack).score("#"); ok {
		return fmt.Sprintf("fence %d (kept: it may be ahead of the server's clock)", f)
	}
	return "fence none kept (the next grant's is the server's clock in µs)"
}

// highestFence is the highest fence a key of holders keeps (see
// keyspace.LayoutKey.HeldFences), or 0.
func highestFence(st keyState) int64 {
	var top int64
	switch st.typ {
	case "zset":
		for _, m := range st.zset {
			if strings.HasPrefix(m.token, "#") {
				top = max(top, m.score)
			}
		}
	case "hash":
		for _, f := range st.hash {
			n, _ := strconv.ParseInt(f, 10, 64)
			top = max(top, n)
		}
	case "string":
		_, f := splitLock(st.val)
		n, _ := strconv.ParseInt(f, 10, 64)
		top = n
	}
	return top
}

// holdersOf splits a zset of holders (a Semaphore's, an RWLock's readers)
// read at now (server ms) into the holders (token -> expiry, server ms)
// and their fences. In the spread form a holder's token is scored by its
// expiry and its member "#"+token by its fence; a lone holder's token is
// scored by its fence, and the key's expiry is its own.
func holdersOf(st keyState, now int64) (holders keyState, fences map[string]string) {
	holders, fences = st, map[string]string{}
	holders.zset = nil
	for _, m := range st.zset {
		switch tok, ok := strings.CutPrefix(m.token, "#"); {
		case ok:
			fences[tok] = strconv.FormatInt(m.score, 10)
		case m.score >= 1e14 && len(st.zset) == 1: // lone
			fences[m.token] = strconv.FormatInt(m.score, 10)
			holders.zset = append(holders.zset, member{m.token, now + st.pttl})
		default:
			holders.zset = append(holders.zset, m)
		}
	}
	return holders, fences
}

// lockFenceHead is the head of a kind whose lock holds its fence (the
// Mutex layout): the holder's fence, or the one a free marker keeps for a
// while, or none.
func lockFenceHead(k func(string) keyState) string {
	l, holder := k("").mutexLock()
	switch {
	case l.Fence == 0:
	case holder != "":
		return fmt.Sprintf("fence %d (the holder's)", l.Fence)
	default:
		return fmt.Sprintf("fence %d (kept by the free lock key until the next grant, or the server's clock passes it)", l.Fence)
	}
	return "fence none kept (the next grant's is the server's clock in µs)"
}

// splitLock splits an RWLock's writer value, "token fence", into its
// token and fence (empty for a bare token).
func splitLock(v string) (token, fence string) {
	token, fence, _ = strings.Cut(v, " ")
	return token, fence
}

// latchHead is a latch's head: its count, and the count it was set to.
func latchHead(k func(string) keyState) string {
	h := k("").hash
	count, ok := h["count"]
	if !ok {
		return "count 0"
	}
	if set, ok := h["initial"]; ok {
		return "count " + count + " of " + set
	}
	return "count " + count
}

// showLatch shows whether a latch is open, the time its key has left, and
// how many count-down and set calls it has recorded (the ids of this
// round's calls, and for a minute after a re-arming those of the round
// before: a resent copy of any of them is recognized).
func showLatch(w io.Writer, _ int64, state string, k func(string) keyState, _ clients) {
	st := k("")
	if st.typ != "hash" {
		fmt.Fprintln(w, " ", state)
		return
	}
	ttl := "ttl=none"
	if st.pttl >= 0 {
		ttl = ttlField(st.pttl)
	}
	downs, sets := 0, 0
	for f := range st.hash {
		switch {
		case strings.HasPrefix(f, "d:"):
			downs++
		case strings.HasPrefix(f, "s:"):
			sets++
		}
	}
	fmt.Fprintf(w, "  %s  %s  count-downs=%d  sets=%d\n", state, ttl, downs, sets)
}

// showMutex shows a Mutex's holder (its token and fence are the lock's
// value, its TTL the lock key's), then its queued waiters in
// arrival order (their TTL is how long their place outlives their last
// attempt).
func showMutex(w io.Writer, now int64, state string, k func(string) keyState, who clients) {
	lock, queue, alive := k(""), k(":q"), k(":qlive")
	if l, holder := lock.mutexLock(); holder != "" {
		fence := strconv.FormatInt(l.Fence, 10)
		line(w, "holder", holder, fenceField(fence), lock.holdLeft(l), traceField(k(":who").val), who.field(holder), sinceField(now, fence))
	} else {
		fmt.Fprintln(w, " ", state)
	}
	for _, m := range queue.zset {
		ttl := "ttl=?"
		if exp, ok := alive.score(m.token); ok {
			ttl = ttlField(exp - now)
		}
		line(w, "waiting", m.token, ttl, who.field(m.token))
	}
}

// showElection shows an Election's leader (its value, fence and TTL, and
// the holder's token prefix), then the campaigners waiting in arrival
// order with the values they campaign with.
func showElection(w io.Writer, now int64, state string, k func(string) keyState, who clients) {
	lock, seat, cand := k(""), k(":seat"), k(":cand").hash
	if l, holder := lock.mutexLock(); holder != "" {
		value := "value=(handed over, not yet confirmed)"
		if v, ok := seat.hash["v"]; ok {
			value = "value=" + printable(v)
		}
		fence := strconv.FormatInt(l.Fence, 10)
		line(w, "leader", holder, value, fenceField(seat.hash["f"]), lock.holdLeft(l), traceField(k(":who").val), who.field(holder), sinceField(now, fence))
	} else {
		fmt.Fprintf(w, "  %s: no leader\n", state)
	}
	alive := k(":qlive")
	for _, m := range k(":q").zset {
		ttl := "ttl=?"
		if exp, ok := alive.score(m.token); ok {
			ttl = ttlField(exp - now)
		}
		value := ""
		if v, ok := cand[m.token]; ok {
			value = "value=" + printable(v)
		}
		line(w, "waiting", m.token, value, ttl, who.field(m.token))
	}
}

// showRW shows an RWLock's writer, its readers by fence and its waiting
// writers' intents (with the time each intent has left).
func showRW(w io.Writer, now int64, state string, k func(string) keyState, who clients) {
	writer, waiting := k(":writer"), k(":waiting")
	readers, fences := holdersOf(k(":readers"), now)
	notes := k(":who").hash
	if state != "held" {
		fmt.Fprintln(w, " ", state)
	}
	if writer.typ == "string" {
		ttl := "ttl=none"
		if writer.pttl >= 0 {
			ttl = ttlField(writer.pttl)
		}
		token, fence := splitLock(writer.val)
		line(w, "writer", token, fenceField(fence), ttl, traceField(notes[token]), who.field(token), sinceField(now, fence))
	}
	showHolders(w, now, "reader", readers, fences, notes, nil, who)
	intents := slices.Clone(waiting.zset)
	slices.SortFunc(intents, func(a, b member) int { return strings.Compare(a.token, b.token) })
	for _, m := range intents {
		line(w, "waiting", m.token, ttlField(m.score-now), who.field(m.token))
	}
}

// showSem shows a Semaphore's stored limit, then its holders by fence with
// the permits each holds, then the waiters' marks.
func showSem(w io.Writer, now int64, state string, k func(string) keyState, who clients) {
	showLimit(w, k(":limit"))
	holders, fences := holdersOf(k(""), now)
	weights := k(":weights").hash
	if state != "held" {
		fmt.Fprintln(w, " ", state)
	}
	showHolders(w, now, "holder", holders, fences, k(":who").hash, weights, who)
	if exp, err := strconv.ParseInt(weights["!"], 10, 64); err == nil && exp > now {
		fmt.Fprintf(w, "  waiters wait (mark %s): releases wake them\n", ttlField(exp-now))
	}
	if exp, err := strconv.ParseInt(weights["~"], 10, 64); err == nil && exp > now {
		fmt.Fprintf(w, "  a waiter for several permits waits (mark %s): releases wake every waiter\n", ttlField(exp-now))
	}
}

// showLimit shows the limit SetLimit stored, if any (every client grants
// by it instead of its constructor's), and how long it is kept.
func showLimit(w io.Writer, limit keyState) {
	if limit.typ != "string" {
		return
	}
	ttl := "ttl=none"
	if limit.pttl >= 0 {
		ttl = ttlField(limit.pttl)
	}
	fmt.Fprintf(w, "  limit %s (stored by SetLimit)  %s\n", printable(limit.val), ttl)
}

// permitsField is the permits a holder or waiter of a weighted semaphore
// holds or asks for, when more than one.
func permitsField(weights map[string]string, token string) string {
	if n, ok := weights[token]; ok {
		return "permits=" + printable(n)
	}
	return ""
}

// showHolders shows the members of a sorted set of holders (token ->
// expiry in server ms), by fence, then token.
func showHolders(w io.Writer, now int64, role string, holders keyState, fences, notes, weights map[string]string, who clients) {
	ms := slices.Clone(holders.zset)
	fence := func(m member) int64 {
		f, err := strconv.ParseInt(fences[m.token], 10, 64)
		if err != nil {
			return -1
		}
		return f
	}
	slices.SortFunc(ms, func(a, b member) int {
		return cmp.Or(cmp.Compare(fence(a), fence(b)), strings.Compare(a.token, b.token))
	})
	for _, m := range ms {
		line(w, role, m.token, fenceField(fences[m.token]), permitsField(weights, m.token), ttlField(m.score-now), traceField(notes[m.token]),
			who.field(m.token), sinceField(now, fences[m.token]))
	}
}

// showFair shows a FairSemaphore's queue in ticket order: the tickets in
// the holders hash hold, the others wait (their TTL is how long their place
// outlives their last attempt).
func showFair(w io.Writer, now int64, state string, k func(string) keyState, who clients) {
	showLimit(w, k(":limit"))
	queue, alive := k(":queue"), k(":alive")
	holders, notes, weights := k(":holders").hash, k(":who").hash, k(":weights").hash
	if state != "held" {
		fmt.Fprintln(w, " ", state)
	}
	for _, m := range queue.zset {
		ticket := "ticket=" + strconv.FormatInt(m.score, 10)
		ttl := "ttl=?"
		if exp, ok := alive.score(m.token); ok {
			ttl = ttlField(exp - now)
		}
		if f, ok := holders[m.token]; ok {
			line(w, "holder", m.token, ticket, fenceField(f), permitsField(weights, m.token), ttl, traceField(notes[m.token]), who.field(m.token), sinceField(now, f))
		} else {
			line(w, "waiting", m.token, ticket, permitsField(weights, m.token), ttl, who.field(m.token))
		}
	}
}

// line prints one holder or waiter: its role, token prefix and fields.
func line(w io.Writer, role, token string, fields ...string) {
	fmt.Fprintf(w, "  %-7s %s", role, shortToken(token))
	for _, f := range fields {
		if f != "" {
			fmt.Fprint(w, "  ", f)
		}
	}
	fmt.Fprintln(w)
}

// shortToken is 8 characters of a token followed by "…": enough to tell
// holders apart, never the whole token, which lets whoever knows it
// release the lease. Of a token that begins with its Client's id (see
// keyspace.TokenClient) they are the first of its own random digits (the
// id, which every lease of the Client shares, is shown as its client);
// of another value, its first 8 (of a shorter one, its first half). A
// queue entry ("token inbox") shows its token's.
func shortToken(t string) string {
	t = entryToken(t)
	if _, ok := keyspace.TokenClient(t); ok {
		return t[keyspace.ClientIDHex:keyspace.ClientIDHex+8] + "…"
	}
	n := min(8, len(t)/2)
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, t[:n]) + "…"
}

func fenceField(f string) string {
	if f == "" {
		return "fence=?"
	}
	return "fence=" + f
}

// ttlField formats the milliseconds a holder has left.
func ttlField(ms int64) string {
	if ms <= 0 {
		return "ttl=expired"
	}
	return "ttl=" + (time.Duration(ms) * time.Millisecond).String()
}

// traceField is "trace=<trace id>" for a W3C traceparent
// ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"), else "".
func traceField(tp string) string {
	p := strings.Split(tp, "-")
	if len(p) != 4 || len(p[1]) != 32 || len(p[2]) != 16 {
		return ""
	}
	if _, err := hex.DecodeString(p[1]); err != nil {
		return ""
	}
	return "trace=" + strings.ToLower(p[1])
}

// printable returns s as it is when it prints plainly on one line, else
// Go-quoted.
func printable(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return r == utf8.RuneError || r == '"' || unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// runList is `latchctl list`: the primitives under -prefix, one line per
// primitive (kind, state and name), sorted by name, then kind. It finds
// the names by SCAN (never KEYS, which blocks the server), then reads each
// name's keys in one script, as inspect does, and prints the state inspect
// shows (view.state): held, free, remembered, or a latch's open or closed.
// Keys of other prefixes that begin with -prefix, and keys no primitive
// makes, are skipped. When it finds none it says so on stderr (stdout
// stays empty) and succeeds.
func runList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o toolFlags
	fs := o.flagSet("list", "[flags]", stderr)
	var layouts layoutFlags
	fs.Var(&layouts, "layout", layoutHelp)
	if _, err := o.parse(fs, args, false); err != nil {
		return err
	}
	kinds, err := layouts.kinds()
	if err != nil {
		return err
	}
	found := 0
	who := clients{}
	err = o.connect(ctx, func(b backend.Backend, do func(context.Context, ...string) (any, error)) error {
		names := map[string]bool{}
		for cursor := "0"; ; {
			v, err := do(ctx, "SCAN", cursor, "MATCH", globEscape(o.prefix)+"*", "COUNT", "1000")
			if err != nil {
				return fmt.Errorf("list: SCAN: %w", err)
			}
			a, _ := v.([]any)
			if len(a) != 2 {
				return fmt.Errorf("list: SCAN: unexpected reply %#v", v)
			}
			keys, _ := a[1].([]any)
			for _, key := range keys {
				prefix, name, suffix, ok := keyspace.ParseKeyBase(fmt.Sprint(key))
				if ok && prefix == o.prefix && kindOfSuffix(kinds, suffix) != nil {
					names[name] = true
				}
			}
			if cursor = fmt.Sprint(a[0]); cursor == "0" {
				break
			}
		}
		// One script per name: its keys share the name's hash tag.
		for _, name := range slices.Sorted(maps.Keys(names)) {
			v, err := readView(ctx, b, keyspace.KeyBase(o.prefix, name), kinds)
			if err != nil {
				return fmt.Errorf("list: %s: %w", printable(name), err)
			}
			if err := who.lookup(ctx, do, o.prefix, v.tokens()); err != nil {
				return fmt.Errorf("list: %s: %w", printable(name), err)
			}
			type entry struct{ kind, state, people string }
			var es []entry
			for i := range kinds {
				if state := v.state(&kinds[i]); state != "" { // "": gone since the SCAN
					hs, ws := kinds[i].people(v.of(&kinds[i]))
					es = append(es, entry{kinds[i].name, state, peopleField(v.now, hs, ws, who)})
				}
			}
			slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.kind, b.kind) })
			for _, e := range es {
				if e.people == "" {
					fmt.Fprintf(stdout, "%-15s %-10s %s\n", e.kind, e.state, printable(name))
				} else {
					fmt.Fprintf(stdout, "%-15s %-10s %s  %s\n", e.kind, e.state, printable(name), e.people)
				}
				found++
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if found == 0 {
		// Said on stderr: stdout stays one line per primitive.
		fmt.Fprintf(stderr, "latchctl: no primitives under prefix %q on %s\n", o.prefix, o.describe())
	}
	return nil
}

// fenceKeep is how long a forced release of a Mutex-layout name keeps its
// last fence in a free marker of its lock key, past the server's clock
// reaching it: the next grant's fence is above it, and once the server's
// clock (in µs) has passed it, above it anyway.
const fenceKeep = time.Minute

// globEscape escapes the characters SCAN's MATCH pattern treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// runRelease is `latchctl release`: a forced release of a stuck primitive.
// In one script it deletes the primitive's keys (its holders, waiters'
// places, fences of holders and annotations) and publishes a message on
// its release channel that wakes every waiter. It keeps the tokens given
// back (a late copy of a given-up attempt stays refused) and, beside them,
// the highest fence held (fenceKeep after the server's clock passes it):
// fences must never repeat or go backwards, so the next grant's fence is
// above every earlier one. Whoever held the primitive is not told: its
// next extend or release finds the lease lost.
//
// It refuses, changing nothing, unless -force is given and -confirm repeats
// NAME.
func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o toolFlags
	fs := o.flagSet("release", "NAME -kind "+kindSynopsis+" -force -confirm NAME [flags]", stderr)
	kindFlag := fs.String("kind", "", "the kind (required): "+kindHelp)
	force := fs.Bool("force", false, "really delete the primitive's keys")
	confirm := fs.String("confirm", "", "NAME again, to confirm")
	name, err := o.parse(fs, args, true)
	if err != nil {
		return err
	}
	if *kindFlag == "" {
		return fmt.Errorf("%w: release needs -kind (%s)", errUsage, kindNames)
	}
	k, err := kindByName(kinds, *kindFlag)
	if err != nil {
		return err
	}
	if !*force || *confirm != name {
		return fmt.Errorf("%w: refusing to release %s %s: a forced release takes the primitive away from whoever holds it; "+
			"give -force and -confirm %s to do it (nothing was changed)", errUsage, k.name, printable(name), printable(name))
	}
	base := keyspace.KeyBase(o.prefix, name)
	keys := k.releaseKeys(base)
	fenced, nheld := "", 0
	switch {
	case k.lockFence:
		fenced = "lock"
		// The lock, the finished tokens, then the others.
		lock, gone := base+k.sub, base+k.sub+":gone"
		rest := slices.DeleteFunc(slices.Clone(keys), func(s string) bool { return s == lock || s == gone })
		keys = append([]string{lock, gone}, rest...)
	case k.heldFences != nil:
		fenced, nheld = "held", len(k.heldFences)
		// The given-back tokens, the keys that hold fences, then the others.
		front := []string{base + k.sub + k.givenBack}
		for _, s := range k.heldFences {
			front = append(front, base+k.sub+s)
		}
		rest := slices.DeleteFunc(slices.Clone(keys), func(s string) bool { return slices.Contains(front, s) })
		keys = append(front, rest...)
	}
	return o.connect(ctx, func(b backend.Backend, _ func(context.Context, ...string) (any, error)) error {
		v, err := b.Eval(ctx, releaseScript, keys, []string{k.channel(base), pubsub.WakeAll, fenced, strconv.FormatInt(fenceKeep.Milliseconds(), 10), strconv.Itoa(nheld)})
		if err != nil {
			return fmt.Errorf("release %s %s: %w", k.name, printable(name), err)
		}
		a, _ := v.([]backend.Value)
		var n int64
		ok := len(a) == 2
		if ok {
			n, ok = a[0].(int64)
		}
		if !ok {
			return fmt.Errorf("release %s %s: unexpected reply %#v", k.name, printable(name), v)
		}
		fence := "none"
		if f, ok := a[1].(string); ok {
			fence = f
		}
		fmt.Fprintf(stdout, "released %s %s: deleted %d keys, woke waiters on %s\n", k.name, printable(name), n, printable(k.channel(base)))
		switch {
		case k.lockFence:
			fmt.Fprintf(stdout, "kept the fence (%s) in the free lock key %s: fences never repeat or go backwards\n", fence, printable(keys[0]))
		case k.heldFences != nil:
			fmt.Fprintf(stdout, "kept the fence (%s) beside the given-back tokens %s: fences never repeat or go backwards\n", fence, printable(keys[0]))
		default:
			fmt.Fprintf(stdout, "the %s is open: its waiters return\n", k.name)
		}
		return nil
	})
}

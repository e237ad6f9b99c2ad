package main

// The inspection tools: inspect, list and release. They read (and, for
// release, delete) a primitive's keys directly, in the layouts the scripts
// of package primitives document:
//
//	latchctl inspect NAME [-kind KIND] [-addr host:port] [-prefix latch:]
//	latchctl list [-prefix latch:] [-addr host:port]
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
// consistent. list finds primitives by SCAN (never KEYS). release deletes
// a stuck primitive's keys and wakes its waiters, in one script; it keeps
// the fence counter, so that fences never repeat or go backwards. A
// released latch is open: its waiters return.
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
	fenced  bool     // it has a fence counter (sub+":fence"); a latch, and the Mutex layout, have none
	// lockFence: its lock's value is "token fence" (the Mutex layout), and
	// the fence outlives it beside the finished tokens (sub+":gone",
	// member "#") while it may be ahead of the server's clock.
	lockFence bool
	keys      []keySpec // every key but the fence counter
	// memory are the suffixes (after sub) of the keys that outlive the
	// leases for a while: a name with no other key is remembered, not held.
	memory map[string]bool
	// head is what inspect's first line says after the name: the fence
	// counter, a latch's count.
	head func(k func(suffix string) keyState) string
	show func(w io.Writer, now int64, k func(suffix string) keyState)
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
	show := map[string]func(io.Writer, int64, func(string) keyState){
		"mutex": showMutex, "rw": showRW, "sem": showSem, "fairsem": showFair, "election": showElection, "latch": showLatch,
	}
	var ks []kind
	for _, l := range keyspace.Layouts() {
		k := kind{name: l.Kind, sub: l.Sub, show: show[l.Kind], head: fenceHead}
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
			if lk.Fence {
				k.fenced = true
			} else {
				k.keys = append(k.keys, keySpec{lk.Suffix, lk.Type, lk.Setting})
			}
		}
		if l.Kind == "latch" {
			k.head = latchHead
		}
		ks = append(ks, k)
	}
	return ks
}()

// layoutNames maps the Kind of a keyspace.Layout to latchctl's name of
// it, the latchkit.Kind of the primitives it holds as spans, metrics and
// logs name them (one vocabulary: issue 30), and the other -kind values it
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
func kindByName(s string) (*kind, error) {
	for i := range kinds {
		if kinds[i].name == s || slices.Contains(kinds[i].aliases, s) {
			return &kinds[i], nil
		}
	}
	return nil, fmt.Errorf("%w: -kind %q: want %s", errUsage, s, kindNames)
}

// kindOfSuffix returns the kind a key's suffix (after its KeyBase) belongs
// to, or nil for a key no primitive makes.
func kindOfSuffix(suffix string) *kind {
	for i, k := range kinds {
		if k.fenced && suffix == k.sub+":fence" {
			return &kinds[i]
		}
		for _, ks := range k.keys {
			if suffix == k.sub+ks.suffix {
				return &kinds[i]
			}
		}
	}
	return nil
}

// fenceKey is the fence counter, which release never deletes (a kind
// that is not fenced has none).
func (k *kind) fenceKey(base string) string { return base + k.sub + ":fence" }

// channel is where the primitive's waiters listen for releases.
func (k *kind) channel(base string) string { return base + k.sub + ":rel" }

// specs are the kind's keys as allKeys lists them: the fence counter
// first, when it has one.
func (k *kind) specs() []keySpec {
	if !k.fenced {
		return k.keys
	}
	return append([]keySpec{{":fence", "string", false}}, k.keys...)
}

// allKeys is the fence counter (when the kind has one) followed by the
// other keys.
func (k *kind) allKeys(base string) []string {
	var keys []string
	for _, ks := range k.specs() {
		keys = append(keys, base+k.sub+ks.suffix)
	}
	return keys
}

// releaseKeys is allKeys without the settings (a stored limit): the fence
// counter, when the kind has one, then the keys a forced release deletes.
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
		st := keyState{typ: typ, pttl: pttl}
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

// toolFlags are the flags inspect, list and release share.
type toolFlags struct {
	target
	prefix string
}

// flagSet makes the command's flag set with -addr, -driver and -prefix.
func (o *toolFlags) flagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: latchctl %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
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
// under NAME.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o toolFlags
	fs := o.flagSet("inspect", "NAME [-kind "+kindSynopsis+"] [flags]", stderr)
	kindFlag := fs.String("kind", "", "the kind: "+kindHelp+" (default: every kind with keys under NAME)")
	name, err := o.parse(fs, args, true)
	if err != nil {
		return err
	}
	show := kinds
	if *kindFlag != "" {
		k, err := kindByName(*kindFlag)
		if err != nil {
			return err
		}
		show = []kind{*k}
	}
	base := keyspace.KeyBase(o.prefix, name)
	var keys []string
	for _, k := range show {
		keys = append(keys, k.allKeys(base)...)
	}
	return o.connect(ctx, func(b backend.Backend, _ func(context.Context, ...string) (any, error)) error {
		now, states, err := snapshot(ctx, b, keys)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", printable(name), err)
		}
		found := false
		for _, k := range show {
			all := k.allKeys(base)
			if *kindFlag == "" && !slices.ContainsFunc(all, func(key string) bool { return states[key].exists() }) {
				continue
			}
			found = true
			get := func(suffix string) keyState { return states[base+k.sub+suffix] }
			fmt.Fprintf(stdout, "%s %s: %s\n", k.name, printable(name), k.head(get))
			for i, ks := range k.specs() {
				if st := states[all[i]]; st.exists() && st.typ != ks.typ {
					fmt.Fprintf(stdout, "  warning: %s is a %s, not a %s: the primitive fails until it is fixed\n", printable(all[i]), st.typ, ks.typ)
				}
			}
			k.show(stdout, now, get)
		}
		if !found {
			return fmt.Errorf("no primitive named %s under prefix %q (try -kind, -prefix or latchctl list)", printable(name), o.prefix)
		}
		return nil
	})
}

// fenceHead is the head of a fenced kind: its fence counter.
func fenceHead(k func(string) keyState) string {
	if fence := k(":fence"); fence.exists() {
		return "fence counter " + fence.val
	}
	return "fence counter none"
}

// lockFenceHead is the head of a kind whose lock holds its fence (the
// Mutex layout): the holder's fence, or the one kept beside the finished
// tokens while it may be ahead of the clock, or none.
func lockFenceHead(k func(string) keyState) string {
	if lock := k(""); lock.typ == "string" {
		if _, f := splitLock(lock.val); f != "" {
			return "fence " + f + " (the holder's)"
		}
	}
	if f, ok := k(":gone").score("#"); ok {
		return fmt.Sprintf("fence %d (kept: it may be ahead of the server's clock)", f)
	}
	return "fence none kept (the next grant's is the server's clock in µs)"
}

// splitLock splits a Mutex lock's value into the holder's token and its
// fence ("" for a value of latchkit 0.x, the token alone).
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
func showLatch(w io.Writer, _ int64, k func(string) keyState) {
	st := k("")
	if st.typ != "hash" {
		fmt.Fprintln(w, "  open")
		return
	}
	state := "closed"
	if st.hash["count"] == "0" {
		state = "open"
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
func showMutex(w io.Writer, now int64, k func(string) keyState) {
	lock, queue, alive := k(""), k(":q"), k(":qlive")
	if lock.typ == "string" {
		ttl := "ttl=none"
		if lock.pttl >= 0 {
			ttl = ttlField(lock.pttl)
		}
		token, fence := splitLock(lock.val)
		line(w, "holder", token, fenceField(fence), ttl, traceField(k(":who").val))
	} else {
		fmt.Fprintln(w, "  free")
	}
	for _, m := range queue.zset {
		ttl := "ttl=?"
		if exp, ok := alive.score(m.token); ok {
			ttl = ttlField(exp - now)
		}
		line(w, "waiting", m.token, ttl)
	}
}

// showElection shows an Election's leader (its value, fence and TTL, and
// the holder's token prefix), then the campaigners waiting in arrival
// order with the values they campaign with.
func showElection(w io.Writer, now int64, k func(string) keyState) {
	lock, seat, cand := k(""), k(":seat"), k(":cand").hash
	if lock.typ == "string" {
		ttl := "ttl=none"
		if lock.pttl >= 0 {
			ttl = ttlField(lock.pttl)
		}
		value := "value=(handed over, not yet confirmed)"
		if v, ok := seat.hash["v"]; ok {
			value = "value=" + printable(v)
		}
		token, _ := splitLock(lock.val)
		line(w, "leader", token, value, fenceField(seat.hash["f"]), ttl, traceField(k(":who").val))
	} else {
		fmt.Fprintln(w, "  no leader")
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
		line(w, "waiting", m.token, value, ttl)
	}
}

// showRW shows an RWLock's writer, its readers by fence and its waiting
// writers' intents (with the time each intent has left).
func showRW(w io.Writer, now int64, k func(string) keyState) {
	writer, readers, waiting := k(":writer"), k(":readers"), k(":waiting")
	fences, who := k(":fences").hash, k(":who").hash
	if writer.typ == "string" {
		ttl := "ttl=none"
		if writer.pttl >= 0 {
			ttl = ttlField(writer.pttl)
		}
		line(w, "writer", writer.val, fenceField(fences[writer.val]), ttl, traceField(who[writer.val]))
	}
	showHolders(w, now, "reader", readers, fences, who, nil)
	intents := slices.Clone(waiting.zset)
	slices.SortFunc(intents, func(a, b member) int { return strings.Compare(a.token, b.token) })
	for _, m := range intents {
		line(w, "waiting", m.token, ttlField(m.score-now))
	}
	if writer.typ != "string" && len(readers.zset) == 0 && len(intents) == 0 {
		fmt.Fprintln(w, "  free")
	}
}

// showSem shows a Semaphore's stored limit, then its holders by fence with
// the permits each holds.
func showSem(w io.Writer, now int64, k func(string) keyState) {
	showLimit(w, k(":limit"))
	holders, weights := k(""), k(":weights").hash
	showHolders(w, now, "holder", holders, k(":fences").hash, k(":who").hash, weights)
	if len(holders.zset) == 0 {
		fmt.Fprintln(w, "  free")
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
func showHolders(w io.Writer, now int64, role string, holders keyState, fences, who, weights map[string]string) {
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
		line(w, role, m.token, fenceField(fences[m.token]), permitsField(weights, m.token), ttlField(m.score-now), traceField(who[m.token]))
	}
}

// showFair shows a FairSemaphore's queue in ticket order: the tickets in
// the holders hash hold, the others wait (their TTL is how long their place
// outlives their last attempt).
func showFair(w io.Writer, now int64, k func(string) keyState) {
	showLimit(w, k(":limit"))
	queue, alive := k(":queue"), k(":alive")
	holders, who, weights := k(":holders").hash, k(":who").hash, k(":weights").hash
	for _, m := range queue.zset {
		ticket := "ticket=" + strconv.FormatInt(m.score, 10)
		ttl := "ttl=?"
		if exp, ok := alive.score(m.token); ok {
			ttl = ttlField(exp - now)
		}
		if f, ok := holders[m.token]; ok {
			line(w, "holder", m.token, ticket, fenceField(f), permitsField(weights, m.token), ttl, traceField(who[m.token]))
		} else {
			line(w, "waiting", m.token, ticket, permitsField(weights, m.token), ttl)
		}
	}
	if len(queue.zset) == 0 {
		fmt.Fprintln(w, "  free")
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

// shortToken is the first 8 characters of a token (of a shorter value, the
// first half), followed by "…": enough to tell holders apart, never the
// whole token, which lets whoever knows it release the lease.
func shortToken(t string) string {
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
// primitive (kind, state and name), found by SCAN (never KEYS, which blocks the
// server), sorted by name, then kind. The state is "held" when any key
// but those that outlive the leases exists (a holder, a waiter, a count),
// else "remembered": only the finished tokens, fences, settings are left,
// and expire. Keys of other prefixes that begin
// with -prefix, and keys no primitive makes, are skipped. When it finds
// none it says so on stderr (stdout stays empty) and succeeds.
func runList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o toolFlags
	fs := o.flagSet("list", "[flags]", stderr)
	if _, err := o.parse(fs, args, false); err != nil {
		return err
	}
	type entry struct{ name, kind string }
	seen := map[entry]bool{} // true: held
	err := o.connect(ctx, func(_ backend.Backend, do func(context.Context, ...string) (any, error)) error {
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
				if k := kindOfSuffix(suffix); ok && prefix == o.prefix && k != nil {
					e := entry{name, k.name}
					seen[e] = seen[e] || !k.memory[strings.TrimPrefix(suffix, k.sub)]
				}
			}
			if cursor = fmt.Sprint(a[0]); cursor == "0" {
				return nil
			}
		}
	})
	if err != nil {
		return err
	}
	if len(seen) == 0 {
		// Said on stderr: stdout stays one line per primitive.
		fmt.Fprintf(stderr, "latchctl: no primitives under prefix %q on %s\n", o.prefix, o.describe())
		return nil
	}
	list := make([]entry, 0, len(seen))
	for e := range seen {
		list = append(list, e)
	}
	slices.SortFunc(list, func(a, b entry) int {
		return cmp.Or(strings.Compare(a.name, b.name), strings.Compare(a.kind, b.kind))
	})
	for _, e := range list {
		state := "remembered"
		if seen[e] {
			state = "held"
		}
		fmt.Fprintf(stdout, "%-15s %-10s %s\n", e.kind, state, printable(e.name))
	}
	return nil
}

// fenceKeep is how long a forced release of a Mutex-layout name keeps its
// last fence beside the finished tokens: the next grant's fence is above
// it, and once the server's clock (in µs) has passed it, above it anyway.
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
// places, fences of holders, release markers and annotations) and publishes
// a message on its release channel that wakes every waiter. It does NOT
// delete the fence counter: fences must never repeat or go backwards, so
// the next grant's fence is above every earlier one. Whoever held the
// primitive is not told: its next extend or release finds the lease lost.
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
	k, err := kindByName(*kindFlag)
	if err != nil {
		return err
	}
	if !*force || *confirm != name {
		return fmt.Errorf("%w: refusing to release %s %s: a forced release takes the primitive away from whoever holds it; "+
			"give -force and -confirm %s to do it (nothing was changed)", errUsage, k.name, printable(name), printable(name))
	}
	base := keyspace.KeyBase(o.prefix, name)
	keys := k.releaseKeys(base)
	fenced := ""
	switch {
	case k.fenced:
		fenced = "1"
	case k.lockFence:
		fenced = "lock"
		// The lock, the finished tokens, then the others.
		lock, gone := base+k.sub, base+k.sub+":gone"
		rest := slices.DeleteFunc(slices.Clone(keys), func(s string) bool { return s == lock || s == gone })
		keys = append([]string{lock, gone}, rest...)
	}
	return o.connect(ctx, func(b backend.Backend, _ func(context.Context, ...string) (any, error)) error {
		v, err := b.Eval(ctx, releaseScript, keys, []string{k.channel(base), pubsub.WakeAll, fenced, strconv.FormatInt(fenceKeep.Milliseconds(), 10)})
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
		case k.fenced:
			fmt.Fprintf(stdout, "kept the fence counter %s (at %s): fences never repeat or go backwards\n", printable(keys[0]), fence)
		case k.lockFence:
			fmt.Fprintf(stdout, "kept the fence (%s) beside the finished tokens %s: fences never repeat or go backwards\n", fence, printable(keys[1]))
		default:
			fmt.Fprintf(stdout, "the %s is open: its waiters return\n", k.name)
		}
		return nil
	})
}

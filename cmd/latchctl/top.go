package main

// latchctl top: a live view of the primitives under a prefix, refreshed
// every -interval: the names with the most waiters, the most hand-overs
// per second, the longest-held leases with their holders' Clients, and the
// leases held past -held-over.
//
//	latchctl top [-once] [-interval 1s] [-budget 10000] [-held-over 5m] [-rows 10] [-addr host:port] [-prefix latch:]
//
// Its cost on Redis is bounded per refresh: it finds names by SCAN (never
// KEYS), at most -budget keys per refresh, the cursor going on from one
// refresh to the next, and reads the names a refresh found with one script
// per batch of names (top.lua: a few commands per name and kind; one
// script per name on a Cluster, whose slots a batch would cross). A
// keyspace larger than the budget is read over several refreshes, a pass;
// the view shows every name as its last read found it, and a name not
// found again by a whole pass is dropped. -once reads one whole pass, with
// no pause, prints the view and exits.
//
// Hand-overs are counted from the release messages themselves: top
// subscribes to prefix*:rel* (one PSUBSCRIBE, on a connection of its own),
// and a message naming a waiter (a Mutex's, Election's, FairMutex's and
// FairSemaphore's hand-over: its payload starts with pubsub.TargetPrefix)
// counts one hand-over of its name. Every release message under the
// prefix then also reaches top, for as long as it runs.

import (
	"cmp"
	"context"
	_ "embed" // lua/top.lua
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/pubsub"
)

var (
	//go:embed lua/top.lua
	topSource string
	topScript = backend.NewScript(topSource)
)

// topFlags are top's flags.
type topFlags struct {
	toolFlags
	once     bool
	interval time.Duration
	budget   int
	heldOver time.Duration
	rows     int
	batch    int // names per script (tests)
}

// runTop is `latchctl top`.
func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o topFlags
	fs := o.flagSet("top", "[-once] [-interval 1s] [-budget 10000] [-held-over 5m] [-rows 10] [flags]", stderr)
	fs.BoolVar(&o.once, "once", false, "read the whole keyspace once, print the view and exit (for scripts)")
	fs.DurationVar(&o.interval, "interval", time.Second, "time between refreshes (with -once: the least time hand-overs are counted over)")
	fs.IntVar(&o.budget, "budget", 10000, "keys SCAN may return per refresh: a larger keyspace is read over several refreshes")
	fs.DurationVar(&o.heldOver, "held-over", 5*time.Minute, "list every lease held longer than this")
	fs.IntVar(&o.rows, "rows", 10, "rows of each ranking")
	o.batch = 100
	if _, err := o.parse(fs, args, false); err != nil {
		return err
	}
	switch {
	case o.interval <= 0:
		return fmt.Errorf("%w: -interval %v: want a positive duration", errUsage, o.interval)
	case o.budget < 1:
		return fmt.Errorf("%w: -budget %d: want at least 1", errUsage, o.budget)
	case o.rows < 1:
		return fmt.Errorf("%w: -rows %d: want at least 1", errUsage, o.rows)
	case o.heldOver < 0:
		return fmt.Errorf("%w: -held-over %v: want 0 or more", errUsage, o.heldOver)
	}
	return o.connect(ctx, func(b backend.Backend, do func(context.Context, ...string) (any, error)) error {
		hc, err := countHandovers(ctx, o.address(), o.prefix)
		if err != nil {
			return err
		}
		defer hc.close()
		v := &topView{o: &o, b: b, do: do, who: clients{}, batch: o.batch, cursor: "0"}
		if o.once {
			start := time.Now()
			st, err := v.pass(ctx)
			if err != nil {
				return err
			}
			if rest := o.interval - time.Since(start); rest > 0 {
				if pubsub.Sleep(ctx, rest) != nil {
					return ctx.Err()
				}
			}
			rates := hc.take()
			if err := v.render(ctx, stdout, rates); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "latchctl top: %s; hand-overs counted over %.1fs\n", st, rates.secs)
			return nil
		}
		t := time.NewTicker(o.interval)
		defer t.Stop()
		for {
			st, err := v.refresh(ctx, o.budget)
			if err != nil {
				return err
			}
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear
			rates := hc.take()
			if err := v.render(ctx, stdout, rates); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "\nthis refresh: %s; hand-overs counted over %.1fs; pass %d, %s read\n", st, rates.secs, v.passes+1, v.progress())
			select {
			case <-ctx.Done():
				return nil // Ctrl-C ends the view
			case <-t.C:
			}
		}
	})
}

// topName is one primitive of a name as top last read it.
type topName struct {
	kind    string // latchctl's kind name
	name    string
	holders []holder
	waiters int
	seen    int // the pass that last found it
}

// topView is what top knows of the keyspace, and where its SCAN is.
type topView struct {
	o      *topFlags
	b      backend.Backend
	do     func(context.Context, ...string) (any, error)
	who    clients
	batch  int // names per script; 1 once a Cluster refused a batch
	cursor string
	passes int     // passes completed
	seenIn float64 // of the current pass: keys returned so far
	lastN  float64 // keys the last whole pass returned (0 before one)
	now    int64   // the server's time of the last read, ms
	names  map[string]*topName
}

// topStats are one refresh's (or pass's) figures, for the status line.
type topStats struct {
	keys, names, scripts int
	took                 time.Duration
}

func (s topStats) String() string {
	return fmt.Sprintf("scanned %d keys, read %d names in %d scripts, in %v", s.keys, s.names, s.scripts, s.took.Round(time.Millisecond))
}

func (s *topStats) add(o topStats) {
	s.keys, s.names, s.scripts, s.took = s.keys+o.keys, s.names+o.names, s.scripts+o.scripts, s.took+o.took
}

// progress says how much of the current pass is read, when the keyspace's
// size is known from the last pass.
func (v *topView) progress() string {
	if v.lastN == 0 {
		return fmt.Sprintf("%d keys", int(v.seenIn))
	}
	return fmt.Sprintf("%.0f%%", min(100, 100*v.seenIn/v.lastN))
}

// pass refreshes until a whole pass over the keyspace is read.
func (v *topView) pass(ctx context.Context) (topStats, error) {
	var all topStats
	for start := v.passes; v.passes == start; {
		st, err := v.refresh(ctx, v.o.budget)
		if err != nil {
			return all, err
		}
		all.add(st)
	}
	return all, nil
}

// topKey is one key top reads of a name's kind: its suffix after the
// name's base and top.lua's op.
type topKey struct{ suffix, op string }

// topKeys are the keys top reads of each kind (by latchctl's kind name),
// and how it makes holders and waiters of what they hold.
var topKeys = map[string][]topKey{
	"mutex":          {{"", "S"}, {":qlive", "N"}},
	"election":       {{":el", "S"}, {":el:qlive", "N"}},
	"rwlock":         {{":rw:writer", "S"}, {":rw:readers", "Z"}, {":rw:waiting", "N"}},
	"semaphore":      {{":sem", "Z"}},
	"fair_semaphore": {{":fair:holders", "H"}, {":fair:queue", "C"}},
}

// refresh scans at most budget keys on from the cursor and reads the
// primitives of the names they belong to.
func (v *topView) refresh(ctx context.Context, budget int) (topStats, error) {
	start := time.Now()
	var st topStats
	found := map[string]map[string]bool{} // name -> kinds with a live key
	for st.keys < budget {
		v2, err := v.do(ctx, "SCAN", v.cursor, "MATCH", globEscape(v.o.prefix)+"*", "COUNT", strconv.Itoa(min(1000, budget-st.keys)))
		if err != nil {
			return st, fmt.Errorf("top: SCAN: %w", err)
		}
		a, _ := v2.([]any)
		if len(a) != 2 {
			return st, fmt.Errorf("top: SCAN: unexpected reply %#v", v2)
		}
		keys, _ := a[1].([]any)
		st.keys += len(keys)
		for _, key := range keys {
			prefix, name, suffix, ok := keyspace.ParseKeyBase(fmt.Sprint(key))
			if !ok || prefix != v.o.prefix {
				continue
			}
			k := kindOfSuffix(kinds, suffix)
			if k == nil || k.memory[strings.TrimPrefix(suffix, k.sub)] || topKeys[k.name] == nil {
				continue // memory, a latch: nothing held or waited for
			}
			if found[name] == nil {
				found[name] = map[string]bool{}
			}
			found[name][k.name] = true
		}
		if v.cursor = fmt.Sprint(a[0]); v.cursor == "0" {
			break
		}
	}
	if err := v.read(ctx, found, &st); err != nil {
		return st, err
	}
	v.seenIn += float64(st.keys)
	if v.cursor == "0" { // a whole pass: what it did not find is gone
		for id, n := range v.names {
			if n.seen < v.passes {
				delete(v.names, id)
			}
		}
		v.passes++
		v.lastN, v.seenIn = v.seenIn, 0
	}
	st.took = time.Since(start)
	return st, nil
}

// read reads the primitives of the names found, a batch of names per
// script, and updates the view.
func (v *topView) read(ctx context.Context, found map[string]map[string]bool, st *topStats) error {
	if v.names == nil {
		v.names = map[string]*topName{}
	}
	type part struct {
		name, kind string
		first      int // its first key's index in the batch
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range found {
			if !yield(n) {
				return
			}
		}
	})
	for len(names) > 0 {
		n := min(v.batch, len(names))
		batch := names[:n]
		var keys, ops []string
		var parts []part
		for _, name := range batch {
			base := keyspace.KeyBase(v.o.prefix, name)
			for _, kind := range slices.Sorted(func(yield func(string) bool) {
				for k := range found[name] {
					if !yield(k) {
						return
					}
				}
			}) {
				parts = append(parts, part{name, kind, len(keys)})
				for _, tk := range topKeys[kind] {
					keys, ops = append(keys, base+tk.suffix), append(ops, tk.op)
				}
			}
		}
		r, err := v.b.Eval(ctx, topScript, keys, ops)
		if err != nil && v.batch > 1 && strings.Contains(err.Error(), "CROSSSLOT") {
			v.batch = 1 // a Cluster: one name (one slot) per script
			continue
		}
		if err != nil {
			return fmt.Errorf("top: read %d names: %w", len(batch), err)
		}
		a, ok := r.([]backend.Value)
		if !ok || len(a) != len(keys)+1 {
			return fmt.Errorf("top: unexpected reply %#v", r)
		}
		v.now, _ = a[0].(int64)
		st.scripts++
		st.names += len(batch)
		for _, p := range parts {
			id := p.kind + " " + p.name
			hs, ws := topPeople(p.kind, a[p.first+1:], v.now)
			if len(hs) == 0 && ws == 0 {
				delete(v.names, id)
				continue
			}
			v.names[id] = &topName{kind: p.kind, name: p.name, holders: hs, waiters: ws, seen: v.passes}
		}
		names = names[n:]
	}
	return nil
}

// topPeople makes the holders and the number of waiters of a kind from
// top.lua's entries for its keys (topKeys), now being the server's ms.
func topPeople(kind string, e []backend.Value, now int64) (hs []holder, waiters int) {
	num := func(i int) int { n, _ := e[i].(int64); return int(n) }
	flat := func(i int) []string {
		a, _ := e[i].([]backend.Value)
		out := make([]string, 0, len(a))
		for _, x := range a {
			s, _ := x.(string)
			out = append(out, s)
		}
		return out
	}
	hash := func(i int) map[string]string {
		f := flat(i)
		m := make(map[string]string, len(f)/2)
		for j := 0; j+1 < len(f); j += 2 {
			m[f[j]] = f[j+1]
		}
		return m
	}
	lock := func(i int) (string, bool) {
		a, _ := e[i].([]backend.Value)
		if len(a) != 2 {
			return "", false
		}
		s, ok := a[0].(string)
		return s, ok
	}
	live := func(i int) { // a zset of holders (see holdersOf): those live at now
		f := flat(i)
		st := keyState{pttl: 1} // a lone holder lives while its key does (its PTTL is not read)
		for j := 0; j+1 < len(f); j += 2 {
			if sc, err := strconv.ParseFloat(f[j+1], 64); err == nil {
				st.zset = append(st.zset, member{f[j], int64(sc)})
			}
		}
		holders, fences := holdersOf(st, now)
		for _, m := range holders.zset {
			if m.score > now {
				hs = append(hs, holder{m.token, fences[m.token]})
			}
		}
	}
	switch kind {
	case "mutex", "election":
		if v, ok := lock(0); ok {
			if l := keyspace.ParseLock(v); l.HeldAt(now) != "" {
				hs = append(hs, holder{l.Owner, strconv.FormatInt(l.Fence, 10)})
			}
		}
		waiters = num(1)
	case "rwlock":
		if w, ok := lock(0); ok {
			token, fence := splitLock(w)
			hs = append(hs, holder{token, fence})
		}
		live(1)
		waiters = num(2)
	case "semaphore":
		live(0)
	case "fair_semaphore":
		h := hash(0)
		for t, f := range h {
			hs = append(hs, holder{t, f})
		}
		slices.SortFunc(hs, func(a, b holder) int { return strings.Compare(a.token, b.token) })
		waiters = max(num(1)-len(h), 0)
	}
	return hs, waiters
}

// topLease is one lease in the view, with its age.
type topLease struct {
	n     *topName
	h     holder
	since int64 // server ms of the grant
}

// render prints the view: its head, the rankings and the leases held past
// -held-over. rates are the hand-overs counted per name since the last
// render, over secs seconds.
func (v *topView) render(ctx context.Context, w io.Writer, rates handovers) error {
	o := v.o
	if v.now == 0 { // nothing read yet (no primitive found): the server's time all the same
		t, err := v.do(ctx, "TIME")
		a, _ := t.([]any)
		if err != nil || len(a) != 2 {
			return fmt.Errorf("top: TIME: %v %v", t, err)
		}
		sec, err := strconv.ParseInt(fmt.Sprint(a[0]), 10, 64)
		if err != nil {
			return fmt.Errorf("top: TIME: %v", t)
		}
		v.now = sec * 1000
	}
	var leases []topLease
	var tokens []string
	for _, n := range v.names {
		for _, h := range n.holders {
			if at, ok := grantTime(h.fence); ok {
				leases = append(leases, topLease{n, h, at})
			}
		}
	}
	slices.SortFunc(leases, func(a, b topLease) int {
		return cmp.Or(cmp.Compare(a.since, b.since), strings.Compare(a.n.name, b.n.name), strings.Compare(a.n.kind, b.n.kind), strings.Compare(a.h.token, b.h.token))
	})
	var over []topLease
	for _, l := range leases {
		if v.now-l.since > o.heldOver.Milliseconds() {
			over = append(over, l)
		}
	}
	longest := leases[:min(o.rows, len(leases))]
	for _, l := range append(slices.Clone(longest), over...) {
		tokens = append(tokens, l.h.token)
	}
	byWaiters := slices.Collect(func(yield func(*topName) bool) {
		for _, n := range v.names {
			if n.waiters > 0 && !yield(n) {
				return
			}
		}
	})
	slices.SortFunc(byWaiters, func(a, b *topName) int {
		return cmp.Or(cmp.Compare(b.waiters, a.waiters), strings.Compare(a.name, b.name), strings.Compare(a.kind, b.kind))
	})
	byWaiters = byWaiters[:min(o.rows, len(byWaiters))]
	for _, n := range byWaiters {
		for _, h := range n.holders {
			tokens = append(tokens, h.token)
		}
	}
	if err := v.who.lookup(ctx, v.do, o.prefix, tokens); err != nil {
		return fmt.Errorf("top: %w", err)
	}

	held, waiting := 0, 0
	for _, n := range v.names {
		if len(n.holders) > 0 {
			held++
		}
		waiting += n.waiters
	}
	fmt.Fprintf(w, "latchctl top  %s  prefix %s  server time %s\n", o.describe(), printable(o.prefix), time.UnixMilli(v.now).UTC().Format("2006-01-02T15:04:05Z"))
	fmt.Fprintf(w, "%d primitives: %d held, %d waiters\n", len(v.names), held, waiting)

	fmt.Fprintf(w, "\nMOST WAITERS\n")
	if len(byWaiters) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, n := range byWaiters {
		var hs []string
		for _, h := range n.holders {
			hs = append(hs, v.who.name(h.token))
		}
		holders := "held by " + strings.Join(hs, ", ")
		if len(hs) == 0 {
			holders = "free"
		}
		fmt.Fprintf(w, "  %7d  %-14s %s  (%s)\n", n.waiters, n.kind, printable(n.name), holders)
	}

	fmt.Fprintf(w, "\nMOST HAND-OVERS/S\n")
	ranked := rates.ranked(o.rows)
	if len(ranked) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, r := range ranked {
		fmt.Fprintf(w, "  %7.1f  %s\n", float64(r.n)/rates.secs, printable(r.name))
	}

	fmt.Fprintf(w, "\nLONGEST HELD\n")
	if len(longest) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, l := range longest {
		v.leaseLine(w, l)
	}
	fmt.Fprintf(w, "\nHELD OVER %v\n", o.heldOver)
	if len(over) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, l := range over {
		v.leaseLine(w, l)
	}
	return nil
}

// leaseLine prints a lease: for how long and since when it is held (the
// server's time of day of its grant), its kind, its holder's Client, 8 of
// its token's digits and its primitive's name.
func (v *topView) leaseLine(w io.Writer, l topLease) {
	fmt.Fprintf(w, "  %9s  since %s  %-14s %-28s %s  %s\n", heldFor(v.now-l.since), time.UnixMilli(l.since).UTC().Format("15:04:05.000"),
		l.n.kind, v.who.name(l.h.token), shortToken(l.h.token), printable(l.n.name))
}

// handovers are hand-overs counted per name over secs seconds.
type handovers struct {
	secs float64
	n    map[string]int
}

type handoverCount struct {
	name string
	n    int
}

// ranked are the rows names with the most hand-overs, most first.
func (h handovers) ranked(rows int) []handoverCount {
	var out []handoverCount
	for name, n := range h.n {
		out = append(out, handoverCount{name, n})
	}
	slices.SortFunc(out, func(a, b handoverCount) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.name, b.name)) })
	return out[:min(rows, len(out))]
}

// handoverCounter counts hand-over messages per name on a pub/sub
// connection of its own (PSUBSCRIBE prefix*:rel*), until close.
type handoverCounter struct {
	rc   *redis.Client
	sub  *redis.PubSub
	done chan struct{}

	mu    sync.Mutex
	since time.Time
	n     map[string]int
}

// countHandovers subscribes and starts counting.
func countHandovers(ctx context.Context, addr, prefix string) (*handoverCounter, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second})
	sub := rc.PSubscribe(ctx, globEscape(prefix)+"*:rel*")
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		sub.Close()
		rc.Close()
		return nil, fmt.Errorf("top: PSUBSCRIBE: %w", err)
	}
	h := &handoverCounter{rc: rc, sub: sub, done: make(chan struct{}), since: time.Now(), n: map[string]int{}}
	go func() {
		defer close(h.done)
		for m := range sub.Channel() {
			h.note(prefix, m.Channel, m.Payload)
		}
	}()
	return h, nil
}

// note counts a message on channel: a hand-over when its payload names a
// waiter.
func (h *handoverCounter) note(prefix, channel, payload string) {
	if !strings.HasPrefix(payload, pubsub.TargetPrefix) {
		return
	}
	p, name, _, ok := keyspace.ParseKeyBase(channel)
	if !ok || p != prefix {
		return
	}
	h.mu.Lock()
	h.n[name]++
	h.mu.Unlock()
}

// take returns the counts since the last take (or the subscription) and
// starts anew.
func (h *handoverCounter) take() handovers {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	out := handovers{secs: max(now.Sub(h.since).Seconds(), 0.001), n: h.n}
	h.n, h.since = map[string]int{}, now
	return out
}

// close ends the subscription and waits for the counting goroutine.
func (h *handoverCounter) close() {
	_ = h.sub.Close()
	<-h.done
	_ = h.rc.Close()
}

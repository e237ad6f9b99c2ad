package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/latchkit/latchkit/internal/keyspace"
)

// layoutHelp is the -layout flag's help.
const layoutHelp = "a primitive of your own (package kit), as KIND:KEY=SUFFIX/TYPE,... " +
	"(its kit.Layout: e.g. rate_limiter:log=:rl/zset,gone=:rl:gone/zset); repeatable"

// layoutFlags are the -layout values: the layouts of primitives written on
// package kit, which inspect and list show generically (showKit).
type layoutFlags []string

func (l *layoutFlags) String() string     { return strings.Join(*l, " ") }
func (l *layoutFlags) Set(v string) error { *l = append(*l, v); return nil }

// kinds are the built-in kinds and those of l.
func (l layoutFlags) kinds() ([]kind, error) {
	out := slices.Clone(kinds)
	for _, spec := range l {
		k, err := kitKind(spec)
		if err != nil {
			return nil, err
		}
		if kindOfSuffix(out, k.keys[0].suffix) != nil || slices.ContainsFunc(out, func(o kind) bool { return o.name == k.name }) {
			return nil, fmt.Errorf("%w: -layout %q: its kind or a key's suffix is another kind's", errUsage, spec)
		}
		out = append(out, k)
	}
	return out, nil
}

// kitKind is the kind of a -layout value KIND:KEY=SUFFIX/TYPE,...: a
// primitive written on package kit, whose keys inspect shows as they are
// (showKit), naming the Client of every member that is a token.
func kitKind(spec string) (kind, error) {
	bad := func(why string) (kind, error) {
		return kind{}, fmt.Errorf("%w: -layout %q: %s (want KIND:KEY=SUFFIX/TYPE,...)", errUsage, spec, why)
	}
	name, keys, ok := strings.Cut(spec, ":")
	if !ok || name == "" || keys == "" {
		return bad("no KIND: before the keys")
	}
	k := kind{name: name, memory: map[string]bool{}, head: func(func(string) keyState) string { return "" },
		status: func(func(string) keyState) string { return "in use" }}
	var names []string
	for _, ks := range strings.Split(keys, ",") {
		key, rest, ok1 := strings.Cut(ks, "=")
		suffix, typ, ok2 := strings.Cut(rest, "/")
		if !ok1 || !ok2 || key == "" {
			return bad(fmt.Sprintf("key %q", ks))
		}
		switch typ {
		case "string", "hash", "zset", "set", "list":
		default:
			return bad(fmt.Sprintf("key %s: type %q is not string, hash, zset, set or list", key, typ))
		}
		if slices.ContainsFunc(k.keys, func(s keySpec) bool { return s.suffix == suffix }) {
			return bad(fmt.Sprintf("suffix %q twice", suffix))
		}
		k.keys = append(k.keys, keySpec{suffix: suffix, typ: typ})
		names = append(names, key)
	}
	k.show = func(w io.Writer, now int64, _ string, get func(string) keyState, who clients) {
		showKit(w, now, names, k.keys, get, who)
	}
	k.people = func(get func(string) keyState) ([]holder, []string) {
		var hs []holder
		for _, ks := range k.keys {
			for _, t := range tokensIn(get(ks.suffix)) {
				hs = append(hs, holder{token: t})
			}
		}
		return hs, nil
	}
	return k, nil
}

// kitShown is how many members or fields of one key showKit lists.
const kitShown = 20

// showKit shows a kit primitive's keys as they are: each key's type, size
// and time left, and the members and fields that are tokens, with their
// score or value and their Client (the Client's name, host and pid: the
// first 12 hex digits of every token name it).
func showKit(w io.Writer, now int64, names []string, keys []keySpec, get func(string) keyState, who clients) {
	for i, ks := range keys {
		st := get(ks.suffix)
		if !st.exists() {
			continue
		}
		ttl := "ttl=none"
		if st.pttl >= 0 {
			ttl = ttlField(st.pttl)
		}
		size := ""
		switch st.typ {
		case "zset":
			size = strconv.Itoa(len(st.zset)) + " members"
		case "hash":
			size = strconv.Itoa(len(st.hash)) + " fields"
		}
		fmt.Fprintf(w, "  key %s (%s): %s %s %s\n", names[i], printable(ks.suffix), st.typ, size, ttl)
		shown := 0
		for _, m := range st.zset {
			if _, ok := keyspace.TokenClient(entryToken(m.token)); ok && shown < kitShown {
				line(w, "member", m.token, "score="+strconv.FormatInt(m.score, 10), who.field(m.token))
				shown++
			}
		}
		for _, f := range slices.Sorted(maps.Keys(st.hash)) {
			if _, ok := keyspace.TokenClient(entryToken(f)); ok && shown < kitShown {
				line(w, "field", f, "value="+printable(st.hash[f]), who.field(f))
				shown++
			}
		}
	}
}

// tokensIn are the members and fields of st that are tokens.
func tokensIn(st keyState) []string {
	var out []string
	for _, m := range st.zset {
		if _, ok := keyspace.TokenClient(entryToken(m.token)); ok {
			out = append(out, m.token)
		}
	}
	for f := range st.hash {
		if _, ok := keyspace.TokenClient(entryToken(f)); ok {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

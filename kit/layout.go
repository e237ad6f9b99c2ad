package kit

import (
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	engine "github.com/latchkit/latchkit/internal/kit"
)

// Layout is where a kind of primitive keeps its state: its keys, addressed
// by name. Every key of a primitive named n lives under prefix{n}, the
// hash tag that keeps them in one Cluster slot.
type Layout struct {
	// Kind names the primitive in errors, spans, metrics and logs
	// ("rate_limiter").
	Kind latchkit.Kind
	// Keys are its keys.
	Keys []Key
	// Channel is the release channel's suffix after prefix{name}
	// (default ":" + Kind + ":rel"): where its scripts publish what wakes
	// waiters.
	Channel string
}

// Key is one key of a Layout.
type Key struct {
	Name   string // how scripts' --@keys lines and Site.Key name it
	Suffix string // after prefix{name}: ":rl", ":rl:gone"; one per layout may be ""
	Type   string // the Redis type kept there: "string", "hash", "zset", "set" or "list"
}

// Script is a Lua script of a Layout, loaded by MustLoad.
type Script struct {
	s    *backend.Script
	name string
	l    *Layout
	keys []int // the layout's keys it is given, in KEYS order
	// lead: keys are the layout's first len(keys), in order, so that a
	// Site gives them as a slice of its own (no copy per call).
	lead bool
}

var (
	keysIndex  = regexp.MustCompile(`KEYS\[(\d+)\]`)
	luaComment = regexp.MustCompile(`--[^\n]*`) // a line's comment (the KEYS check reads code only)
)

// MustLoad returns the script lua/name.lua of fsys, a primitive of layout
// l, with the Lua blocks it uses in front (its first line "--@uses a b"
// names them: the general blocks of docs/kit.md and fsys's own
// lua/blocks.lua and lua/blocks_*.lua). A line "--@keys k1 k2" names the layout's keys the
// script is given as KEYS[1], KEYS[2]. It panics, so that a mistake fails
// at package initialization, on a missing file or block, an unknown
// $CONSTANT, a key name l does not have, a KEYS index beyond the declared
// keys, a layout that is not valid (see Layout) and a PUBLISH by
// redis.call (use redis.pcall: an ACL may refuse it after the script has
// written).
func MustLoad(fsys fs.FS, l *Layout, name string) *Script {
	if err := l.check(); err != nil {
		panic(fmt.Sprintf("kit: script %s: %v", name, err))
	}
	src, err := fs.ReadFile(fsys, "lua/"+name+".lua")
	if err != nil {
		panic(fmt.Sprintf("kit: script %s: %v", name, err))
	}
	sc := &Script{name: name, l: l}
	for _, line := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(line, "--@keys "); ok {
			for _, k := range strings.Fields(rest) {
				i := l.index(k)
				if i < 0 {
					panic(fmt.Sprintf("kit: script %s declares key %q, which layout %s does not have", name, k, l.Kind))
				}
				sc.keys = append(sc.keys, i)
			}
		}
	}
	sc.lead = true
	for i, k := range sc.keys {
		sc.lead = sc.lead && k == i
	}
	code := luaComment.ReplaceAllString(string(src), "")
	for _, m := range keysIndex.FindAllStringSubmatch(code, -1) {
		if n, _ := strconv.Atoi(m[1]); n < 1 || n > len(sc.keys) {
			panic(fmt.Sprintf("kit: script %s reads KEYS[%d], but its --@keys line declares %d keys", name, n, len(sc.keys)))
		}
	}
	sc.s = engine.LoadScript(fsys, name)
	return sc
}

// check says what is wrong with l (nil if nothing): a kind and a key are
// needed, key names and suffixes are unique, types are Redis types. It
// allocates nothing when l is valid: it runs for every Site, and a Site is
// often made for one call.
func (l *Layout) check() error {
	if l == nil || l.Kind == "" || len(l.Keys) == 0 {
		return fmt.Errorf("a layout needs a kind and at least one key")
	}
	ch := l.channel()
	for i, k := range l.Keys {
		switch {
		case k.Name == "" || strings.ContainsAny(k.Name, " \t"):
			return fmt.Errorf("layout %s: key name %q", l.Kind, k.Name)
		case strings.ContainsAny(k.Suffix, "{}"), k.Suffix == ch:
			return fmt.Errorf("layout %s: key %q: a suffix may not hold '{' or '}' (the hash tag), nor be the channel's", l.Kind, k.Name)
		}
		for _, o := range l.Keys[:i] {
			if o.Name == k.Name || o.Suffix == k.Suffix {
				return fmt.Errorf("layout %s: key %q (suffix %q) twice", l.Kind, k.Name, k.Suffix)
			}
		}
		switch k.Type {
		case "string", "hash", "zset", "set", "list":
		default:
			return fmt.Errorf("layout %s: key %q: type %q is not string, hash, zset, set or list", l.Kind, k.Name, k.Type)
		}
	}
	return nil
}

// channel is the release channel's suffix (Layout.Channel): Channel, or
// ":" + Kind + ":rel".
func (l *Layout) channel() string {
	if l.Channel != "" {
		return l.Channel
	}
	return ":" + string(l.Kind) + ":rel"
}

// index is the place of the key named name in l.Keys, -1 if none.
func (l *Layout) index(name string) int {
	for i, k := range l.Keys {
		if k.Name == name {
			return i
		}
	}
	return -1
}

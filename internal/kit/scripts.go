package kit

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// A script lives in the lua/ folder of an fs.FS (package primitives'
// embedded files, or this package's own), one file per script, starting
// with a header that states its KEYS, ARGV and reply. Functions the
// scripts share are blocks of this package's lua/prelude.lua; a script names the blocks it needs in a
// "--@uses a b ..." line, and LoadScript puts them in front of it. Facts
// that Go and Lua share are written once, in Go, and appear in the Lua as
// $NAME (see luaConstants).
//
// A script may start with a fast path, ended by a line "--@slow": the
// loader puts it before the prelude blocks, so that a call the fast path
// answers never makes the prelude's functions. Each "local function" is a
// closure made anew on every call, and their garbage, collected with every
// script the server has loaded in the Lua heap, cost about 5 µs a call in
// a server holding latchkit's scripts (issue 29). A fast path calls no
// prelude function; what it does, it does as the slow path would.

// luaFiles holds the Lua the package itself loads: the prelude blocks
// every script may use, and key_types.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// preludeBlock is one shared function of lua/prelude.lua.
type preludeBlock struct {
	name string
	uses []string
	src  string
}

// prelude is lua/prelude.lua split into its blocks, in file order.
var prelude = func() []preludeBlock {
	src, err := luaFiles.ReadFile("lua/prelude.lua")
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	var blocks []preludeBlock
	for _, part := range strings.Split(string(src), "\n--@ ")[1:] {
		header, body, _ := strings.Cut(part, "\n")
		f := strings.Fields(header)
		b := preludeBlock{name: f[0], src: body}
		if len(f) > 2 && f[1] == "uses" {
			b.uses = f[2:]
		}
		blocks = append(blocks, b)
	}
	return blocks
}()

// luaConstants are the values of the $NAME placeholders of the scripts.
var luaConstants = map[string]string{
	"MARKER_MS":  strconv.FormatInt(MarkerTTL.Milliseconds(), 10), // how long a finished token is kept (remember)
	"WAKE_ONE":   pubsub.WakeOne,
	"WAKE_ALL":   pubsub.WakeAll,
	"TARGET":     pubsub.TargetPrefix,
	"DIGEST_HEX": strconv.Itoa(2 * wakeIDBytes), // wakeID's length in hex digits
	"INVALID":    invalidReply,                  // starts the error reply of an argument a script refuses
}

// invalidReply starts the error reply of a script that refuses an argument
// (see invalid in lua/prelude.lua) before it writes anything: ScriptErr
// reads it as latchkit.ErrInvalid.
const invalidReply = "LATCHKIT_INVALID"

var placeholder = regexp.MustCompile(`\$[A-Z_]+`)

// LoadScript returns the script of lua/name.lua in fsys with the prelude
// blocks it uses (and the blocks those use) in front, in prelude order. It panics on
// a missing file or block: scripts are loaded at package initialization,
// so a mistake fails every test at once.
func LoadScript(fsys fs.FS, name string) *backend.Script {
	src, err := fs.ReadFile(fsys, "lua/"+name+".lua")
	if err != nil {
		panic(fmt.Sprintf("primitives: script %s: %v", name, err))
	}
	body := string(src)
	need := map[string]bool{}
	var add func(n string)
	add = func(n string) {
		if need[n] {
			return
		}
		need[n] = true
		for _, b := range prelude {
			if b.name == n {
				for _, u := range b.uses {
					add(u)
				}
				return
			}
		}
		panic(fmt.Sprintf("primitives: script %s uses %q, which lua/prelude.lua does not define", name, n))
	}
	if first, _, _ := strings.Cut(body, "\n"); strings.HasPrefix(first, "--@uses ") {
		for _, n := range strings.Fields(strings.TrimPrefix(first, "--@uses ")) {
			add(n)
		}
	}
	var b strings.Builder
	if fast, slow, ok := strings.Cut(body, "\n--@slow\n"); ok {
		b.WriteString(fast + "\n")
		body = slow
	}
	for _, blk := range prelude {
		if need[blk.name] {
			b.WriteString(blk.src)
		}
	}
	b.WriteString(body)
	src = []byte(placeholder.ReplaceAllStringFunc(b.String(), func(p string) string {
		v, ok := luaConstants[p[1:]]
		if !ok {
			panic(fmt.Sprintf("primitives: script %s: unknown constant %s", name, p))
		}
		return v
	}))
	return backend.NewScript(string(src))
}

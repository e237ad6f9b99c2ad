package kit

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// A script lives in the lua/ folder of an fs.FS (package primitives'
// embedded files, or this package's own), one file per script, starting
// with a header that states its KEYS, ARGV and reply. Functions the
// scripts share are blocks of this package's lua/prelude.lua (the general
// ones) and of the script's package's lua/blocks.lua and lua/blocks_*.lua
// (those private to its layouts); a script names the blocks it needs in a
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

// prelude is lua/prelude.lua split into its blocks, in file order: the
// general blocks.
var prelude = func() []preludeBlock {
	src, err := luaFiles.ReadFile("lua/prelude.lua")
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return parseBlocks(string(src))
}()

// parseBlocks splits src, in the form of lua/prelude.lua, into its blocks.
func parseBlocks(src string) []preludeBlock {
	var blocks []preludeBlock
	// What comes before the first header (a file's opening comment) is
	// no block; a file may also begin with a header.
	for _, part := range strings.Split("\n"+src, "\n--@ ")[1:] {
		header, body, _ := strings.Cut(part, "\n")
		f := strings.Fields(header)
		b := preludeBlock{name: f[0], src: body}
		if len(f) > 2 && f[1] == "uses" {
			b.uses = f[2:]
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// blocksOf returns the blocks a script of fsys may use: the general ones,
// then those of fsys's lua/blocks.lua and lua/blocks_*.lua, if it has
// them, in the files' order by name. It panics on a name two of them
// define.
func blocksOf(fsys fs.FS) []preludeBlock {
	files, err := fs.Glob(fsys, "lua/blocks_*.lua")
	if err != nil {
		panic(err) // the pattern is well-formed: cannot happen
	}
	sort.Strings(files)
	blocks := prelude[:len(prelude):len(prelude)]
	for _, file := range append([]string{"lua/blocks.lua"}, files...) {
		src, err := fs.ReadFile(fsys, file)
		if err != nil {
			continue
		}
		for _, b := range parseBlocks(string(src)) {
			for _, g := range blocks {
				if g.name == b.name {
					panic(fmt.Sprintf("primitives: %s defines %q, a block of the general prelude or of another blocks file", file, b.name))
				}
			}
			blocks = append(blocks, b)
		}
	}
	return blocks
}

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

// LoadScript returns the script of lua/name.lua in fsys with the blocks it
// uses (and the blocks those use) in front: the general ones of
// lua/prelude.lua, then fsys's own of its lua/blocks.lua and
// lua/blocks_*.lua, each in file order. It panics on a missing file or
// block, an unknown $CONSTANT, and a PUBLISH by redis.call (a refused
// PUBLISH, under an ACL without the channel, would fail a script that has
// written: it must be redis.pcall):
// scripts are loaded at package initialization, so a mistake fails every
// test at once.
func LoadScript(fsys fs.FS, name string) *backend.Script {
	src, err := fs.ReadFile(fsys, "lua/"+name+".lua")
	if err != nil {
		panic(fmt.Sprintf("primitives: script %s: %v", name, err))
	}
	body := string(src)
	blocks := blocksOf(fsys)
	need := map[string]bool{}
	var add func(n string)
	add = func(n string) {
		if need[n] {
			return
		}
		need[n] = true
		for _, b := range blocks {
			if b.name == n {
				for _, u := range b.uses {
					add(u)
				}
				return
			}
		}
		panic(fmt.Sprintf("primitives: script %s uses %q, which neither lua/prelude.lua nor its package's lua/blocks*.lua defines", name, n))
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
	for _, blk := range blocks {
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
	if m := publishByCall.FindString(string(src)); m != "" {
		panic(fmt.Sprintf("primitives: script %s: %s...: a PUBLISH must be redis.pcall, so that a refused one fails nothing the script wrote", name, m))
	}
	return backend.NewScript(string(src))
}

// publishByCall finds a PUBLISH by redis.call, in any spelling Lua takes.
var publishByCall = regexp.MustCompile(`redis\.call\s*\(\s*['"](?i:publish|spublish)['"]`)

package kit

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

// TestLoadScriptPackageBlocks: a script uses the general blocks and its
// package's lua/blocks.lua, which come after the general ones (they may use
// them), each only when used; a package block named as a general one, or a
// block nobody defines, panics at load.
func TestLoadScriptPackageBlocks(t *testing.T) {
	fsys := fstest.MapFS{
		"lua/blocks.lua": {Data: []byte("-- own blocks\n\n--@ own_twice uses now_ms\nlocal function own_twice() return 2 * now_ms() end\n\n--@ unused\nlocal function unused() end\n")},
		"lua/s.lua":      {Data: []byte("--@uses own_twice\nreturn own_twice()\n")},
		"lua/bad.lua":    {Data: []byte("--@uses nowhere\nreturn 1\n")},
	}
	src := LoadScript(fsys, "s").Source()
	gen, own := strings.Index(src, "local function now_ms"), strings.Index(src, "local function own_twice")
	if gen < 0 || own < 0 || gen > own {
		t.Fatalf("script s: the general block now_ms at %d, its package's own_twice at %d, want both, the general first:\n%s", gen, own, src)
	}
	if strings.Contains(src, "unused") {
		t.Errorf("script s has a block it does not use:\n%s", src)
	}
	mustPanic(t, "a block nobody defines", "which neither", func() { LoadScript(fsys, "bad") })
	fsys["lua/blocks.lua"] = &fstest.MapFile{Data: []byte("--@ clock\nlocal function clock() end\n")}
	mustPanic(t, "a package block named as a general one", `defines "clock"`, func() { LoadScript(fsys, "s") })
}

// TestLoadScriptBlockFiles: a package's blocks may be spread over
// lua/blocks.lua and lua/blocks_*.lua, in that order (a later file's block
// may use an earlier one's); a name two files define panics at load.
func TestLoadScriptBlockFiles(t *testing.T) {
	fsys := fstest.MapFS{
		"lua/blocks.lua":   {Data: []byte("--@ base\nlocal function base() return 1 end\n")},
		"lua/blocks_b.lua": {Data: []byte("-- more\n\n--@ second uses base first\nlocal function second() return base() + first() end\n")},
		"lua/blocks_a.lua": {Data: []byte("--@ first uses base\nlocal function first() return base() end\n")},
		"lua/s.lua":        {Data: []byte("--@uses second\nreturn second()\n")},
	}
	src := LoadScript(fsys, "s").Source()
	b, a, s2 := strings.Index(src, "function base"), strings.Index(src, "function first"), strings.Index(src, "function second")
	if b < 0 || a < b || s2 < a {
		t.Fatalf("blocks base %d, first %d, second %d: want each, in the files' order:\n%s", b, a, s2, src)
	}
	fsys["lua/blocks_c.lua"] = &fstest.MapFile{Data: []byte("--@ first\nlocal function first() return 2 end\n")}
	mustPanic(t, "a block two files define", `blocks_c.lua defines "first"`, func() { LoadScript(fsys, "s") })
}

// TestLoadScriptRefusesPublishByCall: a PUBLISH must be redis.pcall (a
// refused one would fail a script that has written), in the script and in
// the blocks it uses; pcall loads.
func TestLoadScriptRefusesPublishByCall(t *testing.T) {
	fsys := fstest.MapFS{
		"lua/blocks.lua": {Data: []byte("--@ tell\nlocal function tell(c) redis.call('PUBLISH', c, 'x') end\n")},
		"lua/ok.lua":     {Data: []byte("redis.call('SET', KEYS[1], 1)\nredis.pcall('PUBLISH', ARGV[1], 'x')\nreturn 1\n")},
		"lua/plain.lua":  {Data: []byte("redis.call('SET', KEYS[1], 1)\nredis.call( \"publish\", ARGV[1], 'x')\nreturn 1\n")},
		"lua/block.lua":  {Data: []byte("--@uses tell\ntell(ARGV[1])\nreturn 1\n")},
	}
	LoadScript(fsys, "ok")
	mustPanic(t, "redis.call of PUBLISH", "must be redis.pcall", func() { LoadScript(fsys, "plain") })
	mustPanic(t, "redis.call of PUBLISH in a block it uses", "must be redis.pcall", func() { LoadScript(fsys, "block") })
}

// mustPanic runs f, which must panic with a message containing why (so
// that a test does not pass on a panic of another cause).
func mustPanic(t *testing.T, what, why string, f func()) {
	t.Helper()
	defer func() {
		switch v := recover(); {
		case v == nil:
			t.Errorf("%s: no panic", what)
		case !strings.Contains(fmt.Sprint(v), why):
			t.Errorf("%s: panicked with %q, want a message about %q", what, v, why)
		}
	}()
	f()
}

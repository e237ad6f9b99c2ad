package primitives

import (
	"embed"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/kit"
)

// luaFiles are the primitives' Lua scripts, one file per script in lua/,
// each starting with a header that states its KEYS, ARGV and reply, and
// lua/blocks.lua and lua/blocks_*.lua, the functions private to these
// primitives' layouts (the lock family's; an election's seat; the
// semaphores'; a latch's count). They are loaded by kit.LoadScript, which
// puts the blocks a script uses in front of it: the general ones of kit's
// lua/prelude.lua, then those of the package's blocks files (see internal/kit's scripts.go for the "--@uses" and
// "--@slow" lines and the $NAME constants).
//
//go:embed lua/*.lua
var luaFiles embed.FS

// loadScript returns the script of lua/name.lua, with the prelude blocks
// it uses in front (see kit.LoadScript).
func loadScript(name string) *backend.Script { return kit.LoadScript(luaFiles, name) }

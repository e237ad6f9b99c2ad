package primitives

import (
	"embed"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/kit"
)

// luaFiles are the primitives' Lua scripts, one file per script in lua/,
// each starting with a header that states its KEYS, ARGV and reply. They
// are loaded by kit.LoadScript, which puts the blocks of kit's
// lua/prelude.lua that a script uses in front of it (see internal/kit's
// scripts.go for the "--@uses" and "--@slow" lines and the $NAME
// constants).
//
//go:embed lua/*.lua
var luaFiles embed.FS

// loadScript returns the script of lua/name.lua, with the prelude blocks
// it uses in front (see kit.LoadScript).
func loadScript(name string) *backend.Script { return kit.LoadScript(luaFiles, name) }

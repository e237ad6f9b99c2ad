// Package floor holds the baseline that latchctl bench and the bench module
// measure latchkit against: the least a lock can cost on a driver, SET NX PX
// to take it and a compare-and-delete script (run by EVALSHA) to give it
// back. Both benchmarks run this one script, so their floors agree.
package floor

import _ "embed" // for the script below

// CasDelSource is the compare-and-delete script's Lua source. KEYS: 1 the
// lock key; ARGV: 1 the token. Reply: 1 if deleted, else 0.
//
//go:embed casdel.lua
var CasDelSource string

// FencedAcquireSource is the acquire of the fenced floor: TIME, and SET NX
// PX with the server's clock in µs as the fence in the lock's value, the
// least a lock with latchkit's fences costs (see fenced.lua). Released by
// FencedReleaseSource.
//
//go:embed fenced.lua
var FencedAcquireSource string

// FencedReleaseSource is the release of the fenced floor: GET, ZCARD of the
// wait queue, DEL (see fenced_release.lua).
//
//go:embed fenced_release.lua
var FencedReleaseSource string

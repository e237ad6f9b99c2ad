// Package kit is for writing a primitive of your own on latchkit's
// machinery: the same Client, options, wait loop, give-back, wake-on-release,
// middleware and error vocabulary as the built-ins of package primitives.
//
// Experimental: the package may change in any minor version until the
// built-ins have run on it for a release.
//
// A primitive is its key layout (Layout: keys addressed by name, each with
// its Redis type), its Lua scripts (MustLoad: checked when loaded) and a
// few calls on a Site, the primitive of one name: Acquire runs an
// acquisition through the wait loop (a grant handing out a lease when the
// acquisition has a Holder), Wait waits without a grant, Eval runs a
// script once and Do runs one until it gets an answer. Every script of a
// Site is given the keys its --@keys line names, in that order, all under
// one Cluster hash tag, and ARGV in the fixed header of its role:
//
//	role                 ARGV                                  reply
//	attempt              1 token, 2 ttl ms, 3 waiter timeout   {1, n}: granted (n: the lease's fence)
//	                     ms ("0": a Try), 4 annotation,        {0, hint ms, holder or false}: not now
//	                     5 retention ms, then Args             {0, 0, false}: a given-back token, refused
//	release, give-back   1 token, 2 the release channel,       1 released, 0 not held
//	                     3 mode ("" release, "1" give-back)
//	extend               1 token, 2 ttl ms, then the           1 extended, 0 not held
//	                     companions' keys
//	ttl                  1 token                               ms left, -3 not held
//	Eval, Do             1 call id, 2 the release channel,     the script's own
//	                     3 retention ms, then their args
//
// A waiting acquisition sleeps until a message on the release channel
// ($WAKE_ONE wakes one waiter, $WAKE_ALL every one; publish with
// redis.pcall), the hint or the retry policy's delay, whichever comes
// first. The rules a script keeps, and the general Lua blocks it may use
// (--@uses), are in docs/kit.md; package ratelimit is a primitive written
// on this package alone.
package kit

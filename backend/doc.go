// Package backend is the contract between latchkit's portable layers and a
// Redis driver, kept as small as database/sql/driver: a Backend runs Lua
// scripts (by SHA, falling back to EVAL on NOSCRIPT) and opens a
// subscription for release messages. Everything else (retrying, waiting,
// sharing one subscription between waiters) is done above it.
//
// Adapters live in the sub-packages goredis, rueidis, valkey and redigo
// (rueidis and valkey share internal/respkit's RESP, written once for the
// rueidis family).
// Another driver is added by implementing Backend and running the
// conformance suite against it (package contracttest; each adapter has its
// conformance_test.go). What any adapter needs lives here: Wrap classifies
// driver errors, Await bounds a call by its context whatever the driver
// does, Abandoned says a call was given up on. latchkit's own adapters
// share more (batches with the NOSCRIPT fallback, the acknowledged eval,
// subscription bookkeeping) in internal/adapterkit.
//
// # Classifying errors
//
// Wrap returns an error it already classified (an *Error) as it is. When
// the call's ctx is done, the classified error is wrapped in the context's
// error, so that errors.Is(err, context.DeadlineExceeded) holds even when
// the driver reported an I/O timeout, while the classification still
// matches (a retry loop still reads a refused connection as
// ErrUnavailable). So it is when ctx's deadline has passed although
// ctx.Err() is still nil: drivers set their socket deadlines from the
// context's, and a dial or read can time out a moment before the context's
// own timer fires; the caller gave up, Redis is not known to be down.
//
// A context error the driver returned as such (context.DeadlineExceeded,
// context.Canceled, or an error matching one) is returned untouched when
// ctx is done or past its deadline: it is the caller's. While ctx is live
// it is the driver's own deadline, not the caller's: rueidis returns
// context.DeadlineExceeded when the handshake of a new connection times out
// (a hung server accepts the TCP connection and never answers), and a dial
// timeout matches context.DeadlineExceeded too. That is a server not
// reached in time: ErrUnavailable, which no longer matches the context
// errors (errors.As still reaches the driver's error, a net.Error say), so
// that a waiting Lock rides it out instead of giving up with its caller's
// context live. The replies that say a command cannot run now (MOVED, ASK,
// TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY, NOREPLICAS, BUSY)
// or that a script's writes cannot run now (OOM under maxmemory, MISCONF),
// refused before the script wrote anything, are ErrUnavailable too, not a
// *ReplyError.
//
// # Bounding calls
//
// Await is how an adapter bounds a driver call that may outlive its
// context (a driver that ignores context deadlines, a lock the driver
// holds while it redials): it runs the call on a goroutine of its own,
// except under a ctx that can never end (Done returns nil), where it runs
// it on the caller's goroutine. A call given up on is abandoned, not
// stopped: it runs on to its own end in the background (the driver's
// timeouts bound it), and its result is discarded after being handed to
// the cleanup (to close a connection the call opened, say). Its outcome is
// unknown to the caller: it may still run on the server. A call that
// finished as ctx ended returns its result.
package backend

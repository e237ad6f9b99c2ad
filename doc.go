// Package latchkit is the vocabulary shared by every latchkit package:
// the Lease a holder gets, the Request that travels down a middleware chain,
// the Acquire and Middleware function types, and the errors callers match
// with errors.Is.
//
// Every error a caller matches is here, whatever package returns it:
// ErrNotAcquired (and *HeldError), ErrLeaseLost, ErrInvalid,
// ErrNotReplicated, and the backend's ErrUnavailable and ErrClosed
// (re-exported: the same values as in package backend, so matching either
// works). Errors of operations are *OpError, which names the operation,
// the kind and name of the primitive, and wraps the cause.
//
// The primitives themselves (Mutex, Semaphore, ...) live in package
// primitives; the Redis drivers live under backend/.
package latchkit

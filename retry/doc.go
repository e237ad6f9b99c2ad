// Package retry decides how a waiting Lock or Acquire paces its attempts:
// backoff policies built on github.com/cenkalti/backoff/v4, given to a
// primitive with primitives.WithRetry.
//
// The wait loop itself lives in package primitives. Between two attempts
// that found the primitive held it does not just sleep: it waits for a
// release message (package pubsub), and the policy's delay, cut short by
// the holder's remaining TTL, is the timer that bounds the wait when no
// message comes. Between attempts that could not reach Redis it sleeps for
// the policy's delay. A policy that returns backoff.Stop ends the waiting.
package retry

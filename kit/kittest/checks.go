package kittest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
)

// checkLimit: Limit+3 Try acquisitions at once grant exactly Limit.
func checkLimit(ctx context.Context, e *env, s Subject) error {
	n, err := e.grants(ctx, s, "limit", s.Limit+3)
	if err != nil {
		return err
	}
	if n != s.Limit {
		return fmt.Errorf("%d of %d Try acquisitions at once were granted, want the limit, %d", n, s.Limit+3, s.Limit)
	}
	return nil
}

// lossy runs every script; armed, it loses the next reply after the
// script ran (an attempt granted, its caller not told, as a reset
// connection would leave it), and with double set it then runs every
// later script twice (the give-back that follows is applied twice).
type lossy struct {
	backend.Backend
	armed, double, doubling atomic.Bool
	lost                    atomic.Pointer[call] // the call whose reply was lost
}

// call is a script call, to send again.
type call struct {
	sc         *backend.Script
	keys, args []string
}

// Cluster forwards the wrapped backend's (a MultiLock splits its names
// by slot on a Cluster).
func (f *lossy) Cluster() bool { return backend.IsCluster(f.Backend) }

func (f *lossy) Eval(ctx context.Context, sc *backend.Script, keys, args []string) (backend.Value, error) {
	if !keyspace.OfPrimitive(keys) {
		return f.Backend.Eval(ctx, sc, keys, args) // the Client's record
	}
	if f.doubling.Load() {
		if _, err := f.Backend.Eval(ctx, sc, keys, args); err != nil {
			return nil, err
		}
	}
	v, err := f.Backend.Eval(ctx, sc, keys, args)
	if f.armed.CompareAndSwap(true, false) {
		f.lost.Store(&call{sc, keys, args})
		f.doubling.Store(f.double.Load())
		return nil, &backend.Error{Class: backend.ErrUnavailable, Cause: errors.New("kittest: reply lost")}
	}
	return v, err
}

// lostReplyBound is how soon an acquisition whose first reply was lost is
// granted: its retry finds the grant at once (the kit's pace after an
// unreachable server is tens of ms), where a retry that does not see its
// own grant waits for it to expire (the TTL, seconds).
const lostReplyBound = 2 * time.Second

// checkLostReply: a waiting acquisition whose first attempt's reply is
// lost is granted by its retry at once, which takes one place, not two.
func checkLostReply(ctx context.Context, e *env, s Subject) error {
	lf := &lossy{}
	cl := e.client(func(b backend.Backend) backend.Backend { lf.Backend = b; return lf })
	lf.armed.Store(true)
	actx, cancel := context.WithTimeout(ctx, lostReplyBound)
	_, err := e.acquire(actx, s, cl, "lost", false)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("an acquisition whose first reply was lost was not granted within %v: its retry did not find its own grant (it waits for that grant to expire): %w", lostReplyBound, err)
	}
	if err != nil {
		return fmt.Errorf("an acquisition whose first reply was lost: %w", err)
	}
	n, err := e.grants(ctx, s, "lost", s.Limit+1)
	if err != nil {
		return err
	}
	if n != s.Limit-1 {
		return fmt.Errorf("after an acquisition whose first reply was lost, %d more were granted, want %d: its retried attempt took %d places", n, s.Limit-1, s.Limit-n)
	}
	return nil
}

// stuck holds back the next script until release is closed; its call
// fails when its context ends (a command stuck in a socket).
type stuck struct {
	backend.Backend
	armed   atomic.Bool
	release chan struct{}
	ran     chan struct{}
}

// Cluster forwards the wrapped backend's.
func (s *stuck) Cluster() bool { return backend.IsCluster(s.Backend) }

func (s *stuck) Eval(ctx context.Context, sc *backend.Script, keys, args []string) (backend.Value, error) {
	if !keyspace.OfPrimitive(keys) || !s.armed.CompareAndSwap(true, false) {
		return s.Backend.Eval(ctx, sc, keys, args)
	}
	go func() {
		<-s.release
		s.Backend.Eval(context.Background(), sc, keys, args)
		close(s.ran)
	}()
	<-ctx.Done()
	return nil, &backend.Error{Class: ctx.Err(), Cause: errors.New("kittest: i/o timeout")}
}

// checkLateCopy: an acquisition gives up while its attempt is stuck on the
// way; the attempt reaches the server after the give-back and takes
// nothing: Limit acquisitions are still granted.
func checkLateCopy(ctx context.Context, e *env, s Subject) error {
	st := &stuck{release: make(chan struct{}), ran: make(chan struct{})}
	cl := e.client(func(b backend.Backend) backend.Backend { st.Backend = b; return st })
	st.armed.Store(true)
	actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := e.acquire(actx, s, cl, "late", false)
	cancel()
	if err == nil {
		return errors.New("granted although its attempt never reached the server")
	}
	if st.armed.Load() {
		return fmt.Errorf("the acquisition ended without sending an attempt: %w", err)
	}
	close(st.release)
	select {
	case <-st.ran:
	case <-ctx.Done():
		return fmt.Errorf("the late attempt did not come back: %w", ctx.Err())
	}
	n, err := e.grants(ctx, s, "late", s.Limit)
	if err != nil {
		return err
	}
	if n != s.Limit {
		return fmt.Errorf("after a late copy of a given-up attempt, %d of %d were granted: the late copy took %d places", n, s.Limit, s.Limit-n)
	}
	return nil
}

// checkWrongType: for each key the primitive keeps (its layout's, and
// those a grant writes), a value of another type there makes a Try
// acquisition fail with ErrInvalid having changed nothing in Redis, or
// (a script that does not read that key) be granted leaving it alone.
func checkWrongType(ctx context.Context, e *env, s Subject) error {
	cl := e.client(nil)
	if _, err := e.acquire(ctx, s, cl, "seen", true); err != nil {
		return err
	}
	seen, err := e.keys(ctx)
	if err != nil {
		return err
	}
	types := map[string]string{} // key suffix after the name's hash tag -> its type
	for _, k := range seen {
		typ, err := e.rdb.Type(ctx, k).Result()
		if err != nil {
			return err
		}
		types[k[strings.Index(k, "}")+1:]] = typ
	}
	if s.Layout != nil {
		for _, k := range s.Layout.Keys {
			types[k.Suffix] = k.Type
		}
	}
	var suffixes []string
	for suffix := range types {
		suffixes = append(suffixes, suffix)
	}
	sort.Strings(suffixes)
	for i, suffix := range suffixes {
		name := fmt.Sprintf("w%d", i)
		key := keyspace.KeyBase(e.prefix, name) + suffix
		if types[suffix] == "string" {
			err = e.rdb.RPush(ctx, key, "not latchkit's").Err()
		} else {
			err = e.rdb.Set(ctx, key, "not latchkit's", time.Hour).Err()
		}
		if err != nil {
			return err
		}
		before, err := e.dump(ctx)
		if err != nil {
			return err
		}
		_, aerr := e.acquire(ctx, s, cl, name, true)
		after, err := e.dump(ctx)
		if err != nil {
			return err
		}
		if aerr != nil && !errors.Is(aerr, latchkit.ErrInvalid) {
			return fmt.Errorf("a value of another type at %s: the acquisition returned %v, want an error matching ErrInvalid (or a grant that leaves the key alone)", key, aerr)
		}
		if aerr == nil {
			// Granted: the script did not read the key; it must not have
			// touched it either.
			before, after = keyPart(before, key), keyPart(after, key)
		}
		if before != after {
			return fmt.Errorf("a key of another type at %s: the refused acquisition changed Redis:\n before %s\n after  %s", key, before, after)
		}
		if err := e.rdb.Del(ctx, key).Err(); err != nil {
			return err
		}
	}
	return nil
}

// keyPart is the part of a dump about key.
func keyPart(dump, key string) string {
	for _, p := range strings.Split(dump, "; ") {
		if strings.HasPrefix(p, key+" ") {
			return p
		}
	}
	return ""
}

// dump is every key under the prefix, its type and value, as text
// (DUMP is real Redis's alone).
func (e *env) dump(ctx context.Context) (string, error) {
	keys, err := e.keys(ctx)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, k := range keys {
		typ, err := e.rdb.Type(ctx, k).Result()
		if err != nil {
			return "", err
		}
		var v any
		switch typ {
		case "string":
			v, err = e.rdb.Get(ctx, k).Result()
		case "hash":
			v, err = e.rdb.HGetAll(ctx, k).Result()
		case "zset":
			v, err = e.rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "list":
			v, err = e.rdb.LRange(ctx, k, 0, -1).Result()
		case "set":
			var m []string
			m, err = e.rdb.SMembers(ctx, k).Result()
			sort.Strings(m)
			v = m
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", err
		}
		fmt.Fprintf(&b, "%s %s %v; ", k, typ, v)
	}
	return b.String(), nil
}

// checkExpiries: after grants, releases, a refused Try and a waiting
// acquisition that gave up, every key under the prefix has an expiry.
func checkExpiries(ctx context.Context, e *env, s Subject) error {
	leases, err := fill(ctx, e, s, "exp", false)
	if err != nil {
		return err
	}
	check := func(when string) error {
		keys, err := e.keys(ctx)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if ttl, err := e.rdb.PTTL(ctx, k).Result(); err != nil || ttl < 0 {
				return fmt.Errorf("%s: key %s has no expiry (%v, %v)", when, k, ttl, err)
			}
		}
		return nil
	}
	if err := check("held"); err != nil {
		return err
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return check("released")
}

// checkFences: a primitive that hands out leases gives each grant a fence
// above every earlier one (released in between, or held beside it).
func checkFences(ctx context.Context, e *env, s Subject) error {
	cl := e.client(nil)
	var last int64
	for i := 0; i < 5; i++ {
		l, err := e.acquire(ctx, s, cl, "fence", true)
		if err != nil {
			return err
		}
		if l == nil {
			e.t.Skip("the grants are takes: no lease, no fence to check")
		}
		if l.Fence() <= last {
			return fmt.Errorf("grant %d: fence %d, not above the one before, %d", i+1, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// checkFenceClock: each grant's fence is at least the server's clock in
// µs read before its attempt, as the kit's fence block (next_fence) makes
// it: a fence from a counter starts again from 1 when its key expires or
// is lost with a failover, and goes back.
func checkFenceClock(ctx context.Context, e *env, s Subject) error {
	cl := e.client(nil)
	for i := 0; i < 3; i++ {
		before, err := e.rdb.Time(ctx).Result()
		if err != nil {
			return err
		}
		l, err := e.acquire(ctx, s, cl, "clock", true)
		if err != nil {
			return err
		}
		if l == nil {
			e.t.Skip("the grants are takes: no lease, no fence to check")
		}
		if l.Fence() < before.UnixMicro() {
			return fmt.Errorf("grant %d: fence %d, below the server's clock before its attempt, %d µs: take fences from next_fence", i+1, l.Fence(), before.UnixMicro())
		}
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// checkClose: a waiting acquisition ends with an error matching
// ErrClosed, and not ErrNotAcquired or context.Canceled, when its Client
// closes.
func checkClose(ctx context.Context, e *env, s Subject) error {
	if n, err := e.grants(ctx, s, "close", s.Limit); err != nil || n != s.Limit {
		return fmt.Errorf("filling the limit: %d granted, %v", n, err)
	}
	cl := e.client(nil)
	done := make(chan error, 1)
	go func() { _, err := e.acquire(ctx, s, cl, "close", false); done <- err }()
	time.Sleep(100 * time.Millisecond)
	if err := cl.Close(ctx); err != nil {
		return err
	}
	err := <-done
	if !errors.Is(err, latchkit.ErrClosed) || errors.Is(err, latchkit.ErrNotAcquired) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("a waiting acquisition withdrawn by Close: %v, want ErrClosed alone", err)
	}
	return nil
}

// checkGiveBackTwice: a Try granted on the server whose reply is lost
// gives back what it took; run twice, the give-back frees it once and
// takes nothing else: the limit is whole again.
func checkGiveBackTwice(ctx context.Context, e *env, s Subject) error {
	w := &lossy{}
	cl := e.client(func(b backend.Backend) backend.Backend { w.Backend = b; return w })
	w.double.Store(true)
	w.armed.Store(true)
	if _, err := e.acquire(ctx, s, cl, "twice", true); !errors.Is(err, latchkit.ErrUnavailable) {
		return fmt.Errorf("a Try whose reply was lost: %v, want ErrUnavailable", err)
	}
	n, err := e.grants(ctx, s, "twice", s.Limit+1)
	if err != nil {
		return err
	}
	if n != s.Limit {
		return fmt.Errorf("after a give-back applied twice, %d of %d were granted, want the limit, %d", n, s.Limit+1, s.Limit)
	}
	return nil
}

// checkLostReplyLateCopy: a Try granted on the server whose reply is lost
// gives back what it took; a copy of its attempt delivered after that (a
// driver's resend, held on the way) takes nothing: the limit is whole.
func checkLostReplyLateCopy(ctx context.Context, e *env, s Subject) error {
	w := &lossy{}
	cl := e.client(func(b backend.Backend) backend.Backend { w.Backend = b; return w })
	w.armed.Store(true)
	if _, err := e.acquire(ctx, s, cl, "resent", true); !errors.Is(err, latchkit.ErrUnavailable) {
		return fmt.Errorf("a Try whose reply was lost: %v, want ErrUnavailable", err)
	}
	c := w.lost.Load()
	if c == nil {
		return errors.New("the Try sent no attempt")
	}
	if _, err := w.Backend.Eval(ctx, c.sc, c.keys, c.args); err != nil {
		return fmt.Errorf("the late copy of the attempt: %w", err)
	}
	n, err := e.grants(ctx, s, "resent", s.Limit+1)
	if err != nil {
		return err
	}
	if n != s.Limit {
		return fmt.Errorf("after a late copy of a Try whose reply was lost, %d of %d were granted, want the limit, %d: the copy took %d places", n, s.Limit+1, s.Limit, s.Limit-n)
	}
	return nil
}

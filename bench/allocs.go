package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/primitives"
)

// allocRow is one allocs/op figure.
type allocRow struct {
	name    string
	allocs  float64
	target  bool // the target (< 30 on go-redis) applies
	comment string
}

// measureAllocs counts heap allocations per uncontended lock+unlock with
// testing.AllocsPerRun (process-wide, so the driver's own goroutines count
// too): latchkit's TryLock+Release on one reused Mutex, the figure the
// target is about, then every contender's S1 operation (a fresh key and,
// for latchkit, a NewMutex each time; harness closures included).
func measureAllocs(ctx context.Context, addr string) ([]allocRow, error) {
	var rows []allocRow
	for _, d := range []struct {
		name   string
		mk     func(context.Context, string, *atomic.Int64) (backendCloser, error)
		target bool
	}{
		{"latchkit Mutex.TryLock+Release, go-redis", mkGoredis, true},
		{"latchkit Mutex.TryLock+Release, rueidis", mkRueidis, false},
	} {
		for _, autoExtend := range []bool{true, false} {
			n, err := latchkitAllocs(ctx, addr, d.mk, autoExtend)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
			comment := "reused Mutex, defaults (auto-extend on)"
			if !autoExtend {
				comment = "reused Mutex, WithAutoExtend(false)"
			}
			rows = append(rows, allocRow{name: d.name, allocs: n, target: d.target && autoExtend, comment: comment})
		}
	}
	for _, c := range singleContenders() {
		var sent atomic.Int64
		lc, err := c.open(ctx, []string{addr}, &sent)
		if err != nil {
			return nil, err
		}
		var seq int
		var opErr error
		op := func() {
			seq++
			unlock, err := lc.try(ctx, "alloc:"+strconv.Itoa(seq))
			if err == nil {
				err = unlock(ctx)
			}
			if err != nil && opErr == nil {
				opErr = err
			}
		}
		for range 100 {
			op() // warm up
		}
		n := testing.AllocsPerRun(2000, op)
		lc.close()
		if opErr != nil {
			return nil, fmt.Errorf("%s: %w", c.name, opErr)
		}
		rows = append(rows, allocRow{name: c.name, allocs: n, comment: "S1 operation: fresh key each time"})
	}
	return rows, nil
}

// backendCloser is a latchkit backend with its client's close.
type backendCloser struct {
	b     backend.Backend
	close func()
}

func mkGoredis(ctx context.Context, addr string, sent *atomic.Int64) (backendCloser, error) {
	b, c, err := goredisBackend(ctx, addr, sent)
	return backendCloser{b, c}, err
}

func mkRueidis(ctx context.Context, addr string, sent *atomic.Int64) (backendCloser, error) {
	b, c, err := rueidisBackend(ctx, addr, sent)
	return backendCloser{b, c}, err
}

func latchkitAllocs(ctx context.Context, addr string, mk func(context.Context, string, *atomic.Int64) (backendCloser, error), autoExtend bool) (float64, error) {
	var sent atomic.Int64
	bc, err := mk(ctx, addr, &sent)
	if err != nil {
		return 0, err
	}
	cl, closeAll, err := latchkitClientOf(bc.b, bc.close)
	if err != nil {
		return 0, err
	}
	defer closeAll()
	m, err := primitives.NewMutex(cl, "alloc:reused", primitives.WithAutoExtend(autoExtend))
	if err != nil {
		return 0, err
	}
	var opErr error
	op := func() {
		l, err := m.TryLock(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		if err != nil && opErr == nil {
			opErr = err
		}
	}
	for range 100 {
		op()
	}
	n := testing.AllocsPerRun(2000, op)
	return n, opErr
}

package main

import (
	"context"
	"fmt"
	"github.com/latchkit/latchkit/internal/keyspace"
	"io"
	"strconv"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/primitives"
)

// runLimit is `latchctl limit NAME N`: Semaphore.SetLimit from the command
// line. The limit is stored in Redis; every client of the name grants by
// it from then on, whatever limit it was made with, for as long as the
// name is used (the retention after its last grant). Without -kind it
// picks the kind of semaphore that has keys under NAME, and refuses when
// there is none or both.
func runLimit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o toolFlags
	fs := o.flagSet("limit", "NAME N [-kind semaphore|fair_semaphore] [flags]", stderr)
	kindFlag := fs.String("kind", "", "semaphore or fair_semaphore, also the older sem or fairsem (default: the kind of semaphore with keys under NAME)")
	retention := fs.Duration("retention", keyspace.DefaultRetention, "how long the limit is kept after the name's last grant (primitives.WithRetention)")
	pos, err := o.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || pos[0] == "" {
		return fmt.Errorf("%w: want NAME and N (usage: latchctl limit NAME N [flags])", errUsage)
	}
	name := pos[0]
	n, err := strconv.Atoi(pos[1])
	if err != nil || n < 1 {
		return fmt.Errorf("%w: limit %q: want a whole number of at least 1 (nothing was changed)", errUsage, pos[1])
	}
	kind, ok := semKinds[*kindFlag]
	if *kindFlag != "" && !ok {
		return fmt.Errorf("%w: -kind %q: want semaphore or fair_semaphore", errUsage, *kindFlag)
	}
	return o.connect(ctx, func(b backend.Backend, _ func(context.Context, ...string) (any, error)) (err error) {
		if kind == "" {
			if kind, err = semKindOf(ctx, b, o.prefix, name); err != nil {
				return err
			}
		}
		cl, err := primitives.NewClient(b)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := closeClients(ctx, cl); cerr != nil && err == nil {
				err = cerr
			}
		}()
		opts := []primitives.Option{primitives.WithPrefix(o.prefix), primitives.WithRetention(*retention)}
		var s primitives.Semaphore
		if kind == fairSemKind {
			s, err = primitives.NewFairSemaphore(cl, name, n, opts...)
		} else {
			s, err = primitives.NewSemaphore(cl, name, n, opts...)
		}
		if err == nil {
			err = s.SetLimit(ctx, n)
		}
		if err != nil {
			return fmt.Errorf("limit %s %s: %w", kind, printable(name), err)
		}
		fmt.Fprintf(stdout, "%s %s: limit %d stored; every client of the name grants by it from now on\n", kind, printable(name), n)
		return nil
	})
}

// The kinds of semaphore limit takes, as latchctl names them.
const (
	semKind     = string(latchkit.KindSemaphore)
	fairSemKind = string(latchkit.KindFairSemaphore)
)

// semKinds maps limit's -kind values to the kinds they name: the names,
// and the older spellings.
var semKinds = map[string]string{semKind: semKind, fairSemKind: fairSemKind, "sem": semKind, "fairsem": fairSemKind}

// semKindOf is the kind of semaphore (semaphore or fair_semaphore) with
// keys under name, or an error when none or both have keys.
func semKindOf(ctx context.Context, b backend.Backend, prefix, name string) (string, error) {
	base := keyspace.KeyBase(prefix, name)
	var found []string
	for _, kn := range []string{semKind, fairSemKind} {
		k, err := kindByName(kinds, kn)
		if err != nil {
			return "", err
		}
		_, states, err := snapshot(ctx, b, k.allKeys(base))
		if err != nil {
			return "", fmt.Errorf("limit %s: %w", printable(name), err)
		}
		for _, st := range states {
			if st.exists() {
				found = append(found, kn)
				break
			}
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("%w: no semaphore named %s under prefix %q yet: give -kind semaphore or -kind fair_semaphore (nothing was changed)", errUsage, printable(name), prefix)
	default:
		return "", fmt.Errorf("%w: both a semaphore and a fair_semaphore named %s exist: give -kind (nothing was changed)", errUsage, printable(name))
	}
}

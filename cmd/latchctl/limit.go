package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

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
	fs := o.flagSet("limit", "NAME N [-kind sem|fairsem] [flags]", stderr)
	kindFlag := fs.String("kind", "", "sem or fairsem (default: the kind of semaphore with keys under NAME)")
	retention := fs.Duration("retention", primitives.DefaultRetention, "how long the limit is kept after the name's last grant (primitives.WithRetention)")
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
	if *kindFlag != "" && *kindFlag != "sem" && *kindFlag != "fairsem" {
		return fmt.Errorf("%w: -kind %q: want sem or fairsem", errUsage, *kindFlag)
	}
	return o.connect(ctx, func(b backend.Backend, _ func(context.Context, ...string) (any, error)) error {
		kind := *kindFlag
		if kind == "" {
			if kind, err = semKindOf(ctx, b, o.prefix, name); err != nil {
				return err
			}
		}
		opts := []primitives.Option{primitives.WithPrefix(o.prefix), primitives.WithRetention(*retention)}
		var s primitives.Semaphore
		if kind == "fairsem" {
			s, err = primitives.NewFairSemaphore(b, name, n, opts...)
		} else {
			s, err = primitives.NewSemaphore(b, name, n, opts...)
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

// semKindOf is the kind of semaphore ("sem" or "fairsem") with keys under
// name, or an error when none or both have keys.
func semKindOf(ctx context.Context, b backend.Backend, prefix, name string) (string, error) {
	base := primitives.KeyBase(prefix, name)
	var found []string
	for _, kn := range []string{"sem", "fairsem"} {
		k, err := kindByName(kn)
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
		return "", fmt.Errorf("%w: no semaphore named %s under prefix %q yet: give -kind sem or -kind fairsem (nothing was changed)", errUsage, printable(name), prefix)
	default:
		return "", fmt.Errorf("%w: both a sem and a fairsem named %s exist: give -kind (nothing was changed)", errUsage, printable(name))
	}
}

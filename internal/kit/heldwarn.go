package kit

import (
	"context"
	"log/slog"
	"time"
)

// watchHeld arms the held-too-long warning of a lease just granted
// (primitives.WithHeldWarning): once it has been held d, by this
// process's clock, one record is logged at Warn, unless it has ended by
// then. d <= 0: none. Called before the lease is shared.
func (l *Lease) watchHeld(d time.Duration) {
	if d <= 0 {
		return
	}
	granted := time.Now()
	l.held = time.AfterFunc(d, func() { l.warnHeld(granted) })
}

// warnHeld logs that the lease, granted at granted, is still held: its
// kind, name and fence, the identity of its Client (never the token), and
// its age. It logs through WithLogger's logger, else slog.Default().
func (l *Lease) warnHeld(granted time.Time) {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done {
		return
	}
	log := l.log
	if log == nil {
		log = slog.Default()
	}
	id := l.cl.id
	log.LogAttrs(context.Background(), slog.LevelWarn, "latchkit: lease held past its warning",
		slog.String("kind", string(l.kind)), slog.String("name", l.name), slog.Int64("fence", l.fence),
		slog.Duration("age", time.Since(granted).Round(time.Millisecond)),
		slog.String("client", id.Name), slog.String("host", id.Host), slog.Int("pid", id.PID), slog.String("client_id", id.ID))
}

package primitives

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchkit/latchkit/internal/pubsub"
)

// seatNews is one message of the observers' channel: a leader seated
// ("L<fence> <ms> <value>") or the seat emptied ("E<fence>", the fence of
// the leader that left).
type seatNews struct {
	info  LeaderInfo    // the new leader; zero for an emptied seat
	left  time.Duration // how long the new leader's seat lasts unless renewed
	fence int64         // the fence the message is about
}

// parseSeatNews decodes a message of the observers' channel.
func parseSeatNews(payload string) (seatNews, bool) {
	if rest, ok := strings.CutPrefix(payload, "E"); ok {
		f, err := strconv.ParseInt(rest, 10, 64)
		return seatNews{fence: f}, err == nil
	}
	rest, ok := strings.CutPrefix(payload, "L")
	if !ok {
		return seatNews{}, false
	}
	fs, rest, ok1 := strings.Cut(rest, " ")
	ttl, value, ok2 := strings.Cut(rest, " ")
	f, err1 := strconv.ParseInt(fs, 10, 64)
	d, err2 := strconv.ParseInt(ttl, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || value == "" {
		return seatNews{}, false
	}
	return seatNews{info: LeaderInfo{Value: value, Fence: f}, left: time.Duration(d) * time.Millisecond, fence: f}, true
}

// maxObserved bounds the messages an observer keeps for a slow consumer;
// past it, the observer drops them and re-reads the leader.
const maxObserved = 1024

func (e *election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo)
	if e.cfg.BeginCall(ctx) != nil {
		close(out) // the Client is closed (Leader says so), or ctx is nil
		return out
	}
	ctx, unbind := e.cfg.Bind(ctx)
	go func() {
		defer e.cfg.End()
		defer unbind()
		e.observe(ctx, out)
	}()
	return out
}

// observer is the state of one Observe: the messages heard and not yet
// handled, and whether they can be trusted to be complete.
type observer struct {
	mu    sync.Mutex
	news  []string
	stale bool // messages were dropped (too many, or the subscription): re-read
}

func (o *observer) heard(_, payload string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.news) >= maxObserved {
		o.news, o.stale = o.news[:0], true
		return
	}
	o.news = append(o.news, payload)
}

// take returns the messages heard since the last take, and whether the
// leader must be read again.
func (o *observer) take() ([]string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	news, stale := o.news, o.stale
	o.news, o.stale = nil, false
	return news, stale
}

// observe feeds out until ctx ends: subscribe first, then read the seat,
// then apply each message in order (ignoring any about fences already
// seen), re-reading the seat when its leader's time is up (an expiry
// publishes nothing), when messages may have been lost, and, while the
// subscription is down, at the retry policy's pace.
func (e *election) observe(ctx context.Context, out chan<- LeaderInfo) {
	defer close(out)
	o := &observer{}
	// w is nil for a Client that polls: the seat is read at the retry
	// policy's pace and when its leader's time is up.
	var (
		w    *pubsub.Waiter
		live bool
	)
	if !e.cfg.Cl.Polls() {
		h := e.cfg.Cl.Hub()
		if h == nil {
			return // closed meanwhile
		}
		w, live = h.Listen(ctx, o.heard, e.obs)
		defer w.Leave()
	}
	var heard <-chan struct{} // a message, or a drop (Dropped says so at the top)
	if w != nil {
		heard = w.C()
	}
	var (
		view   seatView
		policy = e.cfg.Retry()
	)
	pace := func() time.Duration { return nextPause(policy) }
	send := func(info LeaderInfo, changed bool) bool {
		if !changed {
			return true
		}
		select {
		case out <- info:
			return true
		case <-ctx.Done():
			return false
		}
	}
	reread := true
	for {
		if w != nil && w.Dropped() {
			// Messages may have been lost, also when the Hub has
			// subscribed again before this goroutine ran.
			live, reread = false, true
		}
		if !live && w != nil && w.Live() {
			// Subscribed again: a message sent before it is lost, so
			// read once more.
			live, reread = true, true
		}
		news, stale := o.take()
		if stale || reread {
			info, left, latest, err := e.read(ctx)
			if err != nil {
				if ctx.Err() != nil || refusedForGood(err) {
					return // Leader tells a refusal
				}
				reread = true
				if pubsub.Sleep(ctx, pace()) != nil {
					return
				}
				continue
			}
			policy.Reset()
			reread = false
			if !send(view.read(info, left, latest, time.Now())) {
				return
			}
		}
		for _, p := range news {
			if n, ok := parseSeatNews(p); ok && !send(view.news(n, time.Now())) {
				return
			}
		}
		// Sleep until a message, the seat's expiry (re-read: renewals
		// publish nothing), or, while not subscribed, the retry pace.
		wait := time.Duration(-1)
		if !view.expires.IsZero() {
			wait = max(time.Until(view.expires), 0) + time.Millisecond
		}
		if !live || w == nil || !w.Live() {
			live = false
			d := pace()
			if wait < 0 || d < wait {
				wait = d
			}
		}
		var t *time.Timer
		var timer <-chan time.Time
		if wait >= 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-heard:
		case <-timer:
			reread = true
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// seatView is what an observer knows of the seat: what it reported last,
// and the highest fence it knows of. It decides what a read of the seat, or
// a message, changes: messages may arrive out of step with reads (a
// message published before a read can arrive after its reply), so news of
// a leadership at or below the highest fence known is old and ignored, and
// an emptied seat is news only about the leader last reported.
type seatView struct {
	cur     LeaderInfo // last reported
	sent    bool       // anything reported yet
	latest  int64      // the highest fence known
	expires time.Time  // when cur's seat runs out unless renewed; zero: none
}

// report makes info the last reported, and says whether it is a change.
func (v *seatView) report(info LeaderInfo) (LeaderInfo, bool) {
	changed := !v.sent || info != v.cur
	v.cur, v.sent = info, true
	return info, changed
}

// read applies a read of the seat made at now: the leader (zero: none),
// its time left, and the fence of the latest leadership granted then.
func (v *seatView) read(info LeaderInfo, left time.Duration, latest int64, now time.Time) (LeaderInfo, bool) {
	v.latest = max(v.latest, latest, info.Fence)
	v.expires = time.Time{}
	if info != (LeaderInfo{}) {
		v.expires = now.Add(left)
	}
	return v.report(info)
}

// news applies a message heard at now.
func (v *seatView) news(n seatNews, now time.Time) (LeaderInfo, bool) {
	switch {
	case n.info != (LeaderInfo{}) && n.fence > v.latest:
		v.latest = n.fence
		v.expires = now.Add(n.left)
		return v.report(n.info)
	case n.info == (LeaderInfo{}) && v.cur != (LeaderInfo{}) && n.fence == v.cur.Fence:
		v.expires = time.Time{}
		return v.report(LeaderInfo{})
	}
	return v.cur, false
}

package faultproxy

import (
	"strings"
	"time"
)

// Resend is a command the proxy runs twice (see ResendNext).
type Resend struct {
	match    func(args []string) bool
	delay    time.Duration
	args     []string
	cmd      []byte
	executed chan struct{}
	done     chan struct{}
	// detached: the copy goes on a connection of its own (LateCopyNext).
	detached bool
}

// Executed is closed once the server ran the command the first time and
// its reply was dropped.
func (r *Resend) Executed() <-chan struct{} { return r.executed }

// Done is closed once the server ran the command again and that reply was
// forwarded to the client. It stays open if the connection ends first.
func (r *Resend) Done() <-chan struct{} { return r.done }

// Args returns the command that was chosen (nil before one was).
func (r *Resend) Args() []string {
	select {
	case <-r.executed:
		return r.args
	default:
		return nil
	}
}

// Command returns a matcher for ResendNext: commands named one of names,
// in any case.
func Command(names ...string) func(args []string) bool {
	return func(args []string) bool {
		for _, n := range names {
			if len(args) > 0 && strings.EqualFold(args[0], n) {
				return true
			}
		}
		return false
	}
}

// ResendNext arms the proxy for one resend: the next command a client
// sends, on any of the proxy's followed connections, for which match
// returns true (nil matches any; see Command) is run twice. match is called
// with the proxy's lock held: it must not call the proxy. The proxy
// forwards it, drops the server's reply, waits delay, sends the same bytes
// to the server again and forwards only that second reply: the command ran
// twice, the client saw one reply, late by delay, as when a driver resends
// a command after a read timeout. Arming again replaces a resend that has
// not found its command yet.
//
// Pipelines: commands are handled one at a time, whatever the writes that
// carried them. Those before the chosen command are forwarded as they come;
// those after it (the rest of its write, and whatever the client sends
// later on that connection) are held until the second reply has been
// forwarded, then forwarded in order, so the client receives its replies in
// the order it sent the commands. Other connections are not held.
func (p *Proxy) ResendNext(match func(args []string) bool, delay time.Duration) *Resend {
	r := &Resend{match: match, delay: delay, executed: make(chan struct{}), done: make(chan struct{})}
	p.mu.Lock()
	p.armed = r
	p.mu.Unlock()
	return r
}

// LateCopyNext arms the proxy for one late copy: the next command a client
// sends for which match returns true (as ResendNext) is forwarded, the
// server's reply is dropped and the client's connection reset (the server
// ran the command; the client never learns), and delay later the same
// bytes are sent to the server once more on a connection of the proxy's
// own, which the client's giving up does not end: a copy of the command
// that arrives after its caller gave up, as one held in the network, or
// resent by a driver, does. Executed is closed once the first run's reply
// was dropped, Done once the copy's reply was read (and discarded).
func (p *Proxy) LateCopyNext(match func(args []string) bool, delay time.Duration) *Resend {
	r := p.ResendNext(match, delay)
	r.detached = true
	return r
}

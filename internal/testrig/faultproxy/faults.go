package faultproxy

import (
	"time"
)

// SetLatency delays every chunk forwarded in either direction by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Holding reports whether the proxy holds bytes a client sent that it has
// not written to the server yet (a blackhole, a latency, a resend in
// progress, or its goroutine not yet run): a test that must know a held
// command has been forwarded waits until it is false.
func (p *Proxy) Holding() bool { return p.holding.Load() > 0 }

// Blackhole holds (on) or releases (off) all traffic: connections stay
// open, bytes are neither forwarded nor refused, as in a partition. Bytes
// held are forwarded when it ends.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// ResetAll resets every open connection (both ends): a connection reset
// for whatever was in flight. New connections are accepted as before.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		reset(l.client)
		reset(l.server)
	}
}

// DropNextReplies makes the next n chunks the server sends be discarded,
// each resetting its connection: the server has run the command, the
// client sees a reset instead of the reply.
func (p *Proxy) DropNextReplies(n int) {
	p.mu.Lock()
	p.dropReply = n
	p.mu.Unlock()
}

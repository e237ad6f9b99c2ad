// Package faultproxy is a TCP proxy for fault-injection tests: it sits
// between a client and a redis-server on loopback and, on command, delays
// traffic, resets connections, black-holes them (a partition: bytes are
// held, connections stay open) or drops the next reply of the server and
// resets its connection (the server ran the command; the client never
// learns).
package faultproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	// Addr is where clients connect: 127.0.0.1:port.
	Addr string

	target string
	ln     net.Listener

	mu        sync.Mutex
	cond      *sync.Cond // signalled when blackhole ends or the proxy closes
	latency   time.Duration
	blackhole bool
	dropReply int // replies to drop, each with its connection
	conns     map[*link]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// link is one proxied connection.
type link struct{ client, server net.Conn }

// Start listens on a free loopback port, forwarding to target, and closes
// when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*link]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			reset(c)
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			reset(c)
			reset(s)
			return
		}
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(l, c, s, false)
		go p.pipe(l, s, c, true)
	}
}

// pipe copies from src to dst, applying the faults in force to each chunk.
func (p *Proxy) pipe(l *link, src, dst net.Conn, fromServer bool) {
	defer p.wg.Done()
	defer p.drop(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.blackhole && !p.closed {
				p.cond.Wait()
			}
			closed, latency := p.closed, p.latency
			drop := fromServer && p.dropReply > 0
			if drop {
				p.dropReply--
			}
			p.mu.Unlock()
			if closed || drop {
				return
			}
			if latency > 0 {
				time.Sleep(latency)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// drop resets both ends of l and forgets it.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
	reset(l.client)
	reset(l.server)
}

// reset closes c with an RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// SetLatency delays every chunk forwarded in either direction by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

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

// Close stops the proxy and resets every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	_ = p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
}

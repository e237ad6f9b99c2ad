// Package faultproxy is a TCP proxy for fault-injection tests: it sits
// between a client and a redis-server on loopback and, on command, delays
// traffic, resets connections, black-holes them (a partition: bytes are
// held, connections stay open), drops the next reply of the server and
// resets its connection (the server ran the command; the client never
// learns), or runs a command twice and shows the client one reply, as a
// client that resends a command after a read timeout or a reset does
// (ResendNext).
//
// To do the last, the proxy follows the RESP stream of each connection:
// commands (arrays of bulk strings, or inline) from the client, replies
// (any RESP2 or RESP3 value, nested to any depth; pushes counted apart)
// from the server. A connection that subscribes (SUBSCRIBE, PSUBSCRIBE,
// SSUBSCRIBE), runs MONITOR or CLIENT REPLY, or sends bytes that do not
// parse is no longer followed: it is forwarded untouched and never chosen
// for a resend.
package faultproxy

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	// Addr is where clients connect: 127.0.0.1:port.
	Addr string

	target string
	ln     net.Listener
	done   chan struct{} // closed by Close

	mu        sync.Mutex
	cond      *sync.Cond // signalled when blackhole ends, a resend completes, a link drops or the proxy closes
	latency   time.Duration
	blackhole bool
	dropReply int     // replies to drop, each with its connection
	armed     *Resend // the resend waiting for a matching command, if any
	conns     map[*link]struct{}
	closed    bool
	wg        sync.WaitGroup
	// holding counts the links with bytes read from their client and not
	// yet written to their server: see Holding.
	holding atomic.Int64
}

// link is one proxied connection. Its RESP bookkeeping is guarded by the
// proxy's mu.
type link struct {
	client, server net.Conn
	wmu            sync.Mutex // serializes writes to server

	dead      bool  // reset: a request pipe holding for a resend gives up
	untracked bool  // no longer followed: forwarded untouched, never resent
	sent      int64 // commands written to the server (resends included)
	replied   int64 // in-band replies read from the server
	resend    *Resend
	// The resend in progress: the reply with index first is dropped, the
	// one with index second (0 until the command was sent again) is the
	// client's.
	first, second int64
}

// Start listens on a free loopback port, forwarding to target, and closes
// when t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*link]struct{}{}, done: make(chan struct{})}
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
		go p.requests(l)
		go p.replies(l)
	}
}

// gate waits out a blackhole and reports the latency in force, or false
// when the proxy closed. The caller holds p.mu.
func (p *Proxy) gate() (time.Duration, bool) {
	for p.blackhole && !p.closed {
		p.cond.Wait()
	}
	return p.latency, !p.closed
}

// requests copies commands from l's client to its server, applying the
// faults in force to each chunk read. A command a resend is armed for ends
// the chunk: what follows it is held until the resend's reply went to the
// client. An incomplete command waits for the rest of its bytes.
func (p *Proxy) requests(l *link) {
	defer p.wg.Done()
	defer p.drop(l)
	buf := make([]byte, 32<<10)
	var pending []byte // read, not yet forwarded
	defer func() {
		if len(pending) > 0 {
			p.holding.Add(-1) // gone with the link
		}
	}()
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			if len(pending) == 0 {
				p.holding.Add(1)
			}
			pending = append(pending, buf[:n]...)
			for len(pending) > 0 {
				p.mu.Lock()
				latency, ok := p.gate()
				for ok && l.resend != nil && !l.dead {
					p.cond.Wait() // a resend in progress: hold what follows
					latency, ok = p.gate()
				}
				if !ok || l.dead {
					p.mu.Unlock()
					return
				}
				cut := p.scanRequests(l, pending)
				p.mu.Unlock()
				if cut == 0 {
					break // an incomplete command: read on
				}
				if latency > 0 {
					time.Sleep(latency)
				}
				l.wmu.Lock()
				_, werr := l.server.Write(pending[:cut])
				l.wmu.Unlock()
				if werr != nil {
					return
				}
				pending = pending[cut:]
				if len(pending) == 0 {
					p.holding.Add(-1)
				}
			}
		}
		if err != nil {
			p.awaitFirstReply(l)
			return
		}
	}
}

// awaitFirstReply waits, when l's client has gone while the command chosen
// for a resend is at the server, until the server's reply to it has been
// read (at most 5 s): the server runs a command that reached it whatever
// its client does since, so the resend goes on (Executed, then the copy)
// instead of the link's reset cutting its server side off first.
func (p *Proxy) awaitFirstReply(l *link) {
	wake := time.AfterFunc(5*time.Second, p.cond.Broadcast)
	defer wake.Stop()
	deadline := time.Now().Add(5 * time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	for l.resend != nil && l.replied < l.first && !l.dead && !p.closed && time.Now().Before(deadline) {
		p.cond.Wait()
	}
}

// scanRequests returns how many bytes of b to forward now: every complete
// command, up to and including the first one the armed resend matches
// (which becomes l's resend), or all of b on a link no longer followed.
// The caller holds p.mu.
func (p *Proxy) scanRequests(l *link, b []byte) (cut int) {
	for cut < len(b) {
		if l.untracked {
			return len(b)
		}
		n, args, err := parseRequest(b[cut:])
		if err != nil {
			l.untracked = true
			return len(b)
		}
		if n == 0 {
			return cut
		}
		if len(args) == 0 { // an empty inline line: Redis does not answer it
			cut += n
			continue
		}
		if untracks(args) {
			l.untracked = true
		}
		l.sent++
		if r := p.armed; r != nil && !l.untracked && (r.match == nil || r.match(args)) {
			p.armed = nil
			r.args, r.cmd = args, append([]byte(nil), b[cut:cut+n]...)
			l.resend, l.first, l.second = r, l.sent, 0
			return cut + n
		}
		cut += n
	}
	return cut
}

// untracks reports whether a command makes its connection's replies
// impossible to pair with commands.
func untracks(args []string) bool {
	switch strings.ToUpper(args[0]) {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR", "SYNC", "PSYNC":
		return true
	case "CLIENT":
		return len(args) > 1 && strings.EqualFold(args[1], "REPLY")
	}
	return false
}

// replies copies replies from l's server to its client, applying the
// faults in force; on a followed link, it drops the first reply of the
// command being resent, sends the command again and passes the second
// reply on.
func (p *Proxy) replies(l *link) {
	defer p.wg.Done()
	defer p.drop(l)
	buf := make([]byte, 32<<10)
	var pending []byte // read, not yet forwarded (an incomplete reply)
	for {
		n, err := l.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			latency, ok := p.gate()
			drop := p.dropReply > 0
			if drop {
				p.dropReply--
			}
			p.mu.Unlock()
			if !ok || drop {
				return
			}
			pending = append(pending, buf[:n]...)
			for len(pending) > 0 {
				out, skip, r := p.scanReplies(l, pending)
				if out > 0 {
					if latency > 0 {
						time.Sleep(latency)
					}
					if _, werr := l.client.Write(pending[:out]); werr != nil {
						return
					}
				}
				pending = pending[out+skip:]
				if r == nil {
					if out+skip == 0 {
						break // an incomplete reply: read on
					}
					continue
				}
				// The first reply of r's command was dropped: run it again.
				close(r.executed)
				p.cond.Broadcast() // a client gone first waits for it (awaitFirstReply)
				if r.detached {
					p.wg.Add(1)
					go p.lateCopy(r)
					return // the link is reset: the client never gets a reply
				}
				t := time.NewTimer(r.delay)
				select {
				case <-t.C:
				case <-p.done:
					t.Stop()
					return
				}
				p.mu.Lock()
				l.sent++
				l.second = l.sent
				p.mu.Unlock()
				l.wmu.Lock()
				_, werr := l.server.Write(r.cmd)
				l.wmu.Unlock()
				if werr != nil {
					return
				}
			}
			if len(pending) == 0 {
				pending = pending[:0:0]
			}
		}
		if err != nil {
			return
		}
	}
}

// lateCopy sends r's command to the server delay after its first run, on
// a connection of its own, and reads its reply (see LateCopyNext).
func (p *Proxy) lateCopy(r *Resend) {
	defer p.wg.Done()
	t := time.NewTimer(r.delay)
	select {
	case <-t.C:
	case <-p.done:
		t.Stop()
		return
	}
	c, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(r.cmd); err != nil {
		return
	}
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if m, _, perr := parseReply(got); perr != nil || m > 0 {
			close(r.done)
			return
		}
		if err != nil {
			return
		}
	}
}

// scanReplies returns how many bytes of b to forward now (out), and how
// many after those to drop (skip, with the resend whose first reply they
// are). It completes a resend whose second reply is among those forwarded.
func (p *Proxy) scanReplies(l *link, b []byte) (out, skip int, r *Resend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for out < len(b) {
		if l.untracked && l.resend == nil {
			return len(b), 0, nil
		}
		n, push, err := parseReply(b[out:])
		if err != nil {
			l.untracked = true
			if l.resend != nil { // cannot tell its replies apart: let it go
				close(l.resend.done)
				l.resend = nil
				p.cond.Broadcast()
			}
			return len(b), 0, nil
		}
		if n == 0 {
			return out, 0, nil
		}
		if !push {
			l.replied++
			if l.resend != nil && l.replied == l.first {
				return out, n, l.resend
			}
			if l.resend != nil && l.replied == l.second {
				close(l.resend.done)
				l.resend = nil
				p.cond.Broadcast()
			}
		}
		out += n
	}
	return out, 0, nil
}

// drop resets both ends of l and forgets it.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.conns, l)
	l.dead = true
	p.mu.Unlock()
	p.cond.Broadcast()
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

// Close stops the proxy and resets every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	p.cond.Broadcast()
	_ = p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
}

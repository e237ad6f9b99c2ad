package faultproxy

import (
	"bufio"
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

func TestParseReply(t *testing.T) {
	for _, v := range []string{
		"+OK\r\n", "-ERR x\r\n", ":12\r\n", "_\r\n", ",1.5\r\n", "#t\r\n", "(123\r\n",
		"$-1\r\n", "$0\r\n\r\n", "$5\r\nab\r\nc\r\n", "!3\r\nerr\r\n", "=7\r\ntxt:abc\r\n",
		"*-1\r\n", "*0\r\n", "*2\r\n:1\r\n*2\r\n$1\r\nx\r\n*1\r\n_\r\n",
		"%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n:2\r\n", "~1\r\n+x\r\n",
		"|1\r\n+ttl\r\n:3\r\n*1\r\n:9\r\n", // an attribute, then the value it annotates
	} {
		for i := 0; i < len(v); i++ {
			if n, _, err := parseReply([]byte(v[:i])); n != 0 || err != nil {
				t.Errorf("%q, first %d bytes: %d, %v; want incomplete", v, i, n, err)
			}
		}
		n, push, err := parseReply([]byte(v + "+NEXT\r\n"))
		if n != len(v) || push || err != nil {
			t.Errorf("%q: %d, %v, %v; want %d", v, n, push, err, len(v))
		}
	}
	if n, push, err := parseReply([]byte(">3\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n_\r\n")); n == 0 || !push || err != nil {
		t.Errorf("push: %d, %v, %v", n, push, err)
	}
	for _, bad := range []string{"?x\r\n", "$x\r\n", "*?\r\n", "\r\n"} {
		if _, _, err := parseReply([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParseRequest(t *testing.T) {
	cmd := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nv\r\nv\r\n"
	for i := 0; i < len(cmd); i++ {
		if n, _, err := parseRequest([]byte(cmd[:i])); n != 0 || err != nil {
			t.Errorf("first %d bytes: %d, %v; want incomplete", i, n, err)
		}
	}
	n, args, err := parseRequest([]byte(cmd + "PING\r\n"))
	if n != len(cmd) || !reflect.DeepEqual(args, []string{"SET", "k", "v\r\nv"}) || err != nil {
		t.Errorf("%d %q %v", n, args, err)
	}
	n, args, err = parseRequest([]byte("PING  hi\r\n"))
	if n != 10 || !reflect.DeepEqual(args, []string{"PING", "hi"}) || err != nil {
		t.Errorf("inline: %d %q %v", n, args, err)
	}
	if _, _, err := parseRequest([]byte("*1\r\n:1\r\n")); err == nil {
		t.Error("an array of integers parsed as a command")
	}
}

func newGoRedis(t *testing.T, addr string, protocol int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, Protocol: protocol, PoolSize: 2, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func waitClosed(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not closed after 5s", what)
	}
}

// A resent INCR runs twice: the server has 2, and the client, which sent
// it once, sees 2.
func TestResendIncr(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, proto := range []int{2, 3} {
		p := Start(t, srv.Addr)
		c := newGoRedis(t, p.Addr, proto)
		key := "n" + string(rune('0'+proto))
		r := p.ResendNext(Command("incr"), 100*time.Millisecond)
		start := time.Now()
		got, err := c.Incr(ctx, key).Result()
		if err != nil || got != 2 {
			t.Fatalf("RESP%d: INCR resent: %d, %v; want 2", proto, got, err)
		}
		if took := time.Since(start); took < 100*time.Millisecond {
			t.Errorf("RESP%d: the reply came after %v, before the resend's delay", proto, took)
		}
		waitClosed(t, "Executed", r.Executed())
		waitClosed(t, "Done", r.Done())
		if !reflect.DeepEqual(r.Args(), []string{"incr", key}) {
			t.Errorf("RESP%d: resent %q", proto, r.Args())
		}
		if v, err := srv.Do(ctx, "GET", key); err != nil || v != "2" {
			t.Errorf("RESP%d: server has %v, %v; want 2", proto, v, err)
		}
		// Disarmed: the next INCR runs once.
		if got, err := c.Incr(ctx, key).Result(); err != nil || got != 3 {
			t.Errorf("RESP%d: next INCR: %d, %v; want 3", proto, got, err)
		}
	}
}

// A late copy of an INCR: the client's call fails (its connection reset,
// no reply), and the copy runs after the client gave up, on a connection
// of the proxy's own: the server has 2.
func TestLateCopyIncr(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := Start(t, srv.Addr)
	c := newGoRedis(t, p.Addr, 2)
	r := p.LateCopyNext(Command("incr"), 100*time.Millisecond)
	if _, err := c.Incr(ctx, "late").Result(); err == nil {
		t.Fatal("INCR whose reply was dropped succeeded")
	}
	waitClosed(t, "Executed", r.Executed())
	if v, _ := srv.Do(ctx, "GET", "late"); v != "1" {
		t.Errorf("before the copy: server has %v, want 1", v)
	}
	waitClosed(t, "Done", r.Done())
	if v, err := srv.Do(ctx, "GET", "late"); err != nil || v != "2" {
		t.Errorf("after the copy: server has %v, %v; want 2", v, err)
	}
	// Disarmed: the next INCR runs once, on a fresh connection.
	if got, err := c.Incr(ctx, "late").Result(); err != nil || got != 3 {
		t.Errorf("next INCR: %d, %v; want 3", got, err)
	}
}

// A late copy whose caller gives up before the server answers: the
// command reached the server, which runs it whatever its client does, so
// the first run is still seen (Executed) and the copy still runs. The
// proxy once reset the server's side as soon as the client's went, and a
// test that armed the copy saw no run at all (a model test's "made no
// round trip", on a machine loaded past the caller's 25 ms deadline).
func TestLateCopyCallerGoneFirst(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := Start(t, srv.Addr)
	c := newGoRedis(t, p.Addr, 2)
	// The script keeps the server busy for 200 ms, far past the caller's
	// deadline, then counts.
	const slow = `local t = redis.call('TIME') local until_us = t[1] * 1000000 + t[2] + 200000
while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] >= until_us then break end end
return redis.call('INCR', KEYS[1])`
	r := p.LateCopyNext(Command("eval"), 100*time.Millisecond)
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := c.Eval(cctx, slow, []string{"gone"}).Result()
	ccancel()
	if err == nil {
		t.Fatal("a call past its deadline succeeded")
	}
	waitClosed(t, "Executed", r.Executed())
	waitClosed(t, "Done", r.Done())
	if v, err := srv.Do(ctx, "GET", "gone"); err != nil || v != "2" {
		t.Errorf("server has %v, %v; want 2 (the first run and the copy)", v, err)
	}
}

// A pipeline of commands in one write: the one chosen in the middle runs
// twice, and the replies reach the client in order.
func TestResendInPipeline(t *testing.T) {
	srv := redistest.Start(t)
	p := Start(t, srv.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newGoRedis(t, p.Addr, 3)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.ResendNext(func(args []string) bool { return len(args) == 2 && args[0] == "incr" && args[1] == "b" }, 50*time.Millisecond)
	var cmds []*redis.IntCmd
	_, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for _, k := range []string{"a", "b", "a", "c", "b"} {
			cmds = append(cmds, pl.Incr(ctx, k))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, c := range cmds {
		got = append(got, c.Val())
	}
	if want := []int64{1, 2, 2, 1, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("pipeline replies %v, want %v (b's first INCR ran twice)", got, want)
	}

	// The same on a raw connection, three commands in one write, and a
	// nested reply resent.
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	script := "redis.call('INCR', KEYS[1]); return {1, {redis.call('GET', KEYS[1]), {'x', 3}}, 'end'}"
	p.ResendNext(Command("EVAL"), 50*time.Millisecond)
	req := "*1\r\n$4\r\nPING\r\n" +
		"*4\r\n$4\r\nEVAL\r\n$" + itoa(len(script)) + "\r\n" + script + "\r\n$1\r\n1\r\n$1\r\ne\r\n" +
		"*2\r\n$3\r\nGET\r\n$1\r\ne\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	rd := bufio.NewReader(conn)
	var replies []string
	var buf []byte
	for len(replies) < 3 {
		b, err := rd.ReadByte()
		if err != nil {
			t.Fatalf("after %q: %v", replies, err)
		}
		buf = append(buf, b)
		if n, _, err := parseReply(buf); err != nil {
			t.Fatal(err)
		} else if n > 0 {
			replies = append(replies, string(buf[:n]))
			buf = buf[n:]
		}
	}
	want := []string{"+PONG\r\n", "*3\r\n:1\r\n*2\r\n$1\r\n2\r\n*2\r\n$1\r\nx\r\n:3\r\n$3\r\nend\r\n", "$1\r\n2\r\n"}
	if !reflect.DeepEqual(replies, want) {
		t.Errorf("replies %q, want %q", replies, want)
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// rueidis pipelines automatically, speaks RESP3 and gets pushes
// (client-side caching invalidations) on the same connection.
func TestResendRueidis(t *testing.T) {
	srv := redistest.Start(t)
	p := Start(t, srv.Addr)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A cached read makes the server push an invalidation when k changes.
	if err := c.DoCache(ctx, c.B().Get().Key("k").Cache(), time.Minute).Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	r := p.ResendNext(Command("INCR"), 50*time.Millisecond)
	if got, err := c.Do(ctx, c.B().Incr().Key("k").Build()).AsInt64(); err != nil || got != 2 {
		t.Fatalf("INCR resent: %d, %v; want 2", got, err)
	}
	waitClosed(t, "Done", r.Done())
	if got, err := c.Do(ctx, c.B().Incr().Key("k").Build()).AsInt64(); err != nil || got != 3 {
		t.Fatalf("next INCR: %d, %v; want 3", got, err)
	}
}

// A subscribed connection is forwarded untouched and never chosen: the
// resend goes to the next matching command on another connection.
func TestResendSkipsSubscriptions(t *testing.T) {
	srv := redistest.Start(t)
	p := Start(t, srv.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newGoRedis(t, p.Addr, 3)
	if err := c.Ping(ctx).Err(); err != nil { // a pooled connection, set up
		t.Fatal(err)
	}
	sub := c.Subscribe(ctx, "ch")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	r := p.ResendNext(nil, 10*time.Millisecond)
	if err := sub.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Publish(ctx, "ch", "hello").Result(); err != nil || n != 1 {
		t.Fatalf("PUBLISH (resent): %d, %v", n, err)
	}
	waitClosed(t, "Done", r.Done())
	if a := r.Args(); len(a) == 0 || !strings.EqualFold(a[0], "publish") {
		t.Errorf("resent %q, want the PUBLISH", a)
	}
	for i := 0; i < 2; i++ { // the message was published twice
		m, err := sub.ReceiveMessage(ctx)
		if err != nil || m.Payload != "hello" {
			t.Fatalf("message %d: %v, %v", i+1, m, err)
		}
	}
}

// Holding is true while a blackhole holds a command the client sent, and
// false once the blackhole ended and the command was forwarded.
func TestHolding(t *testing.T) {
	srv := redistest.Start(t)
	p := Start(t, srv.Addr)
	c := newGoRedis(t, p.Addr, 2)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// The PING's reply can reach the client before the goroutine that
	// forwarded it counts it forwarded (Holding's doc): wait for that.
	for settle := time.Now().Add(time.Second); p.Holding(); time.Sleep(time.Millisecond) {
		if time.Now().After(settle) {
			t.Fatal("holding a second after the PING was answered, before anything was held")
		}
	}
	p.Blackhole(true)
	done := make(chan error, 1)
	go func() { done <- c.Incr(context.Background(), "held").Err() }()
	deadline := time.Now().Add(5 * time.Second)
	for !p.Holding() {
		if time.Now().After(deadline) {
			t.Fatal("not holding the INCR sent during the blackhole")
		}
		time.Sleep(time.Millisecond)
	}
	p.Blackhole(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for p.Holding() {
		if time.Now().After(deadline) {
			t.Fatal("still holding after the blackhole ended and the INCR was answered")
		}
		time.Sleep(time.Millisecond)
	}
}

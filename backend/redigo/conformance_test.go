package redigo_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/backend/redigo"
	"github.com/latchkit/latchkit/contracttest"
)

// TestConformance runs the conformance suite through the redigo adapter on
// every deployment it can serve: miniredis, redis-server, and Sentinel
// through a Dial function that asks the sentinels for the master.
func TestConformance(t *testing.T) {
	contracttest.RunDeploymentsExcept(t, map[string]string{
		"cluster": "redigo has no Cluster client: the adapter serves one server (see the package doc)",
	}, func(s contracttest.Server) contracttest.Harness { return harness{s} })
}

// harness connects redigo pools to a Server.
type harness struct{ contracttest.Server }

func (h harness) NewClient(t testing.TB) contracttest.Client {
	var n atomic.Int64
	dial := func(ctx context.Context) (redis.Conn, error) {
		addr := h.Addrs()[0]
		if h.Kind() == "sentinel" {
			var err error
			if addr, err = sentinelMaster(ctx, h.Addrs()); err != nil {
				return nil, err
			}
		}
		c, err := redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(time.Second))
		if err != nil {
			return nil, err
		}
		return countConn{c, &n}, nil
	}
	p := &redis.Pool{DialContext: dial, MaxIdle: 64}
	t.Cleanup(func() { p.Close() })
	return contracttest.Client{Backend: redigo.New(p, redigo.WithHealthCheck(time.Second)), Close: p.Close, Commands: n.Load}
}

// Unreachable is a pool of a loopback address nobody listens on.
func (h harness) Unreachable(t testing.TB) backend.Backend {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }}
	t.Cleanup(func() { p.Close() })
	return redigo.New(p)
}

// sentinelMaster asks the sentinels, in turn, for the master's address.
func sentinelMaster(ctx context.Context, sentinels []string) (string, error) {
	var last error
	for _, s := range sentinels {
		c, err := redis.DialContext(ctx, "tcp", s, redis.DialConnectTimeout(time.Second))
		if err != nil {
			last = err
			continue
		}
		a, err := redis.Strings(redis.DoContext(c, ctx, "SENTINEL", "get-master-addr-by-name", contracttest.SentinelMaster))
		c.Close()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1]), nil
		}
		last = fmt.Errorf("sentinel %s: %v %w", s, a, err)
	}
	return "", last
}

// countConn counts the commands sent on a connection (each EVALSHA and
// EVAL once, pipelined ones included; a subscription's connection too).
type countConn struct {
	redis.Conn
	n *atomic.Int64
}

func (c countConn) count(cmd string) {
	if cmd != "" {
		c.n.Add(1)
	}
}

func (c countConn) Do(cmd string, args ...any) (any, error) {
	c.count(cmd)
	return c.Conn.Do(cmd, args...)
}

func (c countConn) Send(cmd string, args ...any) error {
	c.count(cmd)
	return c.Conn.Send(cmd, args...)
}

func (c countConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.count(cmd)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c countConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.count(cmd)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c countConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c countConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

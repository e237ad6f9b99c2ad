package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

func smallDemo(driver string) demoConfig {
	return demoConfig{target: target{driver: driver}, traders: 12, clients: 3, items: 30,
		checkout: 2, duration: 700 * time.Millisecond, seed: 7}
}

// The demo keeps its books straight on the embedded server, through every
// driver.
func TestDemoEmbedded(t *testing.T) {
	for _, driver := range []string{"goredis", "rueidis", "valkey", "redigo"} {
		t.Run(driver, func(t *testing.T) {
			rep, err := demo(context.Background(), smallDemo(driver))
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) > 0 {
				t.Fatalf("violations: %v", rep.Violations)
			}
			if rep.Purchases == 0 || rep.Listings == 0 || rep.Repricings == 0 {
				t.Errorf("nothing happened: %+v", rep)
			}
			if rep.CheckoutPeak > int32(rep.CheckoutLimit) {
				t.Errorf("checkout peak %d over %d", rep.CheckoutPeak, rep.CheckoutLimit)
			}
		})
	}
}

// Against a real redis-server, and leaving no key behind.
func TestDemoRedisServer(t *testing.T) {
	s := redistest.Start(t)
	cfg := smallDemo("goredis")
	cfg.addr = s.Addr
	rep, err := demo(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 {
		t.Fatalf("violations: %v", rep.Violations)
	}
	n, err := s.Do(context.Background(), "DBSIZE")
	if err != nil || n != int64(0) {
		t.Errorf("%v keys left behind (%v)", n, err)
	}
}

// Without the locks the same trading breaks the books, and the checks say
// so: they are not checks that cannot fail.
func TestDemoCatchesUnlockedTrading(t *testing.T) {
	cfg := smallDemo("goredis")
	cfg.unlocked = true
	cfg.items = 6 // few items: many buyers race for each
	cfg.duration = 1500 * time.Millisecond
	rep, err := demo(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) == 0 {
		t.Fatalf("unlocked trading passed the checks: %+v", rep)
	}
	t.Logf("caught: %v", rep.Violations[0])
}

func TestCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	ctx := context.Background()
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"help"}, 0, "demo"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"demo", "-traders", "1"}, 2, "-traders must be at least 2"},
		{[]string{"demo", "-driver", "nosuchdriver"}, 2, `-driver "nosuchdriver"`},
		{[]string{"demo", "-bogus"}, 2, "flag provided but not defined"},
		{[]string{"demo", "extra"}, 2, "unexpected argument"},
	}
	for _, c := range cases {
		out.Reset()
		errOut.Reset()
		if code := run(ctx, c.args, &out, &errOut); code != c.code || !strings.Contains(errOut.String()+out.String(), c.want) {
			t.Errorf("latchctl %v: exit %d, output %q; want exit %d mentioning %q", c.args, code, errOut.String(), c.code, c.want)
		}
	}
	// A real run, as JSON.
	out.Reset()
	code := run(ctx, []string{"demo", "-json", "-duration", "500ms", "-traders", "6", "-items", "20"}, &out, &errOut)
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 0 || rep.Purchases == 0 {
		t.Errorf("demo -json: exit %d, %v, %s %s", code, err, out.String(), errOut.String())
	}
}

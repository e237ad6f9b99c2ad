package kit_test

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend/goredis"
	"github.com/latchkit/latchkit/internal/testrig/apicover"
	"github.com/latchkit/latchkit/kit"
	"github.com/latchkit/latchkit/primitives"
)

// testFS is a primitive's scripts: one good, and the mistakes MustLoad
// refuses.
var testFS = fstest.MapFS{
	"lua/ok.lua":      {Data: []byte("--@uses now_ms\n--@keys a\nreturn {1, now_ms() + #KEYS[1]}\n")},
	"lua/undecl.lua":  {Data: []byte("--@keys a\nreturn redis.call('GET', KEYS[2])\n")},
	"lua/unknown.lua": {Data: []byte("--@keys a nope\nreturn 1\n")},
	"lua/publish.lua": {Data: []byte("--@keys a\nredis.call('PUBLISH', ARGV[1], 'x')\nreturn 1\n")},
	"lua/block.lua":   {Data: []byte("--@uses no_such_block\n--@keys a\nreturn 1\n")},
}

var testLayout = kit.Layout{Kind: "test_kind", Keys: []kit.Key{{Name: "a", Suffix: ":t", Type: "string"}}}

// TestNoPanicOnBadInput: every exported function and method of kit,
// given bad input (nil and zero receivers, nil contexts, nil and bad
// layouts and scripts, closed Clients), returns an error matching
// latchkit.ErrInvalid (ErrClosed for a closed Client) and never panics;
// MustLoad panics, as its name says, on a script with a mistake, naming
// it.
func TestNoPanicOnBadInput(t *testing.T) {
	m := miniredis.RunT(t)
	newClient := func(opts ...kit.ClientOption) (*kit.Client, error) {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		return kit.NewClient(goredis.New(rdb), opts...)
	}
	live, _ := newClient()
	closed, _ := newClient()
	defer live.Close(context.Background())
	closed.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var nilCtx context.Context
	inv, clo := []error{latchkit.ErrInvalid}, []error{latchkit.ErrClosed}
	ok := kit.MustLoad(testFS, &testLayout, "ok")
	other := kit.Layout{Kind: "other", Keys: []kit.Key{{Name: "a", Type: "hash"}}}
	foreign := kit.MustLoad(testFS, &other, "ok")
	site, err := kit.NewSite(live, &testLayout, "s", primitives.WithPrefix("np:"))
	if err != nil {
		t.Fatal(err)
	}
	later, _ := newClient()
	gone, err := kit.NewSite(later, &testLayout, "s", primitives.WithPrefix("np:"))
	if err != nil {
		t.Fatal(err)
	}
	later.Close(ctx)
	var nilSite *kit.Site
	acq := kit.Acquisition{Op: "Take", Try: true, Attempt: ok}

	apicover.Check(t, ".", map[string]func(t *testing.T){
		"NewClient": func(t *testing.T) {
			apicover.Must(t, "NewClient(nil)", func() error { _, err := kit.NewClient(nil); return err }, inv...)
			apicover.Calm(t, "NewClient(nil option)", func() error {
				c, err := newClient(nil)
				if err == nil {
					c.Close(ctx)
				}
				return err
			})
		},
		"Client.Close": func(t *testing.T) {
			apicover.Must(t, "(*Client)(nil).Close", func() error { return (*kit.Client)(nil).Close(ctx) }, inv...)
			apicover.Must(t, "(&Client{}).Close", func() error { return (&kit.Client{}).Close(ctx) }, inv...)
			c, _ := newClient()
			apicover.Must(t, "Close(nil ctx)", func() error { return c.Close(nilCtx) }, inv...)
			if err := c.Close(ctx); err != nil {
				t.Errorf("Close after a refused Close(nil): %v", err)
			}
			if err := apicover.Calm(t, "Close of a closed Client", func() error { return closed.Close(ctx) }); err != nil {
				t.Errorf("Close of a closed Client: %v, want what the first returned (nil)", err)
			}
		},
		"Client.Identity": func(t *testing.T) {
			apicover.Calm(t, "(*Client)(nil).Identity", func() error { (*kit.Client)(nil).Identity(); return nil })
			apicover.Calm(t, "(&Client{}).Identity", func() error { (&kit.Client{}).Identity(); return nil })
		},
		"WithClientName": func(t *testing.T) {
			for _, n := range []string{strings.Repeat("n", 257), "\xff"} {
				apicover.Must(t, "NewClient(WithClientName(bad))", func() error { _, err := newClient(kit.WithClientName(n)); return err }, inv...)
			}
		},
		"WithWakeUps": func(t *testing.T) {
			for _, on := range []bool{false, true} {
				apicover.Calm(t, "NewClient(WithWakeUps(on))", func() error {
					c, err := newClient(kit.WithWakeUps(on))
					if err == nil {
						c.Close(ctx)
					}
					return err
				})
			}
		},
		"MustLoad": func(t *testing.T) {
			for name, want := range map[string]string{
				"undecl": "reads KEYS[2]", "unknown": `declares key "nope"`, "publish": "PUBLISH must be redis.pcall",
				"block": "no_such_block", "missing": "file does not exist",
			} {
				func() {
					defer func() {
						if r, _ := recover().(string); !strings.Contains(r, want) {
							t.Errorf("MustLoad(%s) panicked with %q, want one saying %q", name, r, want)
						}
					}()
					kit.MustLoad(testFS, &testLayout, name)
				}()
			}
			func() {
				defer func() {
					if r, _ := recover().(string); !strings.Contains(r, "a layout needs") {
						t.Errorf("MustLoad(nil layout) panicked with %q", r)
					}
				}()
				kit.MustLoad(testFS, nil, "ok")
			}()
		},
		"NewSite": func(t *testing.T) {
			bads := []*kit.Layout{nil, {}, {Kind: "k"}, {Kind: "k", Keys: []kit.Key{{Name: "a", Type: "stream"}}},
				{Kind: "k", Keys: []kit.Key{{Name: "a", Type: "string"}, {Name: "a", Suffix: ":b", Type: "string"}}},
				{Kind: "k", Keys: []kit.Key{{Name: "a", Suffix: ":{x}", Type: "string"}}}}
			for _, l := range bads {
				apicover.Must(t, "NewSite(bad layout)", func() error { _, err := kit.NewSite(live, l, "s"); return err }, inv...)
			}
			apicover.Must(t, "NewSite(nil Client)", func() error { _, err := kit.NewSite(nil, &testLayout, "s"); return err }, inv...)
			apicover.Must(t, "NewSite(zero Client)", func() error { _, err := kit.NewSite(&kit.Client{}, &testLayout, "s"); return err }, inv...)
			apicover.Must(t, "NewSite(closed Client)", func() error { _, err := kit.NewSite(closed, &testLayout, "s"); return err }, clo...)
			apicover.Must(t, "NewSite(empty name)", func() error { _, err := kit.NewSite(live, &testLayout, ""); return err }, inv...)
			apicover.Must(t, "NewSite(bad option)", func() error {
				_, err := kit.NewSite(live, &testLayout, "s", primitives.WithPrefix(""))
				return err
			}, inv...)
			apicover.Calm(t, "NewSite(nil option)", func() error { _, err := kit.NewSite(live, &testLayout, "s", nil); return err })
		},
		"Site.Name": func(t *testing.T) {
			apicover.Calm(t, "(*Site)(nil).Name", func() error { nilSite.Name(); return nil })
		},
		"Site.Key": func(t *testing.T) {
			apicover.Calm(t, "(*Site)(nil).Key", func() error { nilSite.Key("a"); return nil })
			if k := site.Key("nope"); k != "" {
				t.Errorf("Key of a name the layout has not: %q", k)
			}
		},
		"Site.Eval": func(t *testing.T) {
			apicover.Must(t, "(*Site)(nil).Eval", func() error { _, err := nilSite.Eval(ctx, "op", ok); return err }, inv...)
			apicover.Must(t, "Eval(nil ctx)", func() error { _, err := site.Eval(nilCtx, "op", ok); return err }, inv...)
			apicover.Must(t, "Eval(nil script)", func() error { _, err := site.Eval(ctx, "op", nil); return err }, inv...)
			apicover.Must(t, "Eval(another layout's script)", func() error { _, err := site.Eval(ctx, "op", foreign); return err }, inv...)
			apicover.Must(t, "Eval on a closed Client", func() error { _, err := gone.Eval(ctx, "op", ok); return err }, clo...)
		},
		"Site.Do": func(t *testing.T) {
			apicover.Must(t, "(*Site)(nil).Do", func() error { _, err := nilSite.Do(ctx, "op", ok); return err }, inv...)
			apicover.Must(t, "Do(nil ctx)", func() error { _, err := site.Do(nilCtx, "op", ok); return err }, inv...)
			apicover.Must(t, "Do(nil script)", func() error { _, err := site.Do(ctx, "op", nil); return err }, inv...)
			apicover.Must(t, "Do(another layout's script)", func() error { _, err := site.Do(ctx, "op", foreign); return err }, inv...)
			apicover.Must(t, "Do on a closed Client", func() error { _, err := gone.Do(ctx, "op", ok); return err }, clo...)
		},
		"Site.Wait": func(t *testing.T) {
			open := func(context.Context) error { return nil }
			apicover.Must(t, "(*Site)(nil).Wait", func() error { return nilSite.Wait(ctx, "Wait", open) }, inv...)
			apicover.Must(t, "Wait(nil ctx)", func() error { return site.Wait(nilCtx, "Wait", open) }, inv...)
			apicover.Must(t, "Wait(nil check)", func() error { return site.Wait(ctx, "Wait", nil) }, inv...)
			apicover.Must(t, "Wait on a closed Client", func() error { return gone.Wait(ctx, "Wait", open) }, clo...)
		},
		"Site.Acquire": func(t *testing.T) {
			apicover.Must(t, "(*Site)(nil).Acquire", func() error { _, err := nilSite.Acquire(ctx, acq); return err }, inv...)
			apicover.Must(t, "Acquire(nil ctx)", func() error { _, err := site.Acquire(nilCtx, acq); return err }, inv...)
			apicover.Must(t, "Acquire(no attempt)", func() error { _, err := site.Acquire(ctx, kit.Acquisition{Op: "Take"}); return err }, inv...)
			apicover.Must(t, "Acquire(another layout's give-back)", func() error {
				_, err := site.Acquire(ctx, kit.Acquisition{Op: "Take", Attempt: ok, GiveBack: foreign})
				return err
			}, inv...)
			apicover.Must(t, "Acquire(a holder of another layout)", func() error {
				_, err := site.Acquire(ctx, kit.Acquisition{Op: "Lock", Attempt: ok, Holder: &kit.Holder{Extend: ok, Release: foreign, TTL: ok}})
				return err
			}, inv...)
			apicover.Must(t, "Acquire(a holder without scripts)", func() error {
				_, err := site.Acquire(ctx, kit.Acquisition{Op: "Lock", Attempt: ok, Holder: &kit.Holder{}})
				return err
			}, inv...)
			apicover.Must(t, "Acquire on a closed Client", func() error { _, err := gone.Acquire(ctx, acq); return err }, clo...)
		},
	})
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("bad input wrote %v", keys)
	}
}

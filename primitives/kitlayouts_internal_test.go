package primitives

import (
	"testing"

	"github.com/latchkit/latchkit/internal/keyspace"
	pkit "github.com/latchkit/latchkit/kit"
)

// The built-ins written on kit lay out their keys and channel as
// keyspace's layouts say, which latchctl and the other tools read: the
// scripted keys in order, and the release channel.
func TestKitLayoutsAreKeyspaces(t *testing.T) {
	_, b := newMiniBackend(t)
	cl := testClient(t, b)
	const p, n = "p:", "n{a}%"
	site := func(s *pkit.Site, err error) *pkit.Site {
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		kit  *pkit.Layout
		ks   keyspace.Layout
		site *pkit.Site
	}{
		{&latchLayout, keyspace.LatchLayout, site(pkit.NewSite(cl, &latchLayout, n, WithPrefix(p)))},
		{&semLayout, keyspace.SemLayout, site(pkit.NewSite(cl, &semLayout, n, WithPrefix(p)))},
		{&rwLayout, keyspace.RWLayout, site(pkit.NewSite(cl, &rwLayout, n, WithPrefix(p)))},
	} {
		want := c.ks.KeysOf(p, n)[:c.ks.Scripted()]
		if len(want) != len(c.kit.Keys) {
			t.Errorf("%s: %d scripted keys in keyspace, %d in the kit layout", c.kit.Kind, len(want), len(c.kit.Keys))
			continue
		}
		for i, k := range c.kit.Keys {
			if got := c.site.Key(k.Name); got != want[i] {
				t.Errorf("%s: key %s is %q, keyspace says %q", c.kit.Kind, k.Name, got, want[i])
			}
		}
		if ch := c.ks.Channel(p, n); ch != keyspace.KeyBase(p, n)+c.kit.Channel {
			t.Errorf("%s: channel suffix %q, keyspace's channel %q", c.kit.Kind, c.kit.Channel, ch)
		}
	}
}

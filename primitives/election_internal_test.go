package primitives

import (
	"fmt"
	"testing"
	"time"
)

// TestSeatView: what an observer reports from reads of the seat and
// messages that may arrive out of step with them.
func TestSeatView(t *testing.T) {
	now := time.Now()
	l := func(v string, f int64) seatNews {
		return seatNews{info: LeaderInfo{Value: v, Fence: f}, left: time.Second, fence: f}
	}
	e := func(f int64) seatNews { return seatNews{fence: f} }
	type step struct {
		read    *LeaderInfo // a read (counter: the fence of the latest leadership)
		counter int64
		news    seatNews
	}
	rd := func(v string, f, counter int64) step {
		return step{read: &LeaderInfo{Value: v, Fence: f}, counter: counter}
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  string // what is reported, in order
	}{
		{"a read, then changes in order", []step{rd("", 0, 4), {news: l("a", 5)}, {news: e(5)}, {news: l("b", 6)}},
			"[{ 0} {a 5} { 0} {b 6}]"},
		// Leader 5 came and went before the read (which saw an empty seat
		// and counter 5); its messages arrive after the read's reply.
		{"old news after a read of an empty seat", []step{rd("", 0, 5), {news: l("a", 5)}, {news: e(5)}},
			"[{ 0}]"},
		{"old news after a read of the next leader", []step{rd("b", 6, 6), {news: l("a", 5)}, {news: e(5)}, {news: l("b", 6)}},
			"[{b 6}]"},
		{"a hand-over: the next leader without an empty seat", []step{rd("a", 5, 5), {news: l("b", 6)}, {news: e(5)}},
			"[{a 5} {b 6}]"},
		{"an emptied seat is news about the last leader only", []step{rd("a", 5, 5), {news: e(4)}, {news: e(5)}, {news: e(5)}},
			"[{a 5} { 0}]"},
		{"a read that changes nothing reports nothing", []step{rd("a", 5, 5), rd("a", 5, 5), {news: l("a", 5)}},
			"[{a 5}]"},
		{"a re-read after lost messages", []step{rd("a", 5, 5), rd("c", 7, 7), {news: l("b", 6)}, {news: e(6)}},
			"[{a 5} {c 7}]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v seatView
			var got []LeaderInfo
			for _, s := range tc.steps {
				var info LeaderInfo
				var changed bool
				if s.read != nil {
					info, changed = v.read(*s.read, time.Second, s.counter, now)
				} else {
					info, changed = v.news(s.news, now)
				}
				if changed {
					got = append(got, info)
				}
			}
			if g := fmt.Sprint(got); g != tc.want {
				t.Errorf("reported %s, want %s", g, tc.want)
			}
		})
	}
}

// TestParseSeatNews: the observers' messages, and what is not one.
func TestParseSeatNews(t *testing.T) {
	for in, want := range map[string]string{
		"L12 300 pod-7":      "pod-7 12 300ms 12 true",
		"L12 300 pod 7 west": "pod 7 west 12 300ms 12 true",
		"E12":                " 0 0s 12 true",
		"L12 300 ":           "false",
		"L12":                "false",
		"Lx 1 v":             "false",
		"E":                  "false",
		"1":                  "false",
	} {
		n, ok := parseSeatNews(in)
		got := "false"
		if ok {
			got = fmt.Sprintf("%s %d %v %d true", n.info.Value, n.info.Fence, n.left, n.fence)
		}
		if got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
}

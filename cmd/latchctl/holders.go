package main

// Who holds a primitive: every lease's token begins with the id of the
// Client that minted it, and that Client keeps a record of who it is (its
// name, host, pid and start) under the prefix, prefix + "client:" + id
// (see keyspace.ClientRecord). inspect, list and top read the records of
// the tokens they show and print each holder's and waiter's Client, and,
// from a holder's fence (the server's clock in µs at the grant), since
// when it holds and for how long.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"
)

// clients are the records of the Clients whose ids were looked up: nil
// for an id without a record (the Client wrote none yet, its record
// expired, or the token is of an older version).
type clients map[string]*keyspace.ClientRecord

// lookup reads the record of every token's Client not yet known, one GET
// each (records live under their own keys, in any Cluster slot).
func (cs clients) lookup(ctx context.Context, do func(context.Context, ...string) (any, error), prefix string, tokens []string) error {
	for _, t := range tokens {
		id, ok := keyspace.TokenClient(t)
		if _, known := cs[id]; !ok || known {
			continue
		}
		v, err := do(ctx, "GET", keyspace.ClientRecordKey(prefix, id))
		if err != nil {
			return fmt.Errorf("read the record of client %s: %w", id, err)
		}
		cs[id] = nil
		if s, ok := v.(string); ok {
			if r, err := keyspace.ParseClientRecord(s); err == nil {
				cs[id] = &r
			}
		}
	}
	return nil
}

// field is what is shown of token's Client: "client=NAME host=H pid=P",
// or "client=? id=ID" when it has no record; "" for a token that carries
// no Client id.
func (cs clients) field(token string) string {
	id, ok := keyspace.TokenClient(entryToken(token))
	if !ok {
		return ""
	}
	r := cs[id]
	if r == nil {
		return "client=? id=" + id
	}
	return "client=" + printable(r.Name) + " host=" + printable(r.Host) + " pid=" + strconv.Itoa(r.PID)
}

// name is the Client's name alone, for top's columns ("?" without a
// record, "" for a token without an id).
func (cs clients) name(token string) string {
	id, ok := keyspace.TokenClient(entryToken(token))
	if !ok {
		return ""
	}
	if r := cs[id]; r != nil {
		return printable(r.Name) + "@" + printable(r.Host) + ":" + strconv.Itoa(r.PID)
	}
	return "?" + id
}

// entryToken is the token of a queue entry ("token inbox" in a Mutex's or
// Election's queue) or a token as is.
func entryToken(e string) string {
	t, _, _ := strings.Cut(e, " ")
	return t
}

// minFenceUs is the least fence read as a time: the server's clock in µs
// from 2001 on. A fence below it is a counter of an older version.
const minFenceUs = 1_000_000_000_000_000

// grantTime is the server time of a grant whose fence is f: the fence is
// the server's clock in µs at the grant (raised past it only when two
// grants fall in one µs, or for a Redlock's proposal, up to a second
// ahead). ok is false for a fence that is not a time.
func grantTime(f string) (ms int64, ok bool) {
	n, err := strconv.ParseInt(f, 10, 64)
	if err != nil || n < minFenceUs {
		return 0, false
	}
	return n / 1000, true
}

// sinceField is "since=<server time of the grant> held=<for how long>"
// for a holder whose fence is fence, now being the server's time in ms;
// "" when the fence is not a time.
func sinceField(now int64, fence string) string {
	at, ok := grantTime(fence)
	if !ok {
		return ""
	}
	return "since=" + time.UnixMilli(at).UTC().Format("2006-01-02T15:04:05.000Z") + " held=" + heldFor(now-at)
}

// heldFor formats a hold of ms milliseconds: to the millisecond under a
// minute, to the second after.
func heldFor(ms int64) string {
	d := time.Duration(max(ms, 0)) * time.Millisecond
	if d >= time.Minute {
		d = d.Round(time.Second)
	}
	return d.String()
}

// tokensOf are every token-like string in a view's keys: the first word of
// each string value and sorted-set member, and each hash field (lookup
// keeps those that carry a Client id).
func (v view) tokens() []string {
	var out []string
	for _, st := range v.states {
		if st.val != "" {
			out = append(out, entryToken(st.val))
		}
		for _, m := range st.zset {
			out = append(out, entryToken(m.token))
		}
		for f := range st.hash {
			out = append(out, f)
		}
	}
	return out
}

// holder is one holder of a primitive: its token and its grant's fence.
type holder struct {
	token, fence string
}

// people are the holders and waiters of a kind as its keys show them (k),
// for list and top: holders with their fences, waiters' tokens in queue
// order (a Semaphore's waiters are not in Redis: none).
func mutexPeople(k func(string) keyState) (hs []holder, ws []string) {
	if l, h := k("").mutexLock(); h != "" {
		hs = append(hs, holder{h, strconv.FormatInt(l.Fence, 10)})
	}
	for _, m := range k(":q").zset {
		ws = append(ws, entryToken(m.token))
	}
	return hs, ws
}

func rwPeople(k func(string) keyState) (hs []holder, ws []string) {
	if w := k(":writer"); w.typ == "string" {
		token, fence := splitLock(w.val)
		hs = append(hs, holder{token, fence})
	}
	readers, fences := holdersOf(k(":readers"), 0)
	for _, m := range readers.zset {
		hs = append(hs, holder{m.token, fences[m.token]})
	}
	for _, m := range k(":waiting").zset {
		ws = append(ws, m.token)
	}
	return hs, ws
}

func semPeople(k func(string) keyState) (hs []holder, _ []string) {
	holders, fences := holdersOf(k(""), 0)
	for _, m := range holders.zset {
		hs = append(hs, holder{m.token, fences[m.token]})
	}
	return hs, nil
}

func fairPeople(k func(string) keyState) (hs []holder, ws []string) {
	holders := k(":holders").hash
	for _, m := range k(":queue").zset {
		if f, ok := holders[m.token]; ok {
			hs = append(hs, holder{m.token, f})
		} else {
			ws = append(ws, m.token)
		}
	}
	return hs, ws
}

func noPeople(func(string) keyState) ([]holder, []string) { return nil, nil }

// peopleField is list's summary of a primitive's holders and waiters:
// "holders: CLIENT since TIME (held D), ...; waiting: CLIENT, ..."; ""
// when it has neither.
func peopleField(now int64, hs []holder, ws []string, who clients) string {
	var parts []string
	if len(hs) > 0 {
		var b strings.Builder
		b.WriteString("holders: ")
		for i, h := range hs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(who.name(h.token))
			if at, ok := grantTime(h.fence); ok {
				b.WriteString(" since " + time.UnixMilli(at).UTC().Format("2006-01-02T15:04:05.000Z") + " (held " + heldFor(now-at) + ")")
			}
		}
		parts = append(parts, b.String())
	}
	if len(ws) > 0 {
		names := make([]string, len(ws))
		for i, w := range ws {
			names[i] = who.name(w)
		}
		parts = append(parts, "waiting: "+strings.Join(names, ", "))
	}
	return strings.Join(parts, "; ")
}

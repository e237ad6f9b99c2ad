package kit

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
)

// recorder is a backend that notes every Eval (the script's first word
// after redis.call, its keys and args) and answers nil.
type recorder struct {
	backend.Backend
	mu    sync.Mutex
	calls []string
}

func (r *recorder) Eval(_ context.Context, s *backend.Script, keys, args []string) (backend.Value, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmd, _, _ := strings.Cut(strings.TrimPrefix(s.Source(), "return redis.call('"), "'")
	r.calls = append(r.calls, cmd+" "+strings.Join(keys, " ")+" "+strings.Join(args, " "))
	return nil, nil
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func identityConfig(t *testing.T, name string) (*Config, *recorder) {
	t.Helper()
	r := &recorder{}
	cl, err := NewClient(r, ClientOptions{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close(context.Background()) })
	return &Config{Cl: cl, Cls: []*Client{cl}, Prefix: "p:"}, r
}

// TestTokensLeadToTheirClient (issue 41, item 1): every token a Client
// mints is 32 hex digits, its Client's id then random digits; the ids of
// two Clients differ, and no token repeats.
func TestTokensLeadToTheirClient(t *testing.T) {
	a, _ := identityConfig(t, "a")
	b, _ := identityConfig(t, "")
	ida, idb := a.Cl.Identity(), b.Cl.Identity()
	if ida.ID == idb.ID || len(ida.ID) != keyspace.ClientIDHex {
		t.Fatalf("ids %q and %q", ida.ID, idb.ID)
	}
	if ida.Name != "a" || idb.Name != idb.Host+":"+itoa(idb.PID) || idb.PID == 0 || idb.Started.IsZero() {
		t.Errorf("identities %+v and %+v", ida, idb)
	}
	seen := map[string]bool{}
	for i := 0; i < 10000; i++ {
		for _, c := range []*Config{a, b} {
			tok := c.NewToken()
			id, ok := keyspace.TokenClient(tok)
			if !ok || id != c.Cl.Identity().ID || seen[tok] {
				t.Fatalf("token %q of client %s: id %q %v, seen before %v", tok, c.Cl.Identity().ID, id, ok, seen[tok])
			}
			seen[tok] = true
		}
	}
	if _, err := NewClient(&recorder{}, ClientOptions{Name: strings.Repeat("x", MaxClientName+1)}); err == nil {
		t.Error("a name of 257 bytes was accepted")
	}
}

// TestRecordWrittenInTheBackground (issue 41, item 1): minting tokens sends
// nothing; a Client still busy ClientRecordDelay after it began writes its
// record once (its identity, expiring after ClientRecordTTL), and Close
// deletes it. A Client used once, idle a second later, writes nothing.
func TestRecordWrittenInTheBackground(t *testing.T) {
	busy, r := identityConfig(t, "worker-7")
	if err := busy.Cl.begin(); err != nil { // a call in flight, as a waiting Lock is
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		busy.NewToken()
	}
	if c := r.seen(); len(c) != 0 {
		t.Fatalf("minting sent %v", c)
	}
	idle, ri := identityConfig(t, "once")
	idle.NewToken()

	key := keyspace.ClientRecordKey("p:", busy.Cl.Identity().ID)
	want := "SET " + key + " " + busy.Cl.id.rec + " " + itoa(int(keyspace.ClientRecordTTL.Milliseconds()))
	deadline := time.Now().Add(5 * time.Second)
	for len(r.seen()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a second write would come now
	if c := r.seen(); len(c) != 1 || c[0] != want {
		t.Fatalf("writes %q, want one: %q", c, want)
	}
	rec, err := keyspace.ParseClientRecord(busy.Cl.id.rec)
	if err != nil || rec.Name != "worker-7" || rec.PID != busy.Cl.Identity().PID {
		t.Errorf("record %+v, %v", rec, err)
	}
	busy.Cl.end()
	if err := busy.Cl.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := r.seen(); len(c) != 2 || c[1] != "DEL "+key+" " {
		t.Errorf("after Close: %q, want the record deleted", c)
	}
	if c := ri.seen(); len(c) != 0 {
		t.Errorf("a Client used once wrote %q", c)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

package kit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/latchkit/latchkit"
	"github.com/latchkit/latchkit/backend"
	"github.com/latchkit/latchkit/internal/keyspace"
	"github.com/latchkit/latchkit/internal/pubsub"
)

// A Client's identity, and how a lease's token leads back to it.
//
// Every Client has a random id of keyspace.ClientIDHex hex digits (48
// bits), and every token it mints for an acquisition is that id followed
// by 80 random bits (NewToken): 32 hex digits, as tokens always were. The
// Client's record, keyspace.ClientRecordKey(prefix, id), says who it is
// (its name, host, pid and start), so that latchctl can name the holder
// of any lease from the lease's token alone. Nothing is written per
// acquisition: the record is written by one goroutine of the Client, in
// the background, once the Client has been in use for
// keyspace.ClientRecordDelay (a Client used once and closed at once writes
// nothing), rewritten every keyspace.ClientRecordRefresh while the Client
// acquires, holds or waits, kept keyspace.ClientRecordTTL from each write,
// and deleted by Close. The acquisition's own cost is two atomic loads.

// ClientOptions are a Client's settings (primitives.ClientOption).
type ClientOptions struct {
	// Name names the Client in its record: what latchctl shows as the
	// holder's client. Empty: host:pid.
	Name string
	// Poll: the Client never subscribes; its waiters poll (see Hub).
	Poll bool
}

// MaxClientName is the longest Client name, in bytes.
const MaxClientName = 256

// checkName says why name is refused as a Client's name ("" if it is not).
func checkName(name string) string {
	switch {
	case len(name) > MaxClientName:
		return fmt.Sprintf("client name of %d bytes, above the longest, %d", len(name), MaxClientName)
	case !utf8.ValidString(name):
		return "client name is not valid UTF-8"
	}
	return ""
}

// Identity is who a Client is: its id (the first digits of every token it
// mints) and its record.
type Identity struct {
	ID string
	keyspace.ClientRecord
}

// identity is a Client's identity and the state of its record.
type identity struct {
	Identity
	prefix [keyspace.ClientIDHex]byte // ID, for NewToken
	rec    string                     // the record, encoded

	// used: an acquisition began since the loop last looked. pending:
	// the loop is awake for the uses so far (set by the use that wakes
	// it, cleared by the loop when it goes back to sleep): a use that
	// finds it set does nothing more.
	used, pending atomic.Bool
	poke          chan struct{} // wakes the loop (cap 1)
	spawn         sync.Once     // starts the loop, at the first use

	// keep are the records the Client keeps, one per prefix its
	// primitives use (a Redlock's other Clients also keep its first
	// Client's): an immutable slice, replaced under keepMu.
	keep   atomic.Pointer[[]record]
	keepMu sync.Mutex
}

// record is one record a Client keeps: owner's identity under prefix.
type record struct {
	owner  *Client
	prefix string
	key    string
}

// newIdentity makes a Client's identity: a random id, and o.Name or
// host:pid.
func newIdentity(o ClientOptions) (*identity, error) {
	if why := checkName(o.Name); why != "" {
		return nil, fmt.Errorf("%w: %s", latchkit.ErrInvalid, why)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	pid := os.Getpid()
	name := o.Name
	if name == "" {
		name = host + ":" + strconv.Itoa(pid)
	}
	var b [keyspace.ClientIDHex / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	id := &identity{poke: make(chan struct{}, 1)}
	id.ID = hex.EncodeToString(b[:])
	copy(id.prefix[:], id.ID)
	id.ClientRecord = keyspace.ClientRecord{Name: name, Host: host, PID: pid, Started: time.Now().UTC().Truncate(time.Millisecond)}
	id.rec = id.ClientRecord.Encode()
	return id, nil
}

// Identity is who c is.
func (c *Client) Identity() Identity { return c.id.Identity }

// token mints a token of c: its id, then 80 random bits, in hex.
func (id *identity) token() string {
	var r [(keyspace.TokenHex - keyspace.ClientIDHex) / 2]byte
	_, _ = rand.Read(r[:])
	var t [keyspace.TokenHex]byte
	copy(t[:], id.prefix[:])
	hex.Encode(t[keyspace.ClientIDHex:], r[:])
	return string(t[:])
}

// NewToken mints the token of one acquisition of the primitive: its
// Client's id and 80 random bits (see identity). It notes the use on every
// Client of the primitive, which keeps the minting Client's record under
// the primitive's prefix (a Redlock's other Clients keep it on their
// instances).
func (c *Config) NewToken() string {
	owner := c.Cl
	for _, cl := range c.Cls {
		cl.use(owner, c.Prefix)
	}
	return owner.id.token()
}

// use notes an acquisition on c minted by owner's id under prefix: c keeps
// owner's record there, and its record loop wakes if it sleeps. Once the
// record is kept and the loop awake, it is two atomic loads and a scan of
// (usually) one record.
func (c *Client) use(owner *Client, prefix string) {
	id := c.id
	// used first: a loop that add starts must find it set, and clear it
	// (the use that wakes the loop does not count as being busy).
	if !id.used.Load() {
		id.used.Store(true)
	}
	if p := id.keep.Load(); p == nil || !keeps(*p, owner, prefix) {
		id.add(c, owner, prefix)
	}
	if !id.pending.Load() && id.pending.CompareAndSwap(false, true) {
		id.wake(c)
	}
}

func keeps(rs []record, owner *Client, prefix string) bool {
	for _, r := range rs {
		if r.owner == owner && r.prefix == prefix {
			return true
		}
	}
	return false
}

// add makes c keep owner's record under prefix, and wakes the loop to
// write it.
func (id *identity) add(c, owner *Client, prefix string) {
	id.keepMu.Lock()
	var rs []record
	if p := id.keep.Load(); p != nil {
		rs = *p
	}
	if !keeps(rs, owner, prefix) {
		rs = append(rs[:len(rs):len(rs)], record{owner, prefix, keyspace.ClientRecordKey(prefix, owner.id.ID)})
		id.keep.Store(&rs)
	}
	id.keepMu.Unlock()
	id.wake(c)
}

// wake starts the record loop, or wakes it.
func (id *identity) wake(c *Client) {
	id.spawn.Do(func() { c.Spawn(c.recordLoop) })
	select {
	case id.poke <- struct{}{}:
	default:
	}
}

// busy reports whether c has acquired since the loop last looked, holds a
// lease or has a call in flight; it clears the first.
func (c *Client) busy() bool {
	if c.id.used.Swap(false) {
		return true
	}
	if c.calls.Load()&^closedBit > 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.leases) > 0
}

// recordLoop is the goroutine that writes c's records: started by the
// first use, it waits keyspace.ClientRecordDelay, writes them if c is busy
// then, rewrites them every keyspace.ClientRecordRefresh (and when a
// record is added) while it stays busy, and goes back to sleep until the
// next use once c is idle (the records then expire). It ends when Close
// begins, deleting the records it wrote. bg is the Client's background
// context.
func (c *Client) recordLoop(bg context.Context) {
	written := false
	defer func() {
		if written {
			c.eachRecord(bg, recordDel, func(record) []string { return nil })
		}
	}()
	ttl := strconv.FormatInt(keyspace.ClientRecordTTL.Milliseconds(), 10)
	write := func() {
		c.eachRecord(bg, recordSet, func(r record) []string { return []string{r.owner.id.rec, ttl} })
		written = true
	}
	for {
		// The use that woke the loop does not count: only the Client's
		// being busy a ClientRecordDelay later does.
		c.id.used.Store(false)
		if pubsub.Sleep(c.ctx, keyspace.ClientRecordDelay) != nil {
			return
		}
		select {
		case <-c.id.poke: // the wake-up's, or a record's added meanwhile: written below
		default:
		}
		for c.busy() {
			write()
			t := time.NewTimer(keyspace.ClientRecordRefresh)
			for due := false; !due; {
				select {
				case <-c.ctx.Done():
					t.Stop()
					return
				case <-t.C:
					due = true
				case <-c.id.poke: // a record added: write it now
					write()
				}
			}
		}
		c.id.pending.Store(false)
		if c.id.used.Load() && c.id.pending.CompareAndSwap(false, true) {
			continue // a use came as it went to sleep
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.id.poke:
		}
	}
}

// The record scripts: one key, one command.
var (
	recordSet = backend.NewScript("return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])")
	recordDel = backend.NewScript("return redis.call('DEL', KEYS[1])")
)

// eachRecord runs s on every record c keeps, each call bounded by
// BackgroundTry. Failures are left alone: a record not written shows its
// leases' holder as unknown, one not deleted expires.
func (c *Client) eachRecord(bg context.Context, s *backend.Script, args func(record) []string) {
	p := c.id.keep.Load()
	if p == nil {
		return
	}
	for _, r := range *p {
		ctx, cancel := context.WithTimeout(bg, BackgroundTry)
		_, _ = c.b.Eval(ctx, s, []string{r.key}, args(r))
		cancel()
	}
}

package keyspace

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// A lease's token is 32 hex digits: the id of the Client that minted it
// (ClientIDHex digits, random per Client), then random digits of its own
// (80 bits per lease). latchctl reads the holder's Client from the first
// digits of a token and its identity from the Client's record.
const (
	TokenHex    = 32
	ClientIDHex = 12
)

// ClientRecordPart follows the prefix in a Client's record key:
// prefix + "client:" + id. It has no brace, so no primitive's key (always
// prefix + "{" + name + "}" ...) can be one.
const ClientRecordPart = "client:"

// ClientRecordKey is the key of the record of the Client whose id is id,
// under prefix (the prefix of the primitives whose leases it minted).
func ClientRecordKey(prefix, id string) string { return prefix + ClientRecordPart + id }

// IsClientRecord reports whether key is a Client's record under prefix.
func IsClientRecord(prefix, key string) bool {
	id, ok := strings.CutPrefix(key, prefix+ClientRecordPart)
	return ok && len(id) == ClientIDHex && isHex(id)
}

// WithoutClientRecords returns keys without the Clients' records among
// them, under any prefix: a record's key is a prefix, ClientRecordPart and
// an id, with no brace, where every key of a primitive has one. It filters
// keys in place (keys' array is reused).
func WithoutClientRecords(keys []string) []string {
	out := keys[:0]
	for _, k := range keys {
		i := strings.LastIndex(k, ClientRecordPart)
		if i >= 0 && !strings.Contains(k, "{") && IsClientRecord(k[:i], k) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// TokenClient returns the id of the Client that minted token: its first
// ClientIDHex digits, when token is a lease's token of TokenHex hex
// digits. (A token of another shape, from a version before the ids, yields
// ok false; an old random token yields an id no Client has, whose record
// does not exist.)
func TokenClient(token string) (id string, ok bool) {
	if len(token) != TokenHex || !isHex(token) {
		return "", false
	}
	return token[:ClientIDHex], true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// ClientRecord is what a Client's record holds: who it is. It is written
// as JSON.
type ClientRecord struct {
	Name    string    `json:"name"`    // primitives.WithClientName; by default host:pid
	Host    string    `json:"host"`    // os.Hostname
	PID     int       `json:"pid"`     // os.Getpid
	Started time.Time `json:"started"` // when the Client was made, by its own clock
}

// Encode is r as stored.
func (r ClientRecord) Encode() string {
	b, _ := json.Marshal(r) // strings, an int and a time: never fails
	return string(b)
}

// ParseClientRecord reads a record as Encode wrote it.
func ParseClientRecord(s string) (ClientRecord, error) {
	var r ClientRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return ClientRecord{}, fmt.Errorf("client record %q: %w", s, err)
	}
	return r, nil
}

// The life of a Client's record: written (in the background) once the
// Client has been in use for ClientRecordDelay, rewritten every
// ClientRecordRefresh while it holds or waits for anything or acquires,
// kept ClientRecordTTL from each write, deleted by Close.
const (
	ClientRecordDelay   = time.Second
	ClientRecordRefresh = 10 * time.Minute
	ClientRecordTTL     = 3 * ClientRecordRefresh
)

// OfPrimitive reports whether a script's keys are a primitive's (the first
// carries a name's hash tag), not a Client's record (written in the
// background once the Client has been busy for a second): what a test
// that stalls, or loses the reply of, "the next script" of an acquisition
// means by it.
func OfPrimitive(keys []string) bool { return len(keys) > 0 && strings.Contains(keys[0], "{") }

package keyspace

import (
	"slices"
	"testing"
)

// TestWithoutClientRecords: a Client's record is dropped under any prefix;
// a primitive's key (it always has a brace) is kept, even one whose name
// looks like a record, and so is a record-like key with a bad id.
func TestWithoutClientRecords(t *testing.T) {
	keys := []string{
		"latch:client:0123456789ab",                 // a record under the default prefix
		"m3:client:abcdefabcdef",                    // under another prefix
		"client:0123456789ab",                       // under the empty prefix
		"latch:{client:0123456789ab}",               // a Mutex named like a record
		"latch:{n}:sem",                             // a primitive's key
		"latch:client:0123456789a",                  // an id one digit short
		"latch:client:0123456789abc",                // one digit long
		"latch:client:0123456789aZ",                 // not hex
		KeyBase("p:", "x") + ":client:abcdefabcdef", // under a brace
	}
	got := WithoutClientRecords(slices.Clone(keys))
	want := keys[3:]
	if !slices.Equal(got, want) {
		t.Errorf("WithoutClientRecords(%q) = %q, want %q", keys, got, want)
	}
	if got := WithoutClientRecords(nil); len(got) != 0 {
		t.Errorf("WithoutClientRecords(nil) = %q", got)
	}
}

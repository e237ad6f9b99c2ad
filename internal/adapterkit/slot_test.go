package adapterkit

import (
	"errors"
	"testing"

	"github.com/latchkit/latchkit/backend"
)

// Slot agrees with the slots Redis Cluster's specification gives (and
// CLUSTER KEYSLOT answers), hash tags included.
func TestSlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"123456789":     12739, // the CRC16 check value 0x31C3, modulo 16384
		"foo":           12182,
		"bar":           5061,
		"{user1000}.a":  Slot("user1000"),
		"x{user1000}y":  Slot("user1000"),
		"{}.a":          Slot("{}.a"),
		"a{}{b}":        Slot("a{}{b}"),
		"{a}{b}":        Slot("a"),
		"no close {tag": Slot("no close {tag"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot("{}.a") == Slot("") {
		t.Error("an empty hash tag hashes the whole key")
	}
	if err := CheckSlots([]string{"{a}x", "{a}y"}); err != nil {
		t.Errorf("one slot: %v", err)
	}
	if err := CheckSlots(nil); err != nil {
		t.Errorf("no keys: %v", err)
	}
	if err := CheckSlots([]string{"{a}x", "{b}x"}); !errors.Is(err, backend.ErrInvalid) {
		t.Errorf("two slots: %v, want ErrInvalid", err)
	}
}

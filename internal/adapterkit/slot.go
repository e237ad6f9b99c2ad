package adapterkit

import (
	"fmt"

	"github.com/latchkit/latchkit/backend"
)

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag (the text between its first '{' and the next '}', when that is not
// empty), else of the whole key, modulo 16384.
func Slot(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				break
			}
		}
		break
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// CheckSlots is why a cluster client refuses a script call before sending
// it: keys of more than one hash slot. A Cluster runs a script on the node
// of its keys' one slot (and rueidis's and valkey-go's command builders
// panic on such keys, in a goroutine no caller can recover).
func CheckSlots(keys []string) error {
	for _, k := range keys[min(1, len(keys)):] {
		if Slot(k) != Slot(keys[0]) {
			return fmt.Errorf("%w: keys %q and %q of one script are in different hash slots of a Cluster", backend.ErrInvalid, keys[0], k)
		}
	}
	return nil
}

package goredis

import (
	"fmt"
	"sync"
	"testing"
)

// TestBoxCache: box hands back each string it is given, whatever other
// goroutines box meanwhile (16 goroutines over 20,000 strings, many more
// than the cache's slots, so that slots are evicted and refilled under
// each other's reads). TestEvalFastPathAllocs shows what it saves.
func TestBoxCache(t *testing.T) {
	c := newBoxCache()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				s := fmt.Sprint("latch:{", (i*7+g)%20000, "}")
				if v, ok := c.box(s).(string); !ok || v != s {
					t.Errorf("box(%q) = %v", s, c.box(s))
					return
				}
			}
		}()
	}
	wg.Wait()
}

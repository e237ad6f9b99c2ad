// Package registry keeps one value per backend for the whole process: the
// lease renewer of a backend (package primitives), its shared pub/sub Hub
// (package pubsub). Both come and go with use: a value is made by the first
// user and dropped once idle.
package registry

import (
	"reflect"
	"sync"

	"github.com/latchkit/latchkit/backend"
)

// Registry maps backends to values. Lock it around every call ending in
// Locked; a caller may keep it locked across several, to decide on a
// value's state and the registry's at once.
type Registry[V comparable] struct {
	sync.Mutex
	m map[backend.Backend]V
}

// Shareable reports whether b can be a key of a Registry: a backend whose
// dynamic type is not comparable (a struct value holding a slice, say)
// cannot, and gets a value of its own instead, correct but unshared. A
// nil backend is a key like any other.
func Shareable(b backend.Backend) bool {
	t := reflect.TypeOf(b)
	return t == nil || t.Comparable()
}

// GetLocked returns b's value, making it with mk when there is none. b
// must be Shareable.
func (r *Registry[V]) GetLocked(b backend.Backend, mk func() V) V {
	if v, ok := r.m[b]; ok {
		return v
	}
	if r.m == nil {
		r.m = make(map[backend.Backend]V)
	}
	v := mk()
	r.m[b] = v
	return v
}

// LookupLocked returns b's value, if it has one.
func (r *Registry[V]) LookupLocked(b backend.Backend) (V, bool) {
	v, ok := r.m[b]
	return v, ok
}

// DeleteLocked removes b's entry if it is still v.
func (r *Registry[V]) DeleteLocked(b backend.Backend, v V) {
	if cur, ok := r.m[b]; ok && cur == v {
		delete(r.m, b)
	}
}

// Len is the number of entries.
func (r *Registry[V]) Len() int {
	r.Lock()
	defer r.Unlock()
	return len(r.m)
}

// Package nilness tells a nil value in an interface apart from a usable
// one: the adapters refuse a nil client with it, and the constructors of
// package primitives a nil backend, typed nils included.
package nilness

import "reflect"

// Is reports whether v is nil or holds a nil pointer, map, slice, channel,
// function or interface (a typed nil).
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return r.IsNil()
	}
	return false
}

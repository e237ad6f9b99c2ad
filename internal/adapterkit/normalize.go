package adapterkit

import "github.com/latchkit/latchkit/backend"

// NormalizeArray is the []Value of an array reply: each element
// normalized by norm (the adapter's own Normalize, which calls
// NormalizeArray again for a nested array). It stops at the first element
// norm refuses and returns that error.
func NormalizeArray[T any](a []T, norm func(T) (backend.Value, error)) (backend.Value, error) {
	out := make([]backend.Value, len(a))
	for i := range a {
		v, err := norm(a[i])
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

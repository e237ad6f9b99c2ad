package kit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/latchkit/latchkit/internal/keyspace"

	"github.com/latchkit/latchkit/backend"
)

// keyTypesScript reads the types of its keys (lua/key_types.lua).
var keyTypesScript = LoadScript(luaFiles, "key_types")

// layoutTypes maps the part of a key after its KeyBase (a layout's Sub
// and the key's Suffix: ":fence", ":sem:fences", ...) to the type
// latchkit keeps there, for every layout.
var layoutTypes = func() map[string]string {
	m := map[string]string{}
	for _, l := range keyspace.Layouts() {
		for _, k := range l.Keys {
			if t, ok := m[l.Sub+k.Suffix]; ok && t != k.Type {
				panic(fmt.Sprintf("primitives: key suffix %q has types %s and %s", l.Sub+k.Suffix, t, k.Type))
			}
			m[l.Sub+k.Suffix] = k.Type
		}
	}
	return m
}()

// diagnoseTimeout bounds keyErr's read of the key types.
const diagnoseTimeout = time.Second

// KeyErr is ScriptErr for a script that ran over keys on b. A WRONGTYPE
// reply (a key of the primitive holds a value latchkit did not write) is
// read as a refusal naming the key: on this error path alone, one more
// round trip reads the type of each key and names the first that is not
// absent and not of the type its layout keeps there (see layoutTypes).
// When none is (the key's type is right but its content is not, or it
// changed since), the script's own reason is given, without the server's
// note of the script's SHA and line. Either way the error matches
// latchkit.ErrInvalid, backend.ErrWrongType and the *backend.ReplyError.
// Every script reads the keys it touches before its first write, so a
// WRONGTYPE reply means nothing was changed.
func KeyErr(ctx context.Context, b backend.Backend, keys []string, err error) error {
	return KeyErrTypes(ctx, b, keys, nil, err)
}

// KeyErrTypes is KeyErr for keys whose types are given (types[i] the
// Redis type kept at keys[i]; nil: the built-in layouts' types by the
// keys' suffixes), the diagnosis of any layout's WRONGTYPE.
func KeyErrTypes(ctx context.Context, b backend.Backend, keys, types []string, err error) error {
	var done *refusedError
	if errors.As(err, &done) || !errors.Is(err, backend.ErrWrongType) {
		return ScriptErr(err)
	}
	if why := wrongKey(ctx, b, keys, types); why != "" {
		return &refusedError{why: why, reply: err}
	}
	return ScriptErr(err)
}

// wrongKey says which of keys holds a type latchkit does not keep there
// (types, or the built-in layouts' by suffix when nil), or "" when it
// cannot tell.
func wrongKey(ctx context.Context, b backend.Backend, keys, types []string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), diagnoseTimeout)
	defer cancel()
	v, err := b.Eval(ctx, keyTypesScript, keys, nil)
	if err != nil {
		return ""
	}
	got, ok := v.([]backend.Value)
	if !ok || len(got) != len(keys) {
		return ""
	}
	for i, k := range keys {
		has, _ := got[i].(string)
		var want string
		known := false
		if types != nil {
			if i < len(types) {
				want, known = types[i], true
			}
		} else if _, _, suffix, ok := keyspace.ParseKeyBase(k); ok {
			want, known = layoutTypes[suffix]
		}
		if !known || has == "" || has == "none" || has == want {
			continue
		}
		return fmt.Sprintf("key %s holds a %s, where latchkit keeps a %s: it was not written by latchkit", k, has, want)
	}
	return ""
}

// wrongTypeReason is the reason of a WRONGTYPE reply without its code and
// without what servers add: real Redis's "script: <sha>, on
// @user_script:<line>." and miniredis's Lua error prefix and traceback.
func wrongTypeReason(msg string) string {
	if i := strings.Index(msg, "WRONGTYPE "); i >= 0 {
		msg = msg[i+len("WRONGTYPE "):]
	}
	for _, tail := range []string{" script: ", "stack traceback", "\n"} {
		if i := strings.Index(msg, tail); i >= 0 {
			msg = msg[:i]
		}
	}
	return strings.TrimSpace(msg)
}

// Package apicover holds a package's tests to a case for every exported
// function and method: List reads the exported API from the package's
// source, and Check fails a test whose table of cases misses one (or names
// one that is gone), so that a new exported function is not forgotten by
// the test that calls every one with bad input (issue 38, finding 5).
package apicover

import (
	"errors"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// List returns the exported API of the package in dir, from its non-test
// .go files, sorted: "F" for a function, "T.M" for a method of an exported
// type T (whatever its receiver) and for a method an exported interface T
// declares itself (not one it embeds: that is its own type's). Functions
// that return T are listed as functions, as go doc shows them under T.
func List(dir string) ([]string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	name := ""
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if name == "" {
			name = f.Name.Name
		}
		if f.Name.Name == name {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("apicover: no Go files in %s", dir)
	}
	p, err := doc.NewFromFiles(fset, files, "example.com/"+name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range p.Funcs {
		out = append(out, f.Name)
	}
	for _, t := range p.Types {
		for _, f := range t.Funcs {
			out = append(out, f.Name)
		}
		for _, m := range t.Methods {
			out = append(out, t.Name+"."+m.Name)
		}
		for _, spec := range t.Decl.Specs {
			ts, ok := spec.(*ast.TypeSpec)
			if !ok || ts.Name.Name != t.Name {
				continue
			}
			it, ok := ts.Type.(*ast.InterfaceType)
			if !ok {
				continue
			}
			for _, m := range it.Methods.List {
				if _, isFunc := m.Type.(*ast.FuncType); !isFunc {
					continue // embedded
				}
				for _, n := range m.Names {
					if n.IsExported() {
						out = append(out, t.Name+"."+n.Name)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// Check runs cases, one subtest each, after failing t for every exported
// function or method of the package in dir (List) that has no case, and
// every case that names none. A case calls its function or method with
// bad input (nil receivers, nil functions, zero values, closed clients)
// under NoPanic and checks what it returns.
func Check(t *testing.T, dir string, cases map[string]func(t *testing.T)) {
	t.Helper()
	api, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range api {
		if _, ok := cases[n]; !ok {
			t.Errorf("exported %s has no case: add one that calls it with bad input", n)
		}
	}
	for n := range cases {
		if !slices.Contains(api, n) {
			t.Errorf("case %s names nothing exported (gone, or renamed?)", n)
		}
	}
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, cases[n])
	}
}

// NoPanic calls f and returns its error, or, when f panics, an error
// saying so (the test then fails on it).
func NoPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &Panic{Value: r}
		}
	}()
	return f()
}

// Panic is NoPanic's error for a call that panicked.
type Panic struct{ Value any }

func (p *Panic) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// Must fails t when f panics or returns an error matching none of want
// (with errors.Is); with no want, any error will do. It returns the error.
func Must(t *testing.T, what string, f func() error, want ...error) error {
	t.Helper()
	err := NoPanic(f)
	var p *Panic
	switch {
	case asPanic(err, &p):
		t.Errorf("%s panicked: %v", what, p.Value)
	case err == nil:
		t.Errorf("%s: no error", what)
	case len(want) > 0 && !isAny(err, want):
		t.Errorf("%s: %v, want an error matching one of %v", what, err, want)
	}
	return err
}

// Calm fails t when f panics; an error is fine (a documented no-op
// returns nil). It returns the error.
func Calm(t *testing.T, what string, f func() error) error {
	t.Helper()
	err := NoPanic(f)
	var p *Panic
	if asPanic(err, &p) {
		t.Errorf("%s panicked: %v", what, p.Value)
	}
	return err
}

func asPanic(err error, p **Panic) bool { return errors.As(err, p) }

func isAny(err error, want []error) bool {
	for _, w := range want {
		if errors.Is(err, w) {
			return true
		}
	}
	return false
}

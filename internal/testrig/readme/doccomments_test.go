package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// oneLetter is a one-letter word of a doc comment other than "a": a name
// (of a parameter, in a function's doc), never English.
var oneLetter = regexp.MustCompile(`(?:^|[\s(,])([b-z])(?:$|[\s.,;:)'])`)

// TestDocCommentsNameTheirParameters (issue 38, finding 11): a one-letter
// name in the doc comment of an exported function or method (an exported
// interface's too) of a public package is one of its parameters, results
// or its receiver: go doc of
// NewElection and NewRWLock said "named name on b", and they have no b.
func TestDocCommentsNameTheirParameters(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "internal" || d.Name() == "testdata" ||
				rel == "cmd" || rel == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		check := func(name string, doc *ast.CommentGroup, lists ...*ast.FieldList) {
			if doc == nil {
				return
			}
			names := map[string]bool{}
			for _, fl := range lists {
				if fl == nil {
					continue
				}
				for _, field := range fl.List {
					for _, n := range field.Names {
						names[n.Name] = true
					}
				}
			}
			for _, m := range oneLetter.FindAllStringSubmatch(doc.Text(), -1) {
				if !names[m[1]] {
					t.Errorf("%s: the doc of %s names %q, which is none of its parameters", rel, name, m[1])
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Name.IsExported() {
					check(n.Name.Name, n.Doc, n.Recv, n.Type.Params, n.Type.Results)
				}
			case *ast.TypeSpec: // an exported interface's methods
				if it, ok := n.Type.(*ast.InterfaceType); ok && n.Name.IsExported() {
					for _, m := range it.Methods.List {
						if ft, ok := m.Type.(*ast.FuncType); ok && len(m.Names) == 1 {
							check(n.Name.Name+"."+m.Names[0].Name, m.Doc, ft.Params, ft.Results)
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Package readme renders the Go blocks of the repository's README.md from
// Example functions, so that every Go block a reader sees is code the
// tests compile and run (as bsm/redislock generates its README).
//
// A block is written in the README as
//
//	<!-- example DIR NAME -->
//	```go
//	...
//	```
//
// where DIR is a package directory of the repository and NAME an Example
// function of its tests; Render replaces the block's body with that
// Example's body, and refuses a Go block without the marker.
//
// go doc prints no Examples, so a doc comment that shows code carries the
// directive
//
//	//readme:example DIR NAME HEADING
//
// (gofmt keeps a directive at the end of its comment, and go doc does not
// print it): RenderGo replaces the first code block under the comment's
// heading "# HEADING" with that Example's body.
package readme

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

var marker = regexp.MustCompile(`^<!-- example (\S+) (\S+) -->$`)

// Render returns readme with every marked block's body replaced by its
// Example's, the packages found under root.
func Render(root string, readme []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(readme), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out.WriteString(line)
		m := marker.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil {
			if strings.TrimRight(line, "\n") == "```go" {
				return nil, fmt.Errorf("line %d: a Go block without an example marker above it", i+1)
			}
			continue
		}
		if i+1 >= len(lines) || strings.TrimRight(lines[i+1], "\n") != "```go" {
			return nil, fmt.Errorf("line %d: the marker is not followed by a ```go block", i+1)
		}
		end := i + 2
		for end < len(lines) && strings.TrimRight(lines[end], "\n") != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("line %d: the Go block is not closed", i+2)
		}
		body, err := exampleBody(filepath.Join(root, m[1]), m[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out.WriteString("```go\n")
		out.WriteString(body)
		out.WriteString("```\n")
		i = end
	}
	return []byte(out.String()), nil
}

var directive = regexp.MustCompile(`^//readme:example (\S+) (\S+) (.+)$`)

// RenderGo returns the Go source src with the code block that each
// //readme:example directive names replaced by its Example's body, the
// packages found under root.
func RenderGo(root string, src []byte) ([]byte, error) {
	lines := strings.Split(string(src), "\n")
	for i, line := range lines {
		m := directive.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		first := i // the directive's comment: the "//" lines above it
		for first > 0 && strings.HasPrefix(lines[first-1], "//") {
			first--
		}
		heading := slices.Index(lines[first:i], "// # "+m[3])
		if heading < 0 {
			return nil, fmt.Errorf("line %d: no heading %q in the comment above", i+1, "# "+m[3])
		}
		start := first + heading + 1
		for start < i && !strings.HasPrefix(lines[start], "//\t") {
			if strings.HasPrefix(lines[start], "// # ") {
				start = i
			}
			start++
		}
		if start >= i {
			return nil, fmt.Errorf("line %d: no code block under %q", i+1, "# "+m[3])
		}
		end := start // the block: its lines, and the blank lines within it
		for end < i && (strings.HasPrefix(lines[end], "//\t") || lines[end] == "//" && end+1 < i && strings.HasPrefix(lines[end+1], "//\t")) {
			end++
		}
		body, err := exampleBody(filepath.Join(root, m[1]), m[2])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		var block []string
		for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
			if l == "" {
				block = append(block, "//")
			} else {
				block = append(block, "//\t"+l)
			}
		}
		lines = slices.Concat(lines[:start], block, lines[end:])
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// GoFiles returns the Go files under root that are not tests, outside
// hidden directories and testdata.
func GoFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// exampleBody returns the body of Example name in the tests of dir,
// unindented, its Output comment left out.
func exampleBody(dir, name string) (string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return "", err
	}
	var parsed []*ast.File
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		af, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			return "", err
		}
		parsed = append(parsed, af)
	}
	for _, ex := range doc.Examples(parsed...) {
		if "Example"+ex.Name != name && !(name == "Example" && ex.Name == "") {
			continue
		}
		block, comments := ex.Code, ex.Comments
		if f, ok := ex.Code.(*ast.File); ok { // a whole-file example: its function's body
			block = nil
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == name {
					block = fd.Body
				}
			}
			if block == nil {
				return "", fmt.Errorf("%s in %s: no body", name, dir)
			}
			comments = nil
			for _, c := range f.Comments {
				if c.Pos() > block.Pos() && c.End() < block.End() {
					comments = append(comments, c)
				}
			}
		}
		var buf bytes.Buffer
		cfg := printer.Config{Mode: printer.UseSpaces | printer.TabIndent, Tabwidth: 8}
		if err := cfg.Fprint(&buf, fset, &printer.CommentedNode{Node: block, Comments: comments}); err != nil {
			return "", err
		}
		s := strings.TrimSuffix(strings.TrimPrefix(buf.String(), "{\n"), "}")
		var body strings.Builder
		for _, l := range strings.SplitAfter(s, "\n") {
			l = strings.TrimPrefix(l, "\t")
			if strings.HasPrefix(strings.TrimSpace(l), "// Output:") {
				break
			}
			body.WriteString(l)
		}
		return strings.TrimRight(body.String(), "\n") + "\n", nil
	}
	return "", fmt.Errorf("no %s among the examples of %s", name, dir)
}

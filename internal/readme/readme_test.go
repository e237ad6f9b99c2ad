package readme

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md from the Examples")

// Every Go block of README.md is an Example's body: it compiles and runs
// with the tests, and the README cannot drift from it. After changing an
// Example (or a marker), run: go test ./internal/readme -update
func TestREADMEIsRenderedFromExamples(t *testing.T) {
	root := filepath.Join("..", "..")
	path := filepath.Join(root, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Render(root, readme)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, readme) {
		return
	}
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("README.md's Go blocks differ from the Examples they come from: run go test ./internal/readme -update")
}

// A Go block without a marker is refused, and a marked block is replaced.
func TestRender(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte("package x_test\n\nimport \"fmt\"\n\nfunc ExampleHello() {\n\t// greet\n\tfmt.Println(\"hi\")\n\t// Output: hi\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Render(filepath.Dir(dir), []byte("a\n<!-- example "+filepath.Base(dir)+" ExampleHello -->\n```go\nstale\n```\nb\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := "a\n<!-- example " + filepath.Base(dir) + " ExampleHello -->\n```go\n// greet\nfmt.Println(\"hi\")\n```\nb\n"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := Render(dir, []byte("```go\nx\n```\n")); err == nil {
		t.Error("a Go block without a marker was accepted")
	}
}

package readme

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md from the Examples")

// Every Go block of README.md, and of each other Markdown page with an
// example marker (docs/operations.md), is an Example's body: it compiles
// with the tests (and runs, when it has an Output), and the page cannot
// drift from it. After changing an Example (or a marker), run:
// go test ./internal/readme -update
func TestREADMEIsRenderedFromExamples(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	for i, path := range pages {
		page, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && !bytes.Contains(page, []byte("<!-- example ")) {
			continue // a page without markers keeps its Go blocks as written
		}
		got, err := Render(root, page)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if bytes.Equal(got, page) {
			continue
		}
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: its Go blocks differ from the Examples they come from: run go test ./internal/readme -update", path)
	}
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

// Every Go doc comment with a //readme:example directive has its code
// block under the directive's heading rendered from the Example: go doc
// (which prints no Examples) shows code the tests compile and run. After
// changing such an Example, run: go test ./internal/readme -update
func TestDocCommentsAreRenderedFromExamples(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	files, err := GoFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RenderGo(root, src)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if bytes.Equal(got, src) {
			continue
		}
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: a doc comment's code block differs from the Example it comes from: run go test ./internal/readme -update", path)
	}
}

// RenderGo replaces the code block under the directive's heading, and
// refuses a directive whose heading or block it cannot find.
func TestRenderGo(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte("package x_test\n\nimport \"fmt\"\n\nfunc ExampleHello() {\n\tfmt.Println(\"hi\")\n\n\tif true {\n\t\tfmt.Println(\"there\")\n\t}\n\t// Output: hi\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ex := filepath.Base(dir)
	src := "// Package x.\n//\n// # Use\n//\n// Like so:\n//\n//\tstale\n//\n//\tstale too\n//\n// # Other\n//\n//\tkept\n//\n//readme:example " + ex + " ExampleHello Use\npackage x\n"
	got, err := RenderGo(filepath.Dir(dir), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := "// Package x.\n//\n// # Use\n//\n// Like so:\n//\n//\tfmt.Println(\"hi\")\n//\n//\tif true {\n//\t\tfmt.Println(\"there\")\n//\t}\n//\n// # Other\n//\n//\tkept\n//\n//readme:example " + ex + " ExampleHello Use\npackage x\n"
	if string(got) != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{
		"// Package x.\n//\n//readme:example " + ex + " ExampleHello Use\npackage x\n",                                // no heading
		"// Package x.\n//\n// # Use\n//\n// No code.\n//\n//readme:example " + ex + " ExampleHello Use\npackage x\n", // no block
		"// Package x.\n//\n// # Use\n//\n//\tx\n//\n//readme:example " + ex + " ExampleNope Use\npackage x\n",        // no Example
	} {
		if _, err := RenderGo(filepath.Dir(dir), []byte(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}

// TestTracingSetUpIsShown (issue 38, finding 11): the set-up of
// middleware.Tracing with an application's TracerProvider and
// MeterProvider is in the README and in the middleware package's doc,
// which go doc prints (it prints no Example: the README pointed tracing
// users at ExampleTracing, which go doc does not show).
func TestTracingSetUpIsShown(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("<!-- example middleware ExampleTracing_setup -->\n")) {
		t.Error("README.md has no block of ExampleTracing_setup")
	}
	src, err := os.ReadFile(filepath.Join(root, "middleware", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"//readme:example middleware ExampleTracing_setup ", "//\t\tmiddleware.WithTracerProvider(tp),\n", "//\t\tmiddleware.WithMeterProvider(mp),\n"} {
		if !bytes.Contains(src, []byte(want)) {
			t.Errorf("middleware/doc.go has no %q", want)
		}
	}
}

// TestGoRedisLogQuietingIsShown (issue 38, finding 11): docs/operations.md
// tells an application how to quiet go-redis's own log lines (a Redis
// restart prints them from every client's pool), with code the tests
// compile: nothing said it.
func TestGoRedisLogQuietingIsShown(t *testing.T) {
	ops, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	logs := ops[max(bytes.Index(ops, []byte("\n## Logs\n")), 0):]
	for _, want := range []string{"<!-- example backend/goredis Example_logger -->\n```go\n", "redis.SetLogger(", "rueidis", "valkey-go", "redigo"} {
		if !bytes.Contains(logs, []byte(want)) {
			t.Errorf("docs/operations.md's Logs section has no %q", want)
		}
	}
}

package latchkit_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxLibraryLines is the longest a library file may be: a file past it
// holds two things, and reads better as two files.
const maxLibraryLines = 450

// No library file (a non-test Go file, or a Lua script or block file, of
// any package but the programs in cmd/ and the benchmarks' own module)
// passes maxLibraryLines.
func TestNoLibraryFileTooLong(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "cmd" || path == "bench" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".lua")) || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := bytes.Count(src, []byte("\n")); n > maxLibraryLines {
			t.Errorf("%s: %d lines, over %d: split it", path, n, maxLibraryLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

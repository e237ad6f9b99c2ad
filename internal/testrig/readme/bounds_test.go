package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBoundsPage (issue 38, finding 11): docs/bounds.md describes the
// code as it is: no project history (issue numbers, commit hashes, line
// numbers of some commit), every test it names exists, and every file it
// names is there.
func TestBoundsPage(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	page, err := os.ReadFile(filepath.Join(root, "docs", "bounds.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	for _, history := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)\bissue \d+`),
		regexp.MustCompile(`\b[0-9a-f]{7,40}\b`), // a commit hash (checked for a digit and a letter below)
		regexp.MustCompile(`\.(go|lua):\d+`),
		regexp.MustCompile(`(?i)\bline numbers?\b|\bsince\b.*\b(issue|commit)`),
	} {
		for _, m := range history.FindAllString(text, -1) {
			if regexp.MustCompile(`^[0-9a-f]+$`).MatchString(m) && (!strings.ContainsAny(m, "0123456789") || !strings.ContainsAny(m, "abcdef")) {
				continue // a number or a word, not a hash
			}
			t.Errorf("docs/bounds.md carries history: %q", m)
		}
	}
	var sources strings.Builder
	files, err := GoFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	tests, _ := filepath.Glob(filepath.Join(root, "*", "*_test.go"))
	more, _ := filepath.Glob(filepath.Join(root, "*", "*", "*_test.go"))
	for _, f := range append(append(files, tests...), more...) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources.Write(src)
	}
	for _, m := range regexp.MustCompile("`((?:Test|test|Fuzz)[A-Za-z0-9_]+)`").FindAllStringSubmatch(text, -1) {
		if !strings.Contains(sources.String(), "func "+m[1]+"(") {
			t.Errorf("docs/bounds.md names %s, which no file defines", m[1])
		}
	}
	for _, m := range regexp.MustCompile("`([a-z/_]+\\.(?:go|lua))`").FindAllStringSubmatch(text, -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil && strings.Contains(m[1], "/") {
			t.Errorf("docs/bounds.md names %s, which is not there", m[1])
		}
	}
}

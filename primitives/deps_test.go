package primitives

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The primitives link no OpenTelemetry package: tracing is middleware that
// only programs that trace import.
func TestNoOpenTelemetryInTheCore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/latchkit/latchkit/primitives").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.opentelemetry.io/") {
			t.Errorf("primitives depends on %s", p)
		}
	}
}

// The package holds one file per primitive, over internal/kit, beside the
// Client, the options, the scripts' embedding and the package doc: the
// machinery every primitive shares (the wait loop, leases, the renewer,
// the script loader, reply decoding) lives in internal/kit, where a
// primitive's file reaches it by name. A new shared helper parked in a
// primitive's file, or a machinery file back here, fails this test:
// put it in internal/kit.
func TestOneFilePerPrimitive(t *testing.T) {
	primitives := []string{"mutex", "reentrant", "semaphore", "fair", "rwlock", "multilock", "redlock", "latch", "election"}
	want := map[string]bool{"client.go": true, "options.go": true, "scripts.go": true, "doc.go": true}
	for _, p := range primitives {
		want[p+".go"] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if !want[f] {
			t.Errorf("%s: not a primitive's file (want one of %v): shared machinery belongs in internal/kit", f, slices.Sorted(maps.Keys(want)))
			continue
		}
		if !slices.Contains(primitives, strings.TrimSuffix(f, ".go")) {
			continue // the Client, the options and the scripts' loading serve every primitive
		}
		// A primitive's file declares no plain function that another
		// file calls: helpers for every primitive (ms, pair, flag and
		// invalid once were, in mutex.go and semaphore.go) are kit's.
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.IsExported() || strings.HasPrefix(fd.Name.Name, "new") {
				continue
			}
			uses := 0
			for _, other := range files {
				if other == f || strings.HasSuffix(other, "_test.go") {
					continue
				}
				src, err := os.ReadFile(other)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(src), fd.Name.Name+"(") {
					uses++
				}
			}
			if uses > 0 {
				t.Errorf("%s: func %s is used by %d other files of the package: a shared helper belongs in internal/kit", f, fd.Name.Name, uses)
			}
		}
	}
}

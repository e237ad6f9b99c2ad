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

// The package holds the files of each primitive (p.go, and p_*.go where
// one file would pass 450 lines), over internal/kit, beside the Client,
// the options, the scripts' embedding and the package doc: the machinery
// every primitive shares (the wait loop, leases, the renewer, the script
// loader, reply decoding) lives in internal/kit, where a primitive's file
// reaches it by name. A new shared helper parked in a primitive's file
// (a function another primitive's files call), or a machinery file back
// here, fails this test: put it in internal/kit.
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
		if !want[f] && !want[primitiveOf(f)+".go"] {
			t.Errorf("%s: not a primitive's file (want one of %v): shared machinery belongs in internal/kit", f, slices.Sorted(maps.Keys(want)))
			continue
		}
		if !slices.Contains(primitives, primitiveOf(f)) {
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
				if primitiveOf(other) == primitiveOf(f) || strings.HasSuffix(other, "_test.go") {
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
				t.Errorf("%s: func %s is used by %d files of other primitives: a shared helper belongs in internal/kit", f, fd.Name.Name, uses)
			}
		}
	}
}

// primitiveOf is the primitive a file of the package is of: "election" for
// election.go and election_observe.go.
func primitiveOf(file string) string {
	p, _, _ := strings.Cut(strings.TrimSuffix(file, ".go"), "_")
	return p
}

// onThePublicKit are the built-ins written on package kit alone: their
// files import no internal package, so that they show what a primitive
// of a user's can be (docs/kit.md).
var onThePublicKit = []string{"latch", "semaphore", "rwlock"}

func TestBuiltinsOnThePublicKit(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range onThePublicKit {
		files, _ := filepath.Glob(p + "*.go")
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || primitiveOf(f) != p {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, im := range af.Imports {
				if strings.Contains(im.Path.Value, "/internal/") {
					t.Errorf("%s imports %s: the %s is written on package kit alone", f, im.Path.Value, p)
				}
			}
		}
	}
}

// No internal package imports primitives: the machinery and the test rigs
// sit below the built-ins (a rig makes its Clients with package kit).
func TestNoInternalPackageImportsPrimitives(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("../internal", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			if im.Path.Value == `"github.com/latchkit/latchkit/primitives"` {
				t.Errorf("%s imports primitives", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

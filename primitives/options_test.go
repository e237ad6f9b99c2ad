package primitives_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"
	"time"

	"github.com/latchkit/latchkit/internal/testrig/lane"
	"github.com/latchkit/latchkit/primitives"
)

// An option that does not apply to a family does not compile there: each
// call below is type-checked against the package, and must be refused
// (or, for the ones that fit, accepted). Before options were typed per
// family, WithTTL on a Latch or WithInstanceTimeout on a Mutex compiled
// and was ignored, WithReplicaAck on a Redlock or a Latch was refused at
// run time.
func TestOptionsThatDoNotApplyDoNotCompile(t *testing.T) {
	lane.ParallelFast(t) // servers of its own
	check := typeChecker(t)
	for _, c := range []struct {
		call string
		ok   bool
	}{
		{`primitives.NewLatch(c, "l", primitives.WithTTL(time.Second))`, false},
		{`primitives.NewLatch(c, "l", primitives.WithAutoExtend(false))`, false},
		{`primitives.NewLatch(c, "l", primitives.WithReplicaAck(1, time.Second))`, false},
		{`primitives.NewLatch(c, "l", primitives.WithWaiterTimeout(time.Second))`, false},
		{`primitives.NewLatch(c, "l", primitives.WithInstanceTimeout(time.Second))`, false},
		{`primitives.NewRedlock(cs, "r", primitives.WithReplicaAck(1, time.Second))`, false},
		{`primitives.NewRedlock(cs, "r", primitives.WithWaiterTimeout(time.Second))`, false},
		{`primitives.NewRedlock(cs, "r", primitives.WithRetention(time.Second))`, false},
		{`primitives.NewMutex(c, "m", primitives.WithInstanceTimeout(time.Second))`, false},
		{`primitives.NewSemaphore(c, "s", 2, primitives.WithInstanceTimeout(time.Second))`, false},
		{`primitives.NewElection(c, "e", primitives.WithInstanceTimeout(time.Second))`, false},

		{`primitives.NewLatch(c, "l", primitives.WithPrefix("p:"), primitives.WithRetention(time.Hour), primitives.WithRetry(nil), primitives.WithMiddleware())`, true},
		{`primitives.NewRedlock(cs, "r", primitives.WithTTL(time.Second), primitives.WithInstanceTimeout(time.Millisecond), primitives.WithPrefix("p:"), primitives.WithAutoExtend(true), primitives.WithLogger(nil))`, true},
		{`primitives.NewMutex(c, "m", primitives.WithTTL(time.Second), primitives.WithReplicaAck(1, time.Millisecond), primitives.WithWaiterTimeout(time.Second), primitives.WithRetention(time.Hour))`, true},
	} {
		src := "package p\n\nimport (\n\t\"time\"\n\n\t\"github.com/latchkit/latchkit/primitives\"\n)\n\n" +
			"func f(c *primitives.Client, cs []*primitives.Client) {\n\t_ = time.Second\n\t_, _ = " + c.call + "\n}\n"
		err := check(src)
		if c.ok && err != nil {
			t.Errorf("%s does not compile: %v", c.call, err)
		}
		if !c.ok && err == nil {
			t.Errorf("%s compiles: an option that does not apply must not", c.call)
		}
	}
}

// typeChecker returns a function that type-checks src, a file of its own
// package, importing the module's packages from source (once, for every
// call).
func typeChecker(t *testing.T) func(src string) error {
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	return func(src string) error {
		t.Helper()
		f, err := parser.ParseFile(fset, "p.go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		conf := types.Config{Importer: imp}
		_, err = conf.Check("p", fset, []*ast.File{f}, nil)
		if err != nil && !strings.Contains(err.Error(), "cannot use") {
			t.Fatalf("type-checking %q failed for another reason: %v", src, err)
		}
		return err
	}
}

// Not even a type assertion turns an option into one of a family it does
// not fit.
func TestOptionsDoNotAssertAcrossFamilies(t *testing.T) {
	if _, ok := primitives.WithReplicaAck(1, time.Second).(primitives.RedlockOption); ok {
		t.Error("WithReplicaAck asserts to a RedlockOption")
	}
	if _, ok := primitives.WithWaiterTimeout(time.Second).(primitives.LatchOption); ok {
		t.Error("WithWaiterTimeout asserts to a LatchOption")
	}
	var ttl primitives.Option = primitives.WithTTL(time.Second)
	if _, ok := ttl.(primitives.LatchOption); ok {
		t.Error("WithTTL asserts to a LatchOption")
	}
	var inst primitives.RedlockOption = primitives.WithInstanceTimeout(time.Second)
	if _, ok := inst.(primitives.Option); ok {
		t.Error("WithInstanceTimeout asserts to an Option")
	}
}

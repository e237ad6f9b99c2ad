package lane

import (
	"flag"
	"reflect"
	"strconv"
	"testing"
)

func TestSubsetCoversEveryItemAcrossCases(t *testing.T) {
	t.Setenv(Env, "")
	items := []string{"a", "b", "c", "d"}
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		got := Subset(items, i, 2)
		if len(got) != 2 {
			t.Fatalf("case %d: %v, want 2 items", i, got)
		}
		for _, s := range got {
			seen[s] = true
		}
	}
	if len(seen) != len(items) {
		t.Errorf("3 cases of 2 saw %v, want every one of %v", seen, items)
	}
	if got := Subset(items, 1, 3); !reflect.DeepEqual(got, []string{"d", "a", "b"}) {
		t.Errorf("Subset(items, 1, 3) = %v, want [d a b]", got)
	}
	got := Subset(items, 0, 9)
	got[0] = "z"
	if items[0] != "a" {
		t.Error("Subset shares its result with items")
	}
}

func TestLongLaneTakesEverything(t *testing.T) {
	t.Setenv(Env, "1")
	items := []int{1, 2, 3}
	if got := Subset(items, 5, 1); !reflect.DeepEqual(got, items) {
		t.Errorf("long lane: Subset = %v, want %v", got, items)
	}
	if got := Pick(1, 2); got != 2 {
		t.Errorf("long lane: Pick = %d, want 2", got)
	}
}

func TestWidenRaisesParallelInTheFastLaneOnly(t *testing.T) {
	f := flag.Lookup("test.parallel")
	given := false
	flag.Visit(func(v *flag.Flag) { given = given || v.Name == "test.parallel" })
	if given {
		t.Skip("-parallel given: Widen leaves it")
	}
	want := strconv.Itoa(FastParallelism)
	if raceDetector {
		want = "2" // left as it was
	}
	was := f.Value.String()
	t.Cleanup(func() { _ = f.Value.Set(was) })

	t.Setenv(Env, "1")
	_ = f.Value.Set("2")
	Widen()
	if got := f.Value.String(); got != "2" {
		t.Errorf("long lane: -parallel %s after Widen, want 2 (go test's default left alone)", got)
	}
	t.Setenv(Env, "")
	Widen()
	if got := f.Value.String(); got != want {
		t.Errorf("fast lane (race detector %v): -parallel %s after Widen, want %s", raceDetector, got, want)
	}
}

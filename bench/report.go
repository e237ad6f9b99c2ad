package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/latchkit/latchkit/internal/handoff"
)

// The targets.
const (
	targetS1Ratio      = 0.95
	targetS2Ratio      = 0.90
	targetHandoffP50   = 350 * time.Microsecond
	targetHandoffsPerS = 600.0
	targetSelfReacq    = 0.10
	targetMaxWait      = 100 * time.Millisecond
	targetSentPerAcq   = 4.0
	targetAllocs       = 30.0
)

// report is everything one run measured.
type report struct {
	cfg          config
	quick        bool
	redisVersion string
	s1, s2, s4   *uncontendedTable
	s2x          *uncontendedTable // only with -only S2x
	s2p          *uncontendedTable // only with -only S2p
	s3           *contendedTable
	s5           *scaleResult
	allocs       []allocRow
	targets      []targetRow
}

type uncontendedTable struct {
	title      string
	goroutines int
	contenders []contender
	results    [][]uncontendedResult // per contender, per round
}

type contendedTable struct {
	contenders []contender
	results    [][]contendedResult // per contender, per round
}

// targetRow is one target checked against one figure.
type targetRow struct {
	target, contender, figure string
	met                       bool
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func (r *report) check(target, contender, figure string, ok bool) string {
	r.targets = append(r.targets, targetRow{target, contender, figure, ok})
	return metWord(ok)
}

// write prints the report as Markdown.
func (r *report) write(w io.Writer) {
	fmt.Fprintln(w, "# latchkit benchmarks")
	fmt.Fprintln(w)
	r.writeMachine(w)
	if r.s1 != nil {
		r.writeUncontended(w, r.s1, "S1", targetS1Ratio)
	}
	if r.s2 != nil {
		r.writeUncontended(w, r.s2, "S2", targetS2Ratio)
	}
	if r.s2p != nil {
		r.writeUncontended(w, r.s2p, "S2p", 0)
	}
	if r.s2x != nil {
		r.writeUncontended(w, r.s2x, "S2x", 0)
	}
	if r.s3 != nil {
		r.writeContended(w)
	}
	if r.s4 != nil {
		r.writeUncontended(w, r.s4, "S4", 0)
	}
	if r.allocs != nil {
		r.writeAllocs(w)
	}
	if r.s5 != nil {
		r.writeScale(w)
	}
	if len(r.targets) > 0 {
		fmt.Fprintln(w, "## Targets")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| target | contender | measured | |")
		fmt.Fprintln(w, "|---|---|---:|---|")
		for _, t := range r.targets {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.target, t.contender, t.figure, metWord(t.met))
		}
		fmt.Fprintln(w)
	}
}

func (r *report) writeMachine(w io.Writer) {
	cmd := "cd bench && go run ."
	if r.quick {
		cmd += " -quick"
	}
	if r.cfg.rounds != 3 && !(r.quick && r.cfg.rounds == 1) {
		cmd += fmt.Sprintf(" -rounds %d", r.cfg.rounds)
	}
	if r.cfg.urounds != 9 && !(r.quick && r.cfg.urounds == 3) {
		cmd += fmt.Sprintf(" -urounds %d", r.cfg.urounds)
	}
	if r.cfg.only != "" {
		cmd += " -only " + r.cfg.only
	}
	fmt.Fprintf(w, "Command: `%s`: S1, S2 and S4 in %d interleaved rounds of %v per contender, S3 in %d of %v; "+
		"each round's order rotated by one; figures are medians over the rounds.\n\n",
		cmd, r.cfg.urounds, r.cfg.uncontended, r.cfg.rounds, r.cfg.contended)
	fmt.Fprintln(w, "| machine | |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| CPUs (nproc) | %d |\n", runtime.NumCPU())
	fmt.Fprintf(w, "| CPU | %s |\n", cpuModel())
	fmt.Fprintf(w, "| Go | %s %s/%s |\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "| redis-server | %s (loopback, no persistence, started by the benchmark) |\n", r.redisVersion)
	for _, m := range []string{
		"github.com/redis/go-redis/v9", "github.com/redis/rueidis", "github.com/valkey-io/valkey-go",
		"github.com/go-redsync/redsync/v4", "github.com/bsm/redislock",
	} {
		fmt.Fprintf(w, "| %s | %s |\n", m, moduleVersion(m))
	}
	fmt.Fprintln(w)
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// moduleVersion is the version of a dependency built into this binary.
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "?"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Version + " => " + d.Replace.Path + " " + d.Replace.Version
			}
			return d.Version
		}
	}
	return "?"
}

func (r *report) writeUncontended(w io.Writer, t *uncontendedTable, scenario string, targetRatio float64) {
	fmt.Fprintf(w, "## %s\n\n", t.title)
	fmt.Fprintln(w, "| contender | driver | lock+unlock/s | per round | × floor | commands sent/op | commandstats/op | Redis CPU/op | in scripts/op | errors | target |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
	ops := make(map[string]float64, len(t.contenders))
	for i, c := range t.contenders {
		var xs []float64
		for _, res := range t.results[i] {
			xs = append(xs, res.opsPerSec)
		}
		ops[c.name] = handoff.Median(xs)
	}
	for i, c := range t.contenders {
		var sent, calls, cpu, script []float64
		var errs int64
		var perRound []string
		for _, res := range t.results[i] {
			errs += res.errors
			perRound = append(perRound, fmt.Sprintf("%.0f", res.opsPerSec))
			sent = append(sent, res.sentPerOp)
			calls = append(calls, res.callsPerOp)
			cpu = append(cpu, res.cpuPerOp*1e6)
			script = append(script, res.scriptPerOp*1e6)
		}
		ratio, target := "1.00 (floor)", ""
		if c.floor != "" {
			x := ops[c.name] / ops[c.floor]
			ratio = fmt.Sprintf("%.2f", x)
			if c.latchkit && targetRatio > 0 {
				target = fmt.Sprintf("≥ %.2fx: %s", targetRatio,
					r.check(fmt.Sprintf("%s ≥ %.2fx floor", scenario, targetRatio), c.name, fmt.Sprintf("%.2fx", x), x >= targetRatio))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %.2f | %.2f | %.1f µs | %.1f µs | %d | %s |\n",
			c.name, c.driver, ops[c.name], strings.Join(perRound, " / "), ratio, handoff.Median(sent), handoff.Median(calls), handoff.Median(cpu), handoff.Median(script), errs, target)
	}
	fmt.Fprintln(w)
	// latchkit against the fenced floor of its driver: what latchkit costs
	// beyond the fence that its guarantee needs.
	var fenced []string
	for _, c := range t.contenders {
		if !c.latchkit || c.floor == "" {
			continue
		}
		for _, f := range t.contenders {
			if strings.HasPrefix(f.name, "fenced floor") && f.floor == c.floor && ops[f.name] > 0 {
				fenced = append(fenced, fmt.Sprintf("%s %.2f× (the fenced floor itself %.2f× the floor)", c.name, ops[c.name]/ops[f.name], ops[f.name]/ops[c.floor]))
			}
		}
	}
	if len(fenced) > 0 {
		fmt.Fprintf(w, "Against the fenced floor of the same driver: %s.\n\n", strings.Join(fenced, "; "))
	}
}

// s3HandoverCPU is the median Redis CPU per cross-client hand-over, in
// seconds, of the S3 contender named name, when S3 ran.
func (r *report) s3HandoverCPU(name string) (float64, bool) {
	if r.s3 == nil {
		return 0, false
	}
	for i, c := range r.s3.contenders {
		if c.name != name {
			continue
		}
		var cpu []float64
		for _, res := range r.s3.results[i] {
			if res.Handoffs > 0 {
				cpu = append(cpu, res.server.cpu/float64(res.Handoffs))
			}
		}
		if len(cpu) > 0 {
			return handoff.Median(cpu), true
		}
	}
	return 0, false
}

// fmtMicros formats seconds as microseconds.
func fmtMicros(sec float64) string { return fmt.Sprintf("%.0f µs", sec*1e6) }

func (r *report) writeContended(w io.Writer) {
	cfg := r.cfg
	fmt.Fprintf(w, "## S3: %d clients (each its own driver client) on one key, holding %v, for %v\n\n", cfg.clients, cfg.hold, cfg.contended)
	fmt.Fprintln(w, "Handoff: from the moment A starts its release to the moment B's lock call returns. "+
		"Self-reacquire: grants to the client that released just before. Max wait: the longest lock call, "+
		"or wait still pending at the end, worst of all rounds. Commands sent: counted by client hooks, plus "+
		"the SUBSCRIBE family from commandstats; commandstats total also counts the commands scripts run. "+
		"In scripts: the time Redis spent running EVAL/EVALSHA (commandstats usec, the commands they run included); "+
		"the rest of Redis CPU is reading requests, replying, pub/sub delivery and the event loop. "+
		"In the kernel: the part of Redis CPU spent in system calls (used_cpu_sys: sockets, waking up). "+
		"Gave up: lock calls the library abandoned by itself (the harness calls again, and the wait goes on). "+
		"Errors are counted, not fatal; sums over all rounds. "+
		"Violations: grants while another client held the lock (must be 0).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| contender | acquisitions/s | handoffs/s | handoff p50 | handoff p99 | self-reacquire | max wait | commands sent/acq | commandstats/acq | Redis CPU/acq | Redis CPU/handoff | in the kernel | in scripts/handoff | gave up | release errors | violations |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	// Redis CPU per acquisition, median over the rounds, by contender: the
	// target compares latchkit's with redsync's in the same run.
	cpuOf := map[string]float64{}
	for i, c := range r.s3.contenders {
		var cpu []float64
		for _, res := range r.s3.results[i] {
			cpu = append(cpu, res.server.cpu/float64(res.Acquisitions)*1e6)
		}
		cpuOf[c.name] = handoff.Median(cpu)
	}
	for i, c := range r.s3.contenders {
		var acq, hps, p50, p99, self, sent, total, cpu, cpuHand, kernel, scriptHand []float64
		var maxWait time.Duration
		gaveUp, releaseErrs, violations := 0, 0, 0
		for _, res := range r.s3.results[i] {
			sec := res.elapsed.Seconds()
			n := float64(res.Acquisitions)
			acq = append(acq, n/sec)
			hps = append(hps, float64(res.Handoffs)/sec)
			p50 = append(p50, float64(handoff.Quantile(res.Handoff, 0.50)))
			p99 = append(p99, float64(handoff.Quantile(res.Handoff, 0.99)))
			self = append(self, float64(res.SelfReacq)/max(n-1, 1))
			sent = append(sent, float64(res.sent)/n)
			total = append(total, float64(res.server.calls)/n)
			cpu = append(cpu, res.server.cpu/n*1e6)
			cpuHand = append(cpuHand, res.server.cpu/float64(max(res.Handoffs, 1))*1e6)
			kernel = append(kernel, res.server.sys/max(res.server.cpu, 1e-9))
			scriptHand = append(scriptHand, float64(res.server.scriptUsec)/float64(max(res.Handoffs, 1)))
			maxWait = max(maxWait, res.MaxWait)
			gaveUp += res.GaveUp
			releaseErrs += res.ReleaseErrs
			violations += res.Violations
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %s | %.1f%% | %s | %.2f | %.2f | %.0f µs | %.0f µs | %.0f%% | %.0f µs | %d | %d | %d |\n",
			c.name, handoff.Median(acq), handoff.Median(hps), ms(handoff.Median(p50)), ms(handoff.Median(p99)), 100*handoff.Median(self),
			ms(float64(maxWait)), handoff.Median(sent), handoff.Median(total), handoff.Median(cpu), handoff.Median(cpuHand), 100*handoff.Median(kernel), handoff.Median(scriptHand), gaveUp, releaseErrs, violations)
		if !c.latchkit {
			continue
		}
		selfTarget := targetSelfReacq
		if strings.Contains(c.name, "FairMutex") {
			selfTarget = 0
		}
		r.check(fmt.Sprintf("S3 handoff p50 ≤ %s", ms(float64(targetHandoffP50))), c.name, ms(handoff.Median(p50)), handoff.Median(p50) <= float64(targetHandoffP50))
		r.check(fmt.Sprintf("S3 ≥ %.0f cross-client handoffs/s", targetHandoffsPerS), c.name, fmt.Sprintf("%.0f", handoff.Median(hps)), handoff.Median(hps) >= targetHandoffsPerS)
		r.check(fmt.Sprintf("S3 self-reacquire ≤ %.0f%%", 100*selfTarget), c.name, fmt.Sprintf("%.1f%%", 100*handoff.Median(self)), handoff.Median(self) <= selfTarget)
		r.check(fmt.Sprintf("S3 max wait ≤ %s", ms(float64(targetMaxWait))), c.name, ms(float64(maxWait)), maxWait <= targetMaxWait)
		r.check(fmt.Sprintf("S3 ≤ %.0f commands sent/acquisition", targetSentPerAcq), c.name, fmt.Sprintf("%.2f", handoff.Median(sent)), handoff.Median(sent) <= targetSentPerAcq)
		if peer, ok := cpuOf["redsync"]; ok {
			r.check("S3 Redis CPU/acquisition ≤ redsync's", c.name, fmt.Sprintf("%.0f µs vs %.0f µs", handoff.Median(cpu), peer), handoff.Median(cpu) <= peer)
		}
		r.check("S3 no exclusion violation", c.name, fmt.Sprintf("%d", violations), violations == 0)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Where the commands go: INFO commandstats per acquisition, the commands scripts run included "+
		"(evalsha is what clients sent; set, get, incr, publish and the like inside it are the scripts' work), first round.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| contender | commands per acquisition |")
	fmt.Fprintln(w, "|---|---|")
	for i, c := range r.s3.contenders {
		res := r.s3.results[i][0]
		fmt.Fprintf(w, "| %s | %s |\n", c.name, topCommands(res.server.byCommand, float64(res.Acquisitions), 8))
	}
	fmt.Fprintln(w)
}

// topCommands lists the n most called commands, per acquisition.
func topCommands(by map[string]int64, acquisitions float64, n int) string {
	names := make([]string, 0, len(by))
	for k := range by {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(by[b], by[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(by[k])/acquisitions))
	}
	return strings.Join(parts, ", ")
}

// ms formats nanoseconds as milliseconds.
func ms(ns float64) string {
	return fmt.Sprintf("%.3f ms", ns/1e6)
}

func (r *report) writeAllocs(w io.Writer) {
	fmt.Fprintln(w, "## Allocations per uncontended lock+unlock (testing.AllocsPerRun, process-wide)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| what | allocs/op | how | target |")
	fmt.Fprintln(w, "|---|---:|---|---|")
	for _, a := range r.allocs {
		target := ""
		if a.target {
			target = fmt.Sprintf("< %.0f: %s", targetAllocs,
				r.check(fmt.Sprintf("allocs/op < %.0f on go-redis", targetAllocs), a.name+" ("+a.comment+")", fmt.Sprintf("%.0f", a.allocs), a.allocs < targetAllocs))
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s |\n", a.name, a.allocs, a.comment, target)
	}
	fmt.Fprintln(w)
}

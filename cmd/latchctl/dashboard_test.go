package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/latchkit/latchkit/internal/testrig/redistest"
)

// The dashboard and alert rules shipped in deploy/.
const (
	dashboardFile = "../../deploy/grafana/dashboards/latchkit.json"
	rulesFile     = "../../deploy/prometheus/latchkit-alerts.yaml"
)

// queries are every PromQL expression of the dashboard (its panels'
// targets and its variables' queries) and of the alert rules.
func queries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var qs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			qs = append(qs, v.Definition)
		}
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	exprs := regexp.MustCompile(`(?m)^\s+expr: (.+)$`).FindAllStringSubmatch(string(rules), -1)
	if len(exprs) < 4 {
		t.Fatalf("%s: %d alert expressions, want the four the issue names at least", rulesFile, len(exprs))
	}
	for _, m := range exprs {
		qs = append(qs, m[1])
	}
	return qs
}

var (
	metricRe   = regexp.MustCompile(`\blatchkit_[a-z0-9_]+`)
	matcherRe  = regexp.MustCompile(`\{([^}]*)\}`)
	labelRe    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	groupingRe = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	valuesRe   = regexp.MustCompile(`label_values\(([^,]+),\s*([a-zA-Z_]+)\s*\)`)
)

// series are the series names a scrape exports, each with its label names:
// a histogram family's as _bucket (with le), _sum and _count.
func series(fams map[string]*dto.MetricFamily) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		for _, l := range labels {
			out[name][l.GetName()] = true
		}
		for _, l := range extra {
			out[name][l] = true
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetType() == dto.MetricType_HISTOGRAM {
				add(name+"_bucket", m.GetLabel(), "le")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			} else {
				add(name, m.GetLabel())
			}
		}
	}
	return out
}

// TestDashboardQueriesExportedMetrics (issue 41, item 4): the demo run with
// -metrics-addr exports, through the OpenTelemetry Prometheus exporter,
// every metric the dashboard and the alert rules query, with every label
// they match or group by: no panel or rule on a metric or label that does
// not exist.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	qs := queries(t)
	addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out, errOut bytes.Buffer
	go func() {
		done <- run(ctx, []string{"demo", "-metrics-addr", addr, "-duration", "3s", "-traders", "8", "-clients", "2", "-items", "12"}, &out, &errOut)
	}()
	finished := false
	defer func() {
		if !finished {
			cancel()
			<-done
		}
	}()
	var have map[string]map[string]bool
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no scrape with every latchkit metric; the last one had %v", slices.Sorted(func(yield func(string) bool) {
				for k := range have {
					if !yield(k) {
						return
					}
				}
			}))
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		have = series(fams)
		if have["latchkit_lease_oldest_age_seconds"] != nil && have["latchkit_acquire_duration_seconds_bucket"] != nil && have["latchkit_hold_duration_seconds_bucket"] != nil {
			break // the first holds have ended and been measured
		}
	}
	checked := 0
	for _, q := range qs {
		// Metrics are the latchkit_ names outside the label contexts
		// (matchers, groupings, label_values' label).
		bare := valuesRe.ReplaceAllString(groupingRe.ReplaceAllString(matcherRe.ReplaceAllString(q, ""), ""), "$1")
		metrics := metricRe.FindAllString(bare, -1)
		if len(metrics) == 0 {
			t.Errorf("query %q reads no latchkit metric", q)
			continue
		}
		var labels []string
		for _, m := range matcherRe.FindAllStringSubmatch(q, -1) {
			for _, l := range labelRe.FindAllStringSubmatch(m[1], -1) {
				labels = append(labels, l[1])
			}
		}
		for _, g := range groupingRe.FindAllStringSubmatch(q, -1) {
			for _, l := range strings.Split(g[1], ",") {
				labels = append(labels, strings.TrimSpace(l))
			}
		}
		for _, m := range valuesRe.FindAllStringSubmatch(q, -1) {
			labels = append(labels, m[2])
		}
		for _, m := range metrics {
			if have[m] == nil {
				t.Errorf("query %q reads %s, which the demo does not export", q, m)
			}
			checked++
		}
		for _, l := range labels {
			if !slices.ContainsFunc(metrics, func(m string) bool { return have[m][l] }) {
				t.Errorf("query %q uses label %s, which none of %v carries", q, l, metrics)
			}
			checked++
		}
	}
	if checked < 30 {
		t.Errorf("%d metrics and labels checked: the queries were not read", checked)
	}
	finished = true
	if code := <-done; code != 0 {
		t.Errorf("demo: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

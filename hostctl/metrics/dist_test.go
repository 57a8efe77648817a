package metrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/vmeta/vmeta/hostctl/cli"
	"github.com/vmeta/vmeta/hostctl/cli/serve"
	"github.com/vmeta/vmeta/internal/testenv"
)

// The dashboard and the alert rules the host package installs
// (internal/pkgbuild: /usr/share/vmeta/).
var (
	distDashboard = filepath.Join("..", "dist", "grafana", "vmeta.json")
	distRulesDir  = filepath.Join("..", "dist", "prometheus")
	distRules     = filepath.Join(distRulesDir, "vmeta.rules.yml")
	distRuleTests = "vmeta.rules.test.yml" // in distRulesDir, which it names its rules from
)

// TestPromtoolRules: the alert rules pass `promtool check rules` and
// their unit tests (`promtool test rules`: each alert fires on a failing
// host's series after its `for`, with its labels and annotations, and
// stays quiet on a healthy one). promtool is Debian's, from the
// prometheus package (test/setup installs it).
func TestPromtoolRules(t *testing.T) {
	promtool := testenv.LookPath(t, "promtool")
	for _, args := range [][]string{{"check", "rules", filepath.Base(distRules)}, {"test", "rules", distRuleTests}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = distRulesDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// query is one PromQL expression of the dashboard or the rules, and
// where it is.
type query struct{ where, expr string }

// dashboardQueries returns every expression of the dashboard: its
// panels' targets (rows' panels too) and its query variables'
// label_values(...) selectors, with Grafana's variables replaced by what
// Grafana would put there.
func dashboardQueries(t *testing.T, path string) []query {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	}
	type gridPos struct{ H, W, X, Y int }
	type panel struct {
		GridPos gridPos  `json:"gridPos"`
		ID      int      `json:"id"`
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.UID == "" {
		t.Errorf("%s: no uid", path)
	}
	var out []query
	ids := map[int]bool{}
	var placed []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d twice", path, p.ID)
			}
			ids[p.ID] = true
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
				t.Errorf("%s: panel %q: gridPos %+v outside Grafana's 24 columns", path, p.Title, g)
			}
			for _, q := range placed {
				h := q.GridPos
				if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
					t.Errorf("%s: panels %q and %q overlap", path, q.Title, p.Title)
				}
			}
			placed = append(placed, p)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q queries nothing", path, p.Title)
			}
			for _, tg := range p.Targets {
				out = append(out, query{fmt.Sprintf("dashboard panel %q target %s", p.Title, tg.RefID), grafanaVars(tg.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("%s: variable %s: %v", path, v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("%s: variable %s: %q is not label_values(SELECTOR, LABEL)", path, v.Name, q.Query)
			continue
		}
		out = append(out, query{"dashboard variable " + v.Name, grafanaVars(m[1])})
	}
	return out
}

// grafanaVars replaces the dashboard's variables with values Grafana
// could give them, so that the expression is PromQL.
func grafanaVars(expr string) string {
	return strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h", "$instance", ".*").Replace(expr)
}

// ruleQueries returns the expression of every rule of a rule file.
func ruleQueries(t *testing.T, path string) []query {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, query{fmt.Sprintf("rule %s%s", r.Alert, r.Record), r.Expr})
		}
	}
	return out
}

// targetLabels are the labels Prometheus adds to every scraped series
// (the target's), which no exposition has.
var targetLabels = []string{"instance", "job"}

// unserved returns, for each series selector of the queries, why no
// series of the exposition fams matches it: an unknown metric name, or
// label matchers no served series of that name satisfies (target labels
// aside). An expression that does not parse is reported too.
func unserved(qs []query, fams map[string]*dto.MetricFamily) []string {
	// The series of the exposition, as Prometheus stores them: a
	// histogram's as _bucket (with le), _sum and _count.
	series := map[string][]labels.Labels{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			b := labels.NewScratchBuilder(len(m.GetLabel()) + 1)
			for _, lp := range m.GetLabel() {
				b.Add(lp.GetName(), lp.GetValue())
			}
			b.Sort()
			ls := b.Labels()
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				for _, bk := range m.GetHistogram().GetBucket() {
					lb := labels.NewBuilder(ls)
					lb.Set("le", fmt.Sprint(bk.GetUpperBound()))
					series[name+"_bucket"] = append(series[name+"_bucket"], lb.Labels())
				}
				series[name+"_sum"] = append(series[name+"_sum"], ls)
				series[name+"_count"] = append(series[name+"_count"], ls)
			case dto.MetricType_SUMMARY:
				series[name] = append(series[name], ls)
				series[name+"_sum"] = append(series[name+"_sum"], ls)
				series[name+"_count"] = append(series[name+"_count"], ls)
			default:
				series[name] = append(series[name], ls)
			}
		}
	}
	p := parser.NewParser(parser.Options{})
	var bad []string
	for _, q := range qs {
		expr, err := p.ParseExpr(q.expr)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %q does not parse: %v", q.where, q.expr, err))
			continue
		}
		selectors := 0
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			selectors++
			var name string
			var matchers []*labels.Matcher
			for _, m := range vs.LabelMatchers {
				switch {
				case m.Name == model.MetricNameLabel:
					if m.Type != labels.MatchEqual {
						bad = append(bad, fmt.Sprintf("%s: %s: a metric name must be named, not matched", q.where, vs))
						return nil
					}
					name = m.Value
				case !slices.Contains(targetLabels, m.Name):
					matchers = append(matchers, m)
				}
			}
			got, ok := series[name]
			if !ok {
				bad = append(bad, fmt.Sprintf("%s: %s: hostctl serve serves no series %s", q.where, vs, name))
				return nil
			}
			for _, ls := range got {
				if all(matchers, ls) {
					return nil
				}
			}
			bad = append(bad, fmt.Sprintf("%s: %s: no series %s served matches %v", q.where, vs, name, matchers))
			return nil
		})
		if selectors == 0 {
			bad = append(bad, fmt.Sprintf("%s: %q selects no series", q.where, q.expr))
		}
	}
	return bad
}

// parseExposition parses a scrape in the text format.
func parseExposition(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not valid text exposition: %v", err)
	}
	return fams
}

func all(ms []*labels.Matcher, ls labels.Labels) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// TestUnservedFindsMissingSeries: the check itself reports a metric that
// is not served, a label matcher no served series satisfies, and an
// expression that does not parse; it accepts a histogram's _bucket and a
// target label it cannot see.
func TestUnservedFindsMissingSeries(t *testing.T) {
	gauge, hist := dto.MetricType_GAUGE, dto.MetricType_HISTOGRAM
	str := func(s string) *string { return &s }
	fams := map[string]*dto.MetricFamily{
		"vmeta_up": {Name: str("vmeta_up"), Type: &gauge, Metric: []*dto.Metric{
			{Label: []*dto.LabelPair{{Name: str("state"), Value: str("ok")}}, Gauge: &dto.Gauge{}}}},
		"vmeta_seconds": {Name: str("vmeta_seconds"), Type: &hist, Metric: []*dto.Metric{
			{Histogram: &dto.Histogram{Bucket: []*dto.Bucket{{UpperBound: new(float64)}}}}}},
	}
	qs := []query{
		{"good", `sum by (le) (rate(vmeta_seconds_bucket{instance="x"}[5m])) and on() vmeta_up{state=~"ok|bad"}`},
		{"missing", `vmeta_down > 0`},
		{"label", `vmeta_up{state="bad"}`},
		{"syntax", `rate(vmeta_up[5m]`},
		{"constant", `vector(1)`},
	}
	got := unserved(qs, fams)
	want := []string{"missing:", "label:", "syntax:", "constant:"}
	if len(got) != len(want) {
		t.Fatalf("reported %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("problem %d: %s, want one of %q", i, got[i], w)
		}
	}
}

// TestDashboardAndRulesQueryServedSeries runs a real `hostctl serve` (on
// libvirt, so that the connection gauge is there; its metrics listener
// serves the metadata service's series and hostctl's) with one instance
// applied, scrapes it, and
// fails on any series the dashboard or an alert rule selects that the
// scrape does not have — by name, and by label matchers (a status or
// code that is never exported). The metadata replica (vmeta-metadata)
// serves the same vmeta_metadata_* series from the same code (server/).
func TestDashboardAndRulesQueryServedSeries(t *testing.T) {
	qs := append(dashboardQueries(t, distDashboard), ruleQueries(t, distRules)...)
	if len(qs) < 20 {
		t.Fatalf("only %d queries read from the dashboard and the rules", len(qs))
	}
	uri := testenv.RequireLibvirt(t)
	dir := t.TempDir()
	// One instance (defined, not started), so that the instance counts
	// have a series; its domain goes after the daemon stops.
	name := testenv.UniqueDomainName(t)
	testenv.CleanupDomain(t, uri, name)
	spec := filepath.Join(dir, "one.json")
	if err := os.WriteFile(spec, []byte(`{"name":"`+name+`","hostname":"one","project_id":"demo"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve", "--data-dir", filepath.Join(dir, "data"), "--socket", filepath.Join(dir, "hostctl.sock"),
			"--virt", "libvirt", "--libvirt-uri", uri, "--domain-type", "qemu", "--reconcile-interval", "0",
			"--host", "dash-host", "--metadata-listen", "127.0.0.1:0", "--metadata-metrics-listen", "127.0.0.1:0", "--apply", spec,
		}, cli.Env{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader("")}, serve.Command())
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, stderr.String())
		}
	})
	re := regexp.MustCompile(` metadata_metrics=(\S+)`)
	var addr string
	for deadline := time.Now().Add(60 * time.Second); addr == ""; {
		if m := re.FindStringSubmatch(stderr.String()); m != nil && strings.Contains(stdout.String(), "applied") {
			addr = m[1]
			break
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("serve exited %d before serving:\n%s", code, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", stderr.String())
		}
	}
	code, body := testenv.HTTP(t, "GET", "http://"+addr+"/metrics", nil, "")
	if code != 200 {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	fams := parseExposition(t, body)
	for _, bad := range unserved(qs, fams) {
		t.Error(bad)
	}
	t.Logf("%d queries of the dashboard and the rules checked against %d metric families served", len(qs), len(fams))
}

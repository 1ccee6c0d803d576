package dashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
)

// queryCheck is one PromQL expression to check, and where it comes from.
type queryCheck struct {
	where string // "rules: alert RedlockQuorumLost", "grafana: panel "Quorum margin" A"
	expr  string
	label string // for a Grafana label_values variable: the label the answer must carry
}

// TestPrometheusQueries starts a real Prometheus scraping a real daemon
// under a small workload with one master paused (SIGSTOP), and evaluates
// every expression of the rules and of the Grafana dashboard through
// Prometheus's HTTP API. An expression fails if it does not parse, if it
// names a metric the daemon does not export (and no rule records), or if
// it returns no series. Comparisons are evaluated as `bool` comparisons,
// so that an alert that is not firing still shows its series.
func TestPrometheusQueries(t *testing.T) {
	promBin := need(t, "prometheus", "prometheus", "REDLOCK_REQUIRE_PROMETHEUS")
	rulesPath := filepath.Join(repoRoot, "deploy", "prometheus", "redlockd.rules.yml")
	checks, recorded := ruleChecks(t, rulesPath)
	checks = append(checks, grafanaChecks(t, filepath.Join(repoRoot, "deploy", "grafana", "redlockd.json"))...)

	d := startDeployment(t)
	ctx, cancel := context.WithCancel(t.Context())
	wait := d.workload(ctx)
	t.Cleanup(func() { cancel(); wait() })
	paused := d.masters[4]
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = paused.Resume() })

	exported := daemonMetricNames(t, d)
	known := map[string]bool{"up": true}
	for n := range exported {
		known[n] = true
	}
	for _, n := range recorded {
		known[n] = true
	}
	prom := startPrometheus(t, promBin, d.addr, rulesPath)

	type parsed struct {
		queryCheck
		asBool string // expr with every comparison made a bool comparison
	}
	var todo []parsed
	for _, c := range checks {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(c.expr)
		if err != nil {
			t.Errorf("%s: does not parse: %v\n  %s", c.where, err, c.expr)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			switch x := n.(type) {
			case *parser.VectorSelector:
				if !known[x.Name] {
					t.Errorf("%s: names %q, which the daemon does not export and no rule records\n  %s", c.where, x.Name, c.expr)
				}
			case *parser.BinaryExpr:
				if x.Op.IsComparisonOperator() {
					x.ReturnBool = true
				}
			}
			return nil
		})
		todo = append(todo, parsed{c, expr.String()})
	}
	if t.Failed() {
		return
	}

	// Rates need two scrapes in their window and the recording group runs
	// every 15s: retry the expressions without series until a deadline.
	deadline := time.Now().Add(90 * time.Second)
	for {
		var missing []string
		for _, c := range todo {
			// The expression as written must be accepted by the server.
			if _, err := prom.query(c.expr); err != nil {
				t.Fatalf("%s: Prometheus refuses it: %v\n  %s", c.where, err, c.expr)
			}
			res, err := prom.query(c.asBool)
			if err != nil {
				t.Fatalf("%s: Prometheus refuses the bool form: %v\n  %s", c.where, err, c.asBool)
			}
			switch {
			case len(res) == 0:
				missing = append(missing, fmt.Sprintf("%s: no series\n  %s", c.where, c.asBool))
			case c.label != "" && res[0].Metric[c.label] == "":
				missing = append(missing, fmt.Sprintf("%s: series without label %q\n  %s", c.where, c.label, c.asBool))
			}
		}
		if len(missing) == 0 {
			t.Logf("%d expressions of the rules and the dashboard evaluated with series", len(todo))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d expressions returned no series after 90s:\n%s", len(missing), len(todo), strings.Join(missing, "\n"))
		}
		time.Sleep(2 * time.Second)
	}
}

// ruleChecks lists every rule's expression in the rules file, and the
// names the recording rules record.
func ruleChecks(t *testing.T, path string) (checks []queryCheck, recorded []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Record string `yaml:"record"`
				Alert  string `yaml:"alert"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := "alert " + r.Alert
			if r.Record != "" {
				name = "record " + r.Record
				recorded = append(recorded, r.Record)
			}
			checks = append(checks, queryCheck{where: "rules: " + name, expr: r.Expr})
		}
	}
	if len(checks) == 0 {
		t.Fatalf("%s: no rules", path)
	}
	return checks, recorded
}

// grafanaVars replaces the dashboard's variables as Grafana would for
// "every daemon of job redlockd".
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$job", "redlockd", "$instance", ".*")

var labelValuesRe = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// grafanaChecks lists every target expression of every panel (rows
// included) and the selector of every label_values variable.
func grafanaChecks(t *testing.T, path string) []queryCheck {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var checks []queryCheck
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", path, err)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("%s: panel %q target %s has no expr", path, p.Title, tg.RefID)
					continue
				}
				checks = append(checks, queryCheck{where: fmt.Sprintf("grafana: panel %q %s", p.Title, tg.RefID), expr: grafanaVars.Replace(tg.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := labelValuesRe.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", path, v.Name, q)
			continue
		}
		checks = append(checks, queryCheck{where: "grafana: variable " + v.Name, expr: grafanaVars.Replace(m[1]), label: m[2]})
	}
	if len(checks) == 0 {
		t.Fatalf("%s: no queries", path)
	}
	return checks
}

// daemonMetricNames reads the names of the series GET /metrics exports
// (histograms as their _bucket, _sum and _count series).
func daemonMetricNames(t *testing.T, d *deployment) map[string]bool {
	t.Helper()
	resp, err := d.client.Get(d.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !names["redlock_quorum_needed"] {
		t.Fatalf("GET /metrics has no redlock_quorum_needed: %v", keys(names))
	}
	return names
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type prometheus struct {
	url    string
	client *http.Client
}

// startPrometheus runs Prometheus scraping target every second as job
// "redlockd", with the rules loaded, until the test ends.
func startPrometheus(t *testing.T, bin, target, rulesPath string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: redlockd
    static_configs:
      - targets: [%q]
`, rulesPath, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log (last 4 KiB):\n%s", tail(b, 4096))
		}
	})
	p := &prometheus{url: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.client.Get(p.url + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("prometheus exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus on %s not ready after 30s: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
}

// query evaluates expr now through GET /api/v1/query and returns its
// series (a scalar answer is one series without labels).
func (p *prometheus) query(expr string) ([]promSeries, error) {
	resp, err := p.client.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", body.ErrorType, body.Error)
	}
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body.Data, &data); err != nil {
		return nil, err
	}
	if data.ResultType == "scalar" || data.ResultType == "string" {
		return []promSeries{{}}, nil
	}
	var res []promSeries
	if err := json.Unmarshal(data.Result, &res); err != nil {
		return nil, err
	}
	return res, nil
}

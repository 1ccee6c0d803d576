package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Report is a drill run: its settings and one Result per scenario.
type Report struct {
	Target   string    `json:"target"`
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	TTL      string    `json:"ttl"`
	Clients  int       `json:"clients"`
	Keys     int       `json:"keys"`
	Via      string    `json:"via"`
	Seed     uint64    `json:"seed"`
	Results  []*Result `json:"results"`
}

// OK reports whether every scenario passed: no unexpected violation, no
// control that missed what it must catch, no drill error.
func (r *Report) OK() bool {
	for _, res := range r.Results {
		if !res.Pass() {
			return false
		}
	}
	return true
}

// Table is the human summary, a Markdown table.
func (r *Report) Table() string {
	var b strings.Builder
	b.WriteString("| scenario | faults injected | grants | failures | violations | p50 | p99 | result |\n")
	b.WriteString("|---|---|---:|---:|---|---:|---:|---|\n")
	for _, res := range r.Results {
		if res.Skipped != "" {
			fmt.Fprintf(&b, "| %s | — | — | — | — | — | — | skipped: %s |\n", res.Scenario, res.Skipped)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s | %s |\n",
			res.Scenario, mdEscape(res.Faults), res.Grants, res.Failures, violationCell(res),
			fmtMS(res.P50), fmtMS(res.P99), resultCell(res))
	}
	return b.String()
}

func violationCell(res *Result) string {
	if len(res.Counts) == 0 {
		return "0"
	}
	var parts []string
	keys := make([]string, 0, len(res.Counts))
	for k := range res.Counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, res.Counts[k]))
	}
	return strings.Join(parts, " ")
}

func resultCell(res *Result) string {
	switch v := res.Verdict(); v {
	case "caught":
		return "caught " + strings.Join(res.Caught, ", ") + " (control)"
	case "MISSED":
		return "**MISSED** " + strings.Join(res.Missed, ", ")
	case "VIOLATION":
		return fmt.Sprintf("**VIOLATION** (%d unexpected)", res.Unexpected)
	case "ERROR":
		return "**ERROR** " + mdEscape(res.Error)
	default:
		return v
	}
}

func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Markdown is the whole report: settings, the table, then per scenario its
// notes and the violations found.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# redlockd chaos drill: %s target\n\n", r.Target)
	fmt.Fprintf(&b, "Started %s; workload scenarios ran %s each, TTL %s, %d clients × %d keys via %s, seed %d.\n\n",
		r.Started.Format(time.RFC3339), r.Duration, r.TTL, r.Clients, r.Keys, r.Via, r.Seed)
	b.WriteString(r.Table())
	b.WriteString("\nInvariants: I1 no overlapping leases of one key; I2 fences increase in real-time order and the fenced resource accepted no stale write; I3 every call answered within its bound; I4 no lock key outlives its TTL; I5 with ≤ 2 masters faulty uncontended acquires succeed; I6 with ≥ 3 faulty zero grants and fast errors. A negative control disables a protection (or pauses the holder) and passes only if the checker catches what it must.\n")
	if r.OK() {
		b.WriteString("\n**All scenarios passed**: no unexpected violation, every negative control caught.\n")
	} else {
		b.WriteString("\n**FAILED**: see the scenarios marked above.\n")
	}
	for _, res := range r.Results {
		if res.Skipped != "" {
			continue
		}
		fmt.Fprintf(&b, "\n## %s — %s\n\n%s. Elapsed %s; porcupine (fencing model): %s.",
			res.Scenario, res.Verdict(), res.Summary, res.Elapsed.Round(100*time.Millisecond), res.Linear)
		if res.Timeline != "" {
			fmt.Fprintf(&b, " Timeline: [%s](%s).", res.Timeline, res.Timeline)
		}
		if res.StaleRejected > 0 {
			fmt.Fprintf(&b, " Stale writes rejected by the fence: %d.", res.StaleRejected)
		}
		b.WriteString("\n")
		for _, n := range res.Notes {
			fmt.Fprintf(&b, "\n- note: %s", n)
		}
		for _, v := range res.Violations {
			fmt.Fprintf(&b, "\n- %s: %s", v.Invariant, v.Detail)
		}
		if len(res.Notes)+len(res.Violations) > 0 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// Write writes report.md, report.json and index.html (links to the
// timelines) into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := indexPage.Execute(&b, r); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "index.html"), b.Bytes(), 0o644)
}

// indexPage is index.html: every scenario's verdict, linked to its
// timeline when it has one.
var indexPage = template.Must(template.New("index").Parse(`<!doctype html><meta charset=utf-8>
<title>redlockd chaos: {{.Target}}</title>
<h1>redlockd chaos drill: {{.Target}} target</h1>
<ul>
{{- range .Results}}
<li>{{if .Timeline}}<a href="{{.Timeline}}">{{.Scenario}}</a>{{else}}{{.Scenario}}{{end}} — {{.Verdict}}</li>
{{- end}}
</ul>
<p>See report.md for the table and report.json for the data.</p>
`))

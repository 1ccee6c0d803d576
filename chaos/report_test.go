package chaos

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReportIndexEscapes: names and verdicts reach index.html escaped, and
// only a scenario with a timeline gets a link.
func TestReportIndexEscapes(t *testing.T) {
	dir := t.TempDir()
	r := &Report{Target: `local<script>`, Results: []*Result{
		{Scenario: "kill-2", Timeline: "timeline-kill-2.html", Counts: map[string]int{}},
		{Scenario: `a"b<c>`, Error: "target: boom", Counts: map[string]int{}},
	}}
	require.NoError(t, r.Write(dir))
	b, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	page := string(b)
	assert.Contains(t, page, "<title>redlockd chaos: local&lt;script&gt;</title>")
	assert.Contains(t, page, `<li><a href="timeline-kill-2.html">kill-2</a> — `)
	assert.Contains(t, page, "<li>a&#34;b&lt;c&gt; — ")
	assert.NotContains(t, page, "<script>")
}

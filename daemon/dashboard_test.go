package daemon

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDashboardResultColours: every result the daemon counts has a colour
// of its own on the page's outcome chart. Results without one fell back to
// a palette by position, and two legend entries shared a colour
// (bad_request and unsupported_media_type, acquired and too_large).
func TestDashboardResultColours(t *testing.T) {
	js := string(dashboardJS)
	i := strings.Index(js, "const resultColor = {")
	require.GreaterOrEqual(t, i, 0, "dashboard.js has no resultColor")
	j := strings.Index(js[i:], "};")
	require.Greater(t, j, 0)
	colours := map[string]string{}
	for _, m := range regexp.MustCompile(`(\w+): "(#[0-9a-fA-F]{3,6})"`).FindAllStringSubmatch(js[i:i+j], -1) {
		colours[m[1]] = strings.ToLower(m[2])
	}
	byColour := map[string]string{}
	for _, r := range resultNames {
		c, ok := colours[r]
		if !assert.True(t, ok, "result %s has no colour", r) {
			continue
		}
		if other, dup := byColour[c]; dup {
			t.Errorf("results %s and %s share colour %s", other, r, c)
		}
		byColour[c] = r
	}
}

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// The README's first curl lines (the H and U variables, the first acquire)
// run as written in bash and in zsh, the macOS default shell, which does
// not split an unquoted $H into words.
func TestREADMECurlLinesInBashAndZsh(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(raw)
	i := strings.Index(readme, "## The HTTP API")
	require.GreaterOrEqual(t, i, 0)
	block := readme[i:]
	block = block[strings.Index(block, "```sh\n")+len("```sh\n"):]
	block = block[:strings.Index(block, "```")]
	var lines []string
	for l := range strings.SplitSeq(block, "\n") {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, l)
		if strings.HasPrefix(l, "curl ") {
			break
		}
	}
	require.Len(t, lines, 3, "H=, U= and the first curl: %q", lines)

	base := daemonURL(t, func(c *config.Config) {
		c.APIKeys = append(c.APIKeys, config.APIKey{Name: "dev", Key: DevAPIKey})
	})
	for _, sh := range []string{"bash", "zsh"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			t.Errorf("%s is not installed (make test-deps installs it)", sh)
			continue
		}
		script := strings.ReplaceAll(strings.Join(lines, "\n"), "http://127.0.0.1:7070", base)
		script = strings.ReplaceAll(script, "order:pay:10086", "readme:"+sh)
		out, err := exec.Command(path, "-c", script).CombinedOutput()
		require.NoError(t, err, "%s: %s", sh, out)
		assert.Contains(t, string(out), `"acquired":true`, "%s ran %q: %s", sh, script, out)
	}
}

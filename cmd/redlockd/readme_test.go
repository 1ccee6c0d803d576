package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// docFiles are the user documentation: the README and every page in docs/.
// Tests that hold the docs to the code read them through this, so that
// moving a section between the README and docs/ does not lose its check.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	paths = append([]string{"../../README.md"}, paths...)
	files := make(map[string]string, len(paths))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		files[strings.TrimPrefix(p, "../../")] = string(raw)
	}
	return files
}

// curlLines are the first lines of the first sh block after heading in
// doc: the H and U variables and the first curl.
func curlLines(t *testing.T, name, doc, heading string) []string {
	t.Helper()
	i := strings.Index(doc, heading)
	require.GreaterOrEqual(t, i, 0, "%s has a heading %q", name, heading)
	block := doc[i:]
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
	require.Len(t, lines, 3, "%s: H=, U= and the first curl: %q", name, lines)
	return lines
}

// The first curl lines (the H and U variables, the first acquire) of the
// README's example and of docs/api.md run as written in bash and in zsh,
// the macOS default shell, which does not split an unquoted $H into words.
func TestREADMECurlLinesInBashAndZsh(t *testing.T) {
	docs := docFiles(t)
	examples := map[string][]string{
		"README.md":   curlLines(t, "README.md", docs["README.md"], "## The HTTP API"),
		"docs/api.md": curlLines(t, "docs/api.md", docs["docs/api.md"], "# The HTTP API"),
	}

	base := daemonURL(t, func(c *config.Config) {
		c.APIKeys = append(c.APIKeys, config.APIKey{Name: "dev", Key: DevAPIKey})
	})
	for _, sh := range []string{"bash", "zsh"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			t.Errorf("%s is not installed (make test-deps installs it)", sh)
			continue
		}
		for name, lines := range examples {
			script := strings.ReplaceAll(strings.Join(lines, "\n"), "http://127.0.0.1:7070", base)
			script = strings.ReplaceAll(script, "order:pay:10086", "readme:"+sh+":"+name)
			out, err := exec.Command(path, "-c", script).CombinedOutput()
			require.NoError(t, err, "%s, %s: %s", sh, name, out)
			assert.Contains(t, string(out), `"acquired":true`, "%s ran %q from %s: %s", sh, script, name, out)
		}
	}
}

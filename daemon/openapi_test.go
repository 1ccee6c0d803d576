package daemon

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/redlockd/redlockd/api"
)

func TestServesOpenAPI(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	r := ts.do(t, http.MethodGet, "/openapi.yaml", "", nil)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "application/yaml", r.Header.Get("Content-Type"))
	assert.Equal(t, string(api.OpenAPI), r.Raw, "the file, as is, without an API key")
	assert.Contains(t, r.Raw, "openapi: 3.1.0")

	r = ts.do(t, http.MethodPost, "/openapi.yaml", "", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.Status)
}

// TestDocsAPIMatchesOpenAPI keeps docs/api.md in line with the contract,
// api/openapi.yaml, both ways: every path, request field, answer field,
// envelope field and error code the contract names is in the page (the
// request fields and error codes in its tables, with each code's status as
// the contract gives it), and every request field and code in the page's
// tables, and every endpoint it names, is in the contract (the operator
// endpoints, which the contract leaves out, as the ones its description
// names).
func TestDocsAPIMatchesOpenAPI(t *testing.T) {
	raw, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	doc := string(raw)

	var spec struct {
		Info  struct{ Description string }
		Paths map[string]map[string]any
		Comp  struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum        []string
					Description string
				}
			}
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(api.OpenAPI, &spec))
	require.NotEmpty(t, spec.Paths)

	// Endpoints: every path and method of the contract, as "`METHOD path`".
	contract := map[string]bool{}
	for path, ops := range spec.Paths {
		for method := range ops {
			ep := strings.ToUpper(method) + " " + path
			contract[ep] = true
			assert.True(t, strings.Contains(doc, "`"+ep+"`"), "docs/api.md names the contract's endpoint %s", ep)
		}
	}
	// And every endpoint the page names is in the contract, or is an
	// operator endpoint the contract's description names.
	for _, m := range regexp.MustCompile("`(GET|POST|PUT|DELETE|PATCH) (/[^`?\\[ ]*)").FindAllStringSubmatch(doc, -1) {
		ep := m[1] + " " + m[2]
		if contract[ep] {
			continue
		}
		assert.True(t, strings.Contains(spec.Info.Description, "`"+m[2]+"`") ||
			strings.Contains(spec.Info.Description, "`"+ep+"`"),
			"docs/api.md names %s, which is neither in api/openapi.yaml's paths nor an operator endpoint its description names", ep)
	}

	// Request fields: the page's field table is exactly LockRequest.
	req := spec.Comp.Schemas["LockRequest"].Properties
	require.NotEmpty(t, req)
	table := docTable(t, doc, "| field | required | meaning |")
	assert.ElementsMatch(t, keys(req), keys(table), "docs/api.md's field table and LockRequest's properties")

	// Error codes: the page's code table is exactly Error.code's enum, each
	// with the status the contract's description gives it.
	code := spec.Comp.Schemas["Error"].Properties["code"]
	require.NotEmpty(t, code.Enum)
	codes := docTable(t, doc, "| code | status | meaning |")
	assert.ElementsMatch(t, code.Enum, keys(codes), "docs/api.md's code table and Error.code's enum")
	sent := map[string]string{}
	for _, m := range regexp.MustCompile(`([a-z_]+) \((\d{3})`).FindAllStringSubmatch(code.Description, -1) {
		sent[m[1]] = m[2]
	}
	for _, c := range code.Enum {
		want, ok := sent[c]
		if !ok {
			want = "—" // reserved: the contract names no status
		}
		assert.Equal(t, want, codes[c][0], "status of %s in docs/api.md's code table", c)
	}

	// Answer and envelope fields: each is named in the page.
	for _, schema := range []string{"LockData", "Answered", "Error"} {
		props := spec.Comp.Schemas[schema].Properties
		require.NotEmpty(t, props, schema)
		for name := range props {
			assert.True(t, strings.Contains(doc, "`"+name+"`") || strings.Contains(doc, `"`+name+`":`),
				"docs/api.md names %s's field %s", schema, name)
		}
	}
}

// docTable returns the rows of the Markdown table under header in doc,
// by the first column (without its backticks), with the other columns.
func docTable(t *testing.T, doc, header string) map[string][]string {
	t.Helper()
	i := strings.Index(doc, header+"\n")
	require.GreaterOrEqual(t, i, 0, "docs/api.md has a table %q", header)
	rows := map[string][]string{}
	lines := strings.Split(doc[i:], "\n")
	for _, l := range lines[2:] { // the header and its |---| line
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		name := strings.Trim(cells[0], "`")
		_, dup := rows[name]
		require.False(t, dup, "%s appears twice in %q", name, header)
		rows[name] = cells[1:]
	}
	require.NotEmpty(t, rows, header)
	return rows
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

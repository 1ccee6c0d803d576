package daemon

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The URL checks run before authentication, so their cost must not grow
// with the request: a URL beyond the bounds is refused before any hash,
// and within them at most maxURLHashes parts are hashed, however many
// could be keys. Counted, not timed (BenchmarkPreAuth has the times).
func TestURLCheckWorkIsBounded(t *testing.T) {
	f := newFakeLocker()
	s, err := New(nil, validOptions(f))
	require.NoError(t, err)
	h := s.Handler()
	long := strings.Repeat("k", 20) // could be a key by its shape
	for _, tc := range []struct {
		name, target string
		status       int
		msg          string
		maxHashes    int64
	}{
		{"plain", "/v1/lock", http.StatusUnauthorized, "missing API key", 0},
		{"short query", "/v1/history?since_ms=1735689600123", http.StatusOK, "", 0},
		{"30,000 parameters", "/v1/lock?" + strings.Repeat("a&", 29999) + "a", http.StatusRequestURITooLong,
			"URL query string: 59999 bytes is above the limit of 1024 bytes", 0},
		{"17 parameters", "/v1/lock?" + strings.Repeat("a&", 16) + "a", http.StatusBadRequest,
			"URL query string: 17 parameters is above the limit of 16", 0},
		{"30,000 path segments", "/" + strings.Repeat("a/", 30000), http.StatusRequestURITooLong,
			"URL path: 60001 bytes is above the limit of 1024 bytes", 0},
		{"short path segments", "/" + strings.Repeat("a/", 500), http.StatusNotFound, "unknown path", 0},
		{"16 values that could be keys", "/readyz?" + strings.Repeat("x="+long+"&", 15) + "x=" + long, http.StatusBadRequest,
			msgURLKeyCandidates, maxURLHashes},
		{"50 segments that could be keys", "/" + strings.Repeat(long+"/", 48), http.StatusBadRequest,
			msgURLKeyCandidates, maxURLHashes},
		{"escaped values are hashed raw and unescaped", "/readyz?x=" + strings.Repeat("%41", 20), http.StatusOK, "", 2},
	} {
		before := s.urlHashes.Load()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tc.target, http.NoBody))
		if tc.status == http.StatusOK || tc.name == "short path segments" {
			// GET routes: ask them with GET.
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.target, http.NoBody))
		}
		hashes := s.urlHashes.Load() - before
		assert.Equal(t, tc.status, rec.Code, "%s: %s", tc.name, rec.Body)
		assert.Contains(t, rec.Body.String(), tc.msg, tc.name)
		if tc.status == http.StatusOK || tc.name == "short path segments" {
			hashes /= 2 // asked twice
		}
		assert.LessOrEqual(t, hashes, tc.maxHashes, "%s: hashes", tc.name)
		if tc.maxHashes > 0 {
			assert.Equal(t, tc.maxHashes, hashes, "%s: the parts that could be keys are hashed", tc.name)
		}
	}
	assert.Zero(t, f.calls.Load())
}

// An API key in the URL — under a credential-like name, as any query
// name or value, or as a path segment — is refused on every route the
// same way: 400 bad_request with the same message, the key never echoed,
// whatever the method (405 and 404 paths included). The routes walked are
// those the 404 message lists, so a new route is walked too.
func TestAPIKeyInURLRefusedOnEveryRoute(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	notFound := ts.do(t, http.MethodGet, "/nope", "", nil).Env.Msg
	listed := regexp.MustCompile(`(GET|POST) (/[a-z0-9/._]*)`).FindAllStringSubmatch(notFound, -1)
	require.Len(t, listed, 10, notFound)
	type route struct{ method, path string }
	routes := []route{
		{http.MethodGet, "/nope"},          // 404
		{http.MethodPost, "/readyz"},       // 405
		{http.MethodGet, "/v1/lock"},       // 405
		{http.MethodDelete, "/metrics"},    // 405
		{http.MethodGet, "/dashboard.js"},  // static
		{http.MethodGet, "/v1/lock/x/y/z"}, // 404 under a real path
	}
	for _, m := range listed {
		routes = append(routes, route{m[1], m[2]})
	}
	for _, rt := range routes {
		header := map[string]string{"Content-Type": "application/json", "X-API-Key": testKeyAcme}
		// Without a credential in the URL the route answers as usual
		// (/v1/history refuses parameters other than its own).
		benign := "?x=1"
		if rt.path == "/v1/history" {
			benign = "?since_ms=1"
		}
		r := ts.do(t, rt.method, rt.path+benign, `{"key":"route"}`, header)
		assert.NotEqual(t, http.StatusBadRequest, r.Status, "%s %s: %s", rt.method, rt.path, r.Raw)
		sep := "/"
		if strings.HasSuffix(rt.path, "/") {
			sep = ""
		}
		for _, tc := range []struct{ url, msg string }{
			{rt.path + "?api_key=" + testKeyAcme, msgQuerySecret},
			{rt.path + "?api_key=not-a-configured-key", msgQuerySecret},
			{rt.path + "?access_token=x", msgQuerySecret},
			{rt.path + "?x=1&q=" + testKeyGlobex, msgQuerySecret},
			{rt.path + "?" + testKeyAcme, msgQuerySecret},
			{rt.path + sep + testKeyAcme, msgPathSecret},
			{"/" + testKeyAcme + rt.path, msgPathSecret},
		} {
			r := ts.do(t, rt.method, tc.url, `{"key":"route"}`, header)
			assert.Equal(t, http.StatusBadRequest, r.Status, "%s %s: %s", rt.method, tc.url, r.Raw)
			assert.Equal(t, "application/json", r.Header.Get("Content-Type"), "%s %s", rt.method, tc.url)
			assert.Equal(t, codeBadRequest, r.code(), "%s %s", rt.method, tc.url)
			assert.Equal(t, tc.msg, r.Env.Msg, "%s %s", rt.method, tc.url)
			assert.Empty(t, r.Header.Get("Location"))
			for _, secret := range []string{testKeyAcme, testKeyGlobex, "not-a-configured-key"} {
				assert.NotContains(t, r.Raw, secret, "%s %s", rt.method, tc.url)
			}
		}
	}
	for _, e := range ts.Logs.All() {
		assert.NotContains(t, fmt.Sprint(e.Message, e.ContextMap()), testKeyAcme)
	}
}

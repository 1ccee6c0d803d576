package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the allocation-free request path: the body limit without
// http.MaxBytesReader, pre-built header values and Content-Length, and
// the pooled buffers and writers.

// A chunked body of exactly MaxBodyBytes is read; one byte more is 413.
func TestBodyLimitBoundaryChunked(t *testing.T) {
	ts := newTestServer(t, newFakeLocker()) // MaxBodyBytes 4096
	body := func(n int) io.Reader {
		obj := `{"key":"limit"}`
		// Leading whitespace is valid JSON; MultiReader hides the length,
		// so the request goes out chunked.
		return io.MultiReader(strings.NewReader(strings.Repeat(" ", n-len(obj))), strings.NewReader(obj))
	}
	r := ts.doCtx(t, t.Context(), http.MethodPost, "/v1/lock", io.NopCloser(body(4096)), map[string]string{"X-API-Key": testKeyAcme})
	assert.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = ts.doCtx(t, t.Context(), http.MethodPost, "/v1/lock", io.NopCloser(body(4097)), map[string]string{"X-API-Key": testKeyAcme})
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.Status, r.Raw)
	assert.Equal(t, codeTooLarge, r.code())
	assert.Equal(t, "body: larger than the limit of 4096 bytes", r.Env.Msg)
}

// Content-Length is right for short answers (from the pre-built table) and
// long ones (computed), and the shared header values are never changed by
// one response for the next.
func TestResponseHeaders(t *testing.T) {
	s, err := New(nil, validOptions(newFakeLocker()))
	require.NoError(t, err)
	h := s.Handler()
	// A key of 512 '"' is escaped to 1024 bytes: the answer is > 1024.
	for i, key := range []string{"short", strings.Repeat(`\"`, maxKeyBytes)} {
		req := httptest.NewRequest(http.MethodPost, "/v1/lock", strings.NewReader(`{"key":"`+key+`"}`))
		req.Header.Set("X-API-Key", testKeyAcme)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Equal(t, strconv.Itoa(rec.Body.Len()), rec.Header().Get("Content-Length"), "answer %d", i)
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
		assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
		// Header.Add after the handler must not reach the shared values.
		rec.Header().Add("Content-Type", "text/plain")
		rec.Header().Add("Content-Length", "0")
	}
	assert.Equal(t, []string{"application/json"}, hvJSON)
	assert.Equal(t, []string{"0", "1"}, contentLengths[:2])
}

// The header is found whatever the case the client wrote it in (the
// server canonicalizes names; httptest requests are built with Set).
func TestAPIKeyHeaderCase(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	for _, name := range []string{"X-API-Key", "x-api-key", "X-Api-Key"} {
		r := ts.do(t, http.MethodPost, "/v1/lock", `{"key":"case"}`, map[string]string{name: testKeyAcme})
		assert.Equal(t, http.StatusOK, r.Status, "%s: %s", name, r.Raw)
		okData(t, ts.lock(t, testKeyAcme, `{"action":"release","key":"case","token":"`+
			okData(t, r)["token"].(string)+`"}`))
	}
}

package daemon

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkPreAuth is the daemon's work for requests without an API key,
// which anyone who can reach the port can send: no key at all (401, and
// 429 once its source has failed auth_failure_burst times), a query
// string of 30,000 parameters (60 KB) and a 404 path of 30,000 segments.
// Each must cost about what the request without a key costs (the URL
// checks are bounded; see checkURL).
//
//	go test -run '^$' -bench PreAuth -benchmem ./daemon/
func BenchmarkPreAuth(b *testing.B) {
	s, err := New(nil, validOptions(newFakeLocker()))
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	manyParams := "/v1/lock?" + strings.Repeat("a&", 30000)
	manySegs := "/" + strings.Repeat("a/", 30000)
	for _, tc := range []struct{ name, target string }{
		{"nokey", "/v1/lock"},
		{"query30000", manyParams[:len(manyParams)-1]},
		{"path30000", manySegs},
	} {
		b.Run(tc.name, func(b *testing.B) {
			w := &discardWriter{h: http.Header{}}
			// One request, parsed once: what is measured is the handler.
			req := httptest.NewRequest(http.MethodPost, tc.target, http.NoBody)
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)
				if w.status == http.StatusOK {
					b.Fatalf("%s: answered 200", tc.name)
				}
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }

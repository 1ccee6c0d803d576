package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/redlock"
)

// nopLocker grants everything at once, so a benchmark measures the
// daemon's own work: auth, decoding, key encoding, the answer, metrics.
type nopLocker struct{ *fakeLocker }

func (nopLocker) Acquire(context.Context, string, time.Duration, time.Duration) (Lease, error) {
	return Lease{Token: goodToken, ValidUntil: time.Now().Add(29 * time.Second)}, nil
}

func (nopLocker) Release(context.Context, string, string) (int, error) { return 5, nil }

func (nopLocker) Status(context.Context, string) (redlock.Status, error) {
	return redlock.Status{Held: true, Holders: 5, Answered: 5, Validity: 10 * time.Second}, nil
}

// BenchmarkHandler runs acquire and release requests through the handler
// (no network) with a Locker that does nothing.
func BenchmarkHandler(b *testing.B) {
	s, err := New(nil, validOptions(nopLocker{newFakeLocker()}))
	require.NoError(b, err)
	h := s.Handler()
	bodies := []string{
		`{"action":"acquire","key":"order:pay:10086","ttl":30}`,
		`{"action":"release","key":"order:pay:10086","token":"` + goodToken + `"}`,
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/v1/lock", strings.NewReader(bodies[i%2]))
			req.Header.Set("X-API-Key", testKeyAcme)
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
			i++
		}
	})
}

// BenchmarkParse measures decoding and validating one body.
func BenchmarkParse(b *testing.B) {
	body := []byte(`{"action":"extend","key":"order:pay:10086","namespace":"payments","token":"` + goodToken + `","ttl":120}`)
	lim := &limits{defaultTTL: 30, maxTTL: 86400, maxWaitMS: 30000}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := parseLockRequest(body, lim); err != nil {
			b.Fatal(err)
		}
	}
}

package client

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRefuseKeepsTheDaemonsRetryAfter: the middleware's (and the gateway's)
// 503 for records that are unavailable carries the daemon's Retry-After,
// not 1 s: with a quorum of masters waiting out the max retention, the
// daemon said 300 s and every client was told to come back each second
// (found by a black-box pass of the gateway).
func TestRefuseKeepsTheDaemonsRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		retryAfter time.Duration
		want       string
	}{{300 * time.Second, "300"}, {1500 * time.Millisecond, "2"}, {0, "1"}} {
		w := httptest.NewRecorder()
		ours := refuse(w, &Error{Kind: ErrUnavailable, Status: http.StatusServiceUnavailable, Code: "quorum_unavailable", RetryAfter: tc.retryAfter})
		assert.True(t, ours)
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Equal(t, tc.want, w.Header().Get("Retry-After"), "daemon's Retry-After %v", tc.retryAfter)
	}
}

// ttlSeconds rounds up to whole seconds without overflowing near the
// largest Duration (a black-box pass: math.MaxInt64 went out as ttl
// -9223372035).
func TestTTLSecondsRoundsUpWithoutOverflow(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want int64
	}{
		{time.Second, 1},
		{1500 * time.Millisecond, 2},
		{time.Minute, 60},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1},
	} {
		got, err := ttlSeconds(c.ttl)
		if err != nil || got != c.want {
			t.Errorf("ttlSeconds(%v) = %d, %v; want %d", c.ttl, got, err, c.want)
		}
	}
}

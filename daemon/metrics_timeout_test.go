package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deadlineBody is a request body whose client stopped sending: reading it
// fails as a connection past its read deadline does.
type deadlineBody struct{ io.Reader }

func (d deadlineBody) Read(p []byte) (int, error) {
	if n, _ := d.Reader.Read(p); n > 0 {
		return n, nil
	}
	return 0, os.ErrDeadlineExceeded
}

// A body that does not arrive in time is counted as timeout, not as bad
// input, and its duration stays out of the latency histogram and stats.
func TestBodyTimeoutCountedApart(t *testing.T) {
	s, err := New(nil, validOptions(newFakeLocker()))
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/v1/lock", io.NopCloser(deadlineBody{strings.NewReader(`{"key":`)}))
	req.Header.Set("X-API-Key", testKeyAcme)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Contains(t, rec.Body.String(), msgBodyTimeout)
	assert.EqualValues(t, 1, s.metrics.counts[actUnknown][resTimeout].Load())
	assert.Zero(t, s.metrics.counts[actUnknown][resBadRequest].Load())
	assert.Zero(t, s.metrics.durCount[actUnknown].Load(), "no latency observed")
	st := s.metrics.stats()
	assert.EqualValues(t, 1, st.Requests["unknown"]["timeout"])
	assert.NotContains(t, st.Duration, "unknown")
}

// status of a lock held for less than a second more says ttl 1, never 0;
// validity_ms stays exact.
func TestStatusTTLNeverZeroWhenHeld(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	f.mu.Lock()
	f.locks[redisKey(testPrefix, "acme", "", "almost:gone")] = fakeLock{token: goodToken, until: time.Now().Add(900 * time.Millisecond)}
	f.mu.Unlock()
	d := okData(t, ts.lock(t, testKeyAcme, `{"action":"status","key":"almost:gone"}`))
	assert.Equal(t, true, d["held"])
	assert.EqualValues(t, 1, num(t, d, "ttl"))
	assert.LessOrEqual(t, num(t, d, "validity_ms"), int64(900))
}

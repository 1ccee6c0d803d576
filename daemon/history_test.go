package daemon

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/redlock"
)

// historyServer is a Server that is not serving, so that no sampler runs
// and the test takes every sample itself.
func historyServer(t *testing.T, f *fakeLocker) *Server {
	t.Helper()
	s, err := New(nil, validOptions(f))
	require.NoError(t, err)
	return s
}

func getHistory(t *testing.T, s *Server, query string) (int, historyJSON, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/history"+query, nil))
	var h historyJSON
	if rec.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &h), rec.Body.String())
	}
	return rec.Code, h, rec.Body.String()
}

// historyJSON is historyBody as a client decodes it: nulls are nil.
type historyJSON struct {
	IntervalMS int64   `json:"interval_ms"`
	WindowS    int64   `json:"window_s"`
	StartedMS  int64   `json:"started_ms"`
	TMS        []int64 `json:"t_ms"`
	Quorum     struct {
		Needed, Counting, Up []int
	} `json:"quorum"`
	Masters []struct {
		Index           int        `json:"index"`
		Addr            string     `json:"addr"`
		State           []string   `json:"state"`
		Drifting        []bool     `json:"drifting"`
		Counts          []bool     `json:"counts"`
		QuarantineLeftS []int      `json:"quarantine_left_s"`
		ClockOffsetMS   []*float64 `json:"clock_offset_ms"`
		DriftRatio      []*float64 `json:"drift_ratio"`
		ProbeLatencyMS  []*float64 `json:"probe_latency_ms"`
	} `json:"masters"`
	Outcomes map[string][]*float64 `json:"outcomes_per_s"`
	Acquire  struct {
		P50, P99 []*float64
	} `json:"acquire_latency_ms"`
	Wait struct {
		P50, P99 []*float64
	} `json:"acquire_wait_ms"`
}

func TestHistory(t *testing.T) {
	f := newFakeLocker()
	s := historyServer(t, f)
	t0 := time.UnixMilli(1_800_000_000_000)
	s.history.record(t0)

	// Two seconds with five grants and one 400, then master 1 goes down
	// and master 3 is quarantined.
	for range 5 {
		s.metrics.request(actAcquire, resAcquired, 2*time.Millisecond, false)
	}
	s.metrics.request(actRelease, resBadRequest, time.Millisecond, false)
	// An acquire that waited 9.95 s for its lock: charted apart, it does
	// not hide the 2 ms of the others.
	s.metrics.request(actAcquire, resAcquired, 9950*time.Millisecond, true)
	s.history.record(t0.Add(2 * time.Second))
	f.setUp(1, false)
	f.setStatus(3, func(st *redlock.MasterStatus) {
		st.QuarantineLeft, st.QuarantineReason = 90*time.Second+time.Millisecond, "restarted without its data"
		st.ClockOffset, st.DriftRatio = 1500*time.Microsecond, 0.002
	})
	s.history.record(t0.Add(3 * time.Second))

	code, h, raw := getHistory(t, s, "")
	require.Equal(t, http.StatusOK, code, raw)
	assert.EqualValues(t, 1000, h.IntervalMS)
	assert.EqualValues(t, 900, h.WindowS)
	assert.Equal(t, []int64{t0.UnixMilli(), t0.UnixMilli() + 2000, t0.UnixMilli() + 3000}, h.TMS)
	assert.Equal(t, []int{3, 3, 3}, h.Quorum.Needed)
	assert.Equal(t, []int{5, 5, 3}, h.Quorum.Counting)
	assert.Equal(t, []int{5, 5, 4}, h.Quorum.Up)
	require.Len(t, h.Masters, 5)
	m1, m3 := h.Masters[1], h.Masters[3]
	assert.Equal(t, "127.0.0.1:2379", m1.Addr)
	assert.Equal(t, []string{"up", "up", "down"}, m1.State)
	assert.Equal(t, []bool{true, true, false}, m1.Counts)
	assert.NotNil(t, m1.ProbeLatencyMS[1])
	assert.InDelta(t, 0.213, *m1.ProbeLatencyMS[1], 1e-9)
	assert.Nil(t, m1.ProbeLatencyMS[2], "no latency for a master that is down")
	assert.Equal(t, []string{"up", "up", "quarantined"}, m3.State)
	assert.Equal(t, []int{0, 0, 91}, m3.QuarantineLeftS, "rounded up")
	assert.InDelta(t, 1.5, *m3.ClockOffsetMS[2], 1e-6)
	assert.InDelta(t, 0.002, *m3.DriftRatio[2], 1e-9)

	// Rates: none for the first sample; 6 grants (one after a wait) and
	// one 400 over 2 s.
	require.Contains(t, h.Outcomes, "acquired")
	require.Contains(t, h.Outcomes, "bad_request")
	assert.NotContains(t, h.Outcomes, "not_acquired", "results never counted are left out")
	assert.Nil(t, h.Outcomes["acquired"][0])
	assert.InDelta(t, 3, *h.Outcomes["acquired"][1], 1e-9)
	assert.InDelta(t, 0.5, *h.Outcomes["bad_request"][1], 1e-9)
	assert.InDelta(t, 0, *h.Outcomes["acquired"][2], 1e-9)
	// Five acquires of 2 ms, all in the (1 ms, 2.5 ms] bucket.
	assert.Nil(t, h.Acquire.P50[0])
	require.NotNil(t, h.Acquire.P50[1])
	assert.InDelta(t, 1.75, *h.Acquire.P50[1], 1e-9)
	assert.InDelta(t, 2.485, *h.Acquire.P99[1], 1e-9)
	assert.Nil(t, h.Acquire.P99[2], "no acquire in the last interval")
	assert.Nil(t, h.Wait.P50[0])
	require.NotNil(t, h.Wait.P99[1], "the waited acquire is charted apart")
	assert.Greater(t, *h.Wait.P99[1], 5000.0)
	assert.Nil(t, h.Wait.P99[2])
	// Master 1 is down in the last sample: its last clock readings are
	// not shown as current.
	assert.NotNil(t, m1.ClockOffsetMS[1])
	assert.Nil(t, m1.ClockOffsetMS[2], "no clock offset for a master that is down")
	assert.Nil(t, m1.DriftRatio[2], "no drift for a master that is down")

	// since_ms lists only later samples.
	code, h, raw = getHistory(t, s, "?since_ms="+jsonInt(t0.UnixMilli()+2000))
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, []int64{t0.UnixMilli() + 3000}, h.TMS)
	assert.Equal(t, []string{"down"}, h.Masters[1].State)
	assert.Empty(t, h.Outcomes, "no request in the listed sample")
	code, h, _ = getHistory(t, s, "?since_ms="+jsonInt(t0.UnixMilli()+3000))
	require.Equal(t, http.StatusOK, code)
	assert.Empty(t, h.TMS)
	assert.Len(t, h.Masters, 5)
	assert.Empty(t, h.Masters[0].State)
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

func TestHistoryBadSince(t *testing.T) {
	s := historyServer(t, newFakeLocker())
	for _, q := range []string{"-1", "1.5", "yesterday", "99999999999999999999", ""} {
		code, _, raw := getHistory(t, s, "?since_ms="+q)
		assert.Equal(t, http.StatusBadRequest, code, q)
		assert.Contains(t, raw, `since_ms: must be a whole number of Unix milliseconds`, q)
		assert.Contains(t, raw, `"code":"bad_request"`)
	}
	for q, want := range map[string]string{
		"?sinse_ms=1":            `unknown parameter \"sinse_ms\"; the only parameter is since_ms`,
		"?since_ms=1&since_ms=2": `since_ms: given more than once`,
		"?since_ms=%zz":          `query string: not valid URL encoding`,
	} {
		code, _, raw := getHistory(t, s, q)
		assert.Equal(t, http.StatusBadRequest, code, q)
		assert.Contains(t, raw, want, q)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/history", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

// The ring keeps the last historySamples samples and no more, in fixed
// memory: the sizes the history's doc comment states.
func TestHistoryBounded(t *testing.T) {
	f := newFakeLocker()
	s := historyServer(t, f)
	t0 := time.UnixMilli(1_800_000_000_000)
	for i := range historySamples + 10 {
		s.history.record(t0.Add(time.Duration(i) * time.Second))
	}
	code, h, _ := getHistory(t, s, "")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, h.TMS, historySamples)
	assert.Equal(t, t0.Add(10*time.Second).UnixMilli(), h.TMS[0], "the oldest ten are gone")
	assert.Equal(t, t0.Add(time.Duration(historySamples+9)*time.Second).UnixMilli(), h.TMS[historySamples-1])
	assert.Len(t, h.Masters[0].State, historySamples)
	assert.Equal(t, 900, historySamples)
	assert.EqualValues(t, 200, unsafe.Sizeof(sample{}))
	assert.EqualValues(t, 40, unsafe.Sizeof(masterSample{}))
	assert.Len(t, s.history.samples, historySamples)
	for i := range s.history.samples {
		require.Len(t, s.history.samples[i].masters, 5)
	}
}

// A Server that serves samples by itself, from the first moment.
func TestHistorySampler(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	require.Eventually(t, func() bool {
		r := ts.do(t, http.MethodGet, "/v1/history", "", nil)
		var h historyJSON
		return r.Status == http.StatusOK && json.Unmarshal([]byte(r.Raw), &h) == nil && len(h.TMS) > 0 && len(h.Masters[0].State) == len(h.TMS)
	}, 5*time.Second, 50*time.Millisecond)
}

func TestBucketQuantile(t *testing.T) {
	bounds := []float64{1, 2, 4}
	// 10 in (0,1], 10 in (1,2], none in (2,4], 0 in +Inf.
	cum := []uint64{10, 20, 20, 20}
	assert.InDelta(t, 1.0, bucketQuantile(0.5, bounds, cum), 1e-12)
	assert.InDelta(t, 0.5, bucketQuantile(0.25, bounds, cum), 1e-12)
	assert.InDelta(t, 1.98, bucketQuantile(0.99, bounds, cum), 1e-12)
	assert.True(t, math.IsNaN(bucketQuantile(0.5, bounds, []uint64{0, 0, 0, 0})))
	assert.Equal(t, 4.0, bucketQuantile(0.99, bounds, []uint64{0, 0, 0, 5}), "+Inf: the highest bound")
}

// BenchmarkHistory: one sample (every second in the daemon), and GET
// /v1/history of a full window of five masters, whose size it reports.
//
//	go test -run '^$' -bench History -benchmem ./daemon/
func BenchmarkHistory(b *testing.B) {
	f := newFakeLocker()
	s, err := New(nil, validOptions(f))
	require.NoError(b, err)
	t0 := time.UnixMilli(1_800_000_000_000)
	b.Run("record", func(b *testing.B) {
		for i := range b.N {
			s.history.record(t0.Add(time.Duration(i) * time.Second))
		}
	})
	for i := range historySamples {
		s.metrics.request(actAcquire, resAcquired, time.Millisecond, false)
		s.history.record(t0.Add(time.Duration(i) * time.Second))
	}
	b.Run("full-window", func(b *testing.B) {
		var n int
		for range b.N {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/history", nil))
			n = rec.Body.Len()
		}
		b.ReportMetric(float64(n), "body-bytes")
	})
}

package daemon

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHealthz(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	r := ts.do(t, http.MethodGet, "/healthz", "", nil)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.JSONEq(t, `{"status":"ok"}`, r.Raw)
	r = ts.do(t, http.MethodPost, "/healthz", "", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.Status)
}

func TestReadyz(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	ready := func() (int, readyBody) {
		r := ts.do(t, http.MethodGet, "/readyz", "", nil)
		var b readyBody
		require.NoError(t, json.Unmarshal([]byte(r.Raw), &b), r.Raw)
		return r.Status, b
	}
	status, b := ready()
	assert.Equal(t, http.StatusOK, status)
	assert.True(t, b.Ready)
	assert.Equal(t, "ready", b.Status)
	assert.Equal(t, readyQuorum{Needed: 3, Up: 5, Masters: 5}, b.Quorum)
	require.Len(t, b.Masters, 5)
	assert.Equal(t, "127.0.0.1:1379", b.Masters[0].Addr)
	assert.Equal(t, "up", b.Masters[0].State)
	assert.Equal(t, 0.213, b.Masters[0].LatencyMS)
	assert.NotZero(t, b.Masters[0].CheckedAtMS)

	f.setUp(1, false)
	f.setUp(3, false)
	status, b = ready()
	assert.Equal(t, http.StatusOK, status, "two masters down leave a quorum")
	assert.Equal(t, 3, b.Quorum.Up)
	assert.Equal(t, "down", b.Masters[1].State)
	assert.Equal(t, "dial tcp: connection refused", b.Masters[1].LastError)

	f.setUp(4, false)
	status, b = ready()
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.False(t, b.Ready)
	assert.Equal(t, "no_quorum", b.Status)
	assert.Len(t, b.Masters, 5, "every master is listed when not ready")
}

func TestDashboard(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	r := ts.do(t, http.MethodGet, "/", "", nil)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"))
	assert.Contains(t, r.Header.Get("Content-Security-Policy"), "script-src 'self'")
	assert.Contains(t, r.Raw, `<script src="dashboard.js"></script>`)
	for _, external := range []string{"http://", "https://", "//cdn"} {
		assert.NotContains(t, r.Raw, external, "no external assets")
	}
	js := ts.do(t, http.MethodGet, "/dashboard.js", "", nil)
	assert.Equal(t, http.StatusOK, js.Status)
	assert.Contains(t, js.Raw, `fetch("readyz"`)
	assert.Contains(t, js.Raw, `fetch("v1/stats"`)
	assert.NotContains(t, js.Raw, "innerHTML")
	assert.Equal(t, http.StatusNotFound, ts.do(t, http.MethodGet, "/nope", "", nil).Status)
}

func TestStats(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	okData(t, ts.lock(t, testKeyAcme, `{"key":"a"}`))
	okData(t, ts.lock(t, testKeyAcme, `{"key":"a"}`))
	ts.lock(t, testKeyAcme, `{"key":""}`)
	ts.lock(t, "", `{"key":"a"}`)
	r := ts.do(t, http.MethodGet, "/v1/stats", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var s statsBody
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &s))
	assert.Equal(t, map[string]map[string]uint64{
		"acquire": {"acquired": 1, "not_acquired": 1, "bad_request": 1},
		"unknown": {"unauthorized": 1},
	}, s.Requests)
	assert.EqualValues(t, 3, s.Duration["acquire"].Count)
	assert.Greater(t, s.UptimeSeconds, 0.0)
}

func TestMetrics(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	okData(t, ts.lock(t, testKeyAcme, `{"key":"a"}`))
	okData(t, ts.lock(t, testKeyAcme, `{"key":"a"}`))
	ts.lock(t, testKeyAcme, `{"key":"a","ttl":0}`)
	ts.do(t, http.MethodGet, "/v1/lock", "", nil)

	// Observer calls land on the master's address; unknown indexes are dropped.
	m := ts.Server.metrics
	m.ObserveBatch(0, 7, 300*time.Microsecond, nil)
	m.ObserveBatch(0, 1, time.Millisecond, assert.AnError)
	m.ObserveProbe(2, false, 2*time.Millisecond)
	m.ObserveProbe(99, true, time.Millisecond)
	m.ObserveBatch(-1, 1, time.Millisecond, nil)

	f.setUp(4, false)
	r := ts.do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	for _, want := range []string{
		`redlockd_requests_total{action="acquire",result="acquired"} 1`,
		`redlockd_requests_total{action="acquire",result="not_acquired"} 1`,
		`redlockd_requests_total{action="acquire",result="bad_request"} 1`,
		`redlockd_requests_total{action="unknown",result="method_not_allowed"} 1`,
		`redlockd_requests_total{action="release",result="released"} 0`,
		`redlockd_request_duration_seconds_count{action="acquire"} 3`,
		`redlockd_requests_in_flight 1`, // this scrape
		`redlock_master_up{master="127.0.0.1:1379"} 1`,
		`redlock_master_up{master="127.0.0.1:5379"} 0`,
		`redlock_quorum_available 1`,
		`redlock_quorum_needed 3`,
		`redlock_master_rtt_seconds_count{master="127.0.0.1:1379"} 2`,
		`redlock_master_commands_total{master="127.0.0.1:1379"} 8`,
		`redlock_master_batch_errors_total{master="127.0.0.1:1379"} 1`,
		`redlock_master_probe_seconds_count{master="127.0.0.1:3379"} 1`,
		`redlock_master_probes_total{master="127.0.0.1:3379",result="down"} 1`,
	} {
		assert.Contains(t, r.Raw, want)
	}
	assert.NotContains(t, r.Raw, `result="released",action="acquire"`)
	assert.NotContains(t, r.Raw, `action="acquire",result="released"`, "implausible series are not created")
	f.setUp(0, false)
	f.setUp(1, false)
	r = ts.do(t, http.MethodGet, "/metrics", "", nil)
	assert.Contains(t, r.Raw, "redlock_quorum_available 0")
	assert.Contains(t, r.Raw, "# HELP redlock_master_rtt_seconds")
	assert.NotContains(t, r.Raw, `master="99"`)
}

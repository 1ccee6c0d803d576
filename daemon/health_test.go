package daemon

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/redlock"
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
	assert.Equal(t, readyQuorum{Needed: 3, Counting: 5, Writable: 5, Up: 5, Masters: 5, Available: true}, b.Quorum)
	require.Len(t, b.Masters, 5)
	assert.Equal(t, "127.0.0.1:1379", b.Masters[0].Addr)
	assert.Equal(t, "up", b.Masters[0].State)
	assert.True(t, b.Masters[0].Counts)
	assert.Equal(t, 0.213, b.Masters[0].LatencyMS)
	assert.NotZero(t, b.Masters[0].CheckedAtMS)

	f.setUp(1, false)
	f.setUp(3, false)
	status, b = ready()
	assert.Equal(t, http.StatusOK, status, "two masters down leave a quorum")
	assert.Equal(t, 3, b.Quorum.Up)
	assert.Equal(t, 3, b.Quorum.Counting)
	assert.Equal(t, "down", b.Masters[1].State)
	assert.False(t, b.Masters[1].Counts)
	assert.Equal(t, "dial tcp: connection refused", b.Masters[1].LastError)

	f.setUp(4, false)
	status, b = ready()
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.False(t, b.Ready)
	assert.Equal(t, "no_quorum", b.Status)
	assert.False(t, b.Quorum.Available)
	assert.Len(t, b.Masters, 5, "every master is listed when not ready")
}

// TestReadyzQuarantine: a quarantined master is up but its vote does not
// count; with two masters down, that leaves two counting of three needed,
// so /readyz is 503 and says why.
func TestReadyzQuarantine(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	ready := func() (int, readyBody, map[string]any) {
		r := ts.do(t, http.MethodGet, "/readyz", "", nil)
		var b readyBody
		require.NoError(t, json.Unmarshal([]byte(r.Raw), &b), r.Raw)
		var raw map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.Raw), &raw), r.Raw)
		return r.Status, b, raw
	}
	const reason = "restarted without durable persistence (run_id changed, seen by health probe)"
	f.setStatus(2, func(st *redlock.MasterStatus) {
		st.QuarantineReason = reason
		st.QuarantineLeft = 86399*time.Second + 200*time.Millisecond
		st.RunID = "0123456789abcdef0123456789abcdef01234567"
		st.Uptime = 3*time.Second + 900*time.Millisecond
		st.Warnings = []string{"eviction: maxmemory-policy allkeys-lru can evict lock keys (they all have a TTL): use noeviction"}
	})
	f.setStatus(4, func(st *redlock.MasterStatus) {
		st.Drifting = true
		st.ClockOffset = -1500 * time.Microsecond
		st.DriftRatio = 0.0125
		st.QuarantineReason = "wall clock drifts at rate 0.0125, above the drift factor 0.0100"
		st.QuarantineLeft = 30 * time.Second
	})

	status, b, raw := ready()
	assert.Equal(t, http.StatusOK, status, "three of five still count")
	assert.Equal(t, readyQuorum{Needed: 3, Counting: 3, Writable: 3, Up: 5, Masters: 5, Available: true}, b.Quorum)
	q := b.Masters[2]
	assert.Equal(t, "quarantined", q.State)
	assert.False(t, q.Counts)
	assert.False(t, q.Drifting)
	assert.Equal(t, reason, q.QuarantineReason)
	assert.EqualValues(t, 86400, q.QuarantineLeftS, "rounded up: never 0 while in force")
	assert.Equal(t, "01234567", q.RunID, "run_id: first 8 characters only")
	assert.EqualValues(t, 3, q.UptimeS)
	require.Len(t, q.Warnings, 1)
	assert.Contains(t, q.Warnings[0], "allkeys-lru")
	d := b.Masters[4]
	assert.Equal(t, "quarantined", d.State)
	assert.True(t, d.Drifting)
	assert.Equal(t, -1.5, d.ClockOffsetMS)
	assert.Equal(t, 0.0125, d.DriftRatio)
	assert.EqualValues(t, 30, d.QuarantineLeftS)

	// Every documented field is present, warnings an array even when empty.
	m0 := raw["masters"].([]any)[0].(map[string]any)
	for _, k := range []string{"index", "addr", "state", "drifting", "counts", "quarantine_reason", "quarantine_left_s",
		"clock_offset_ms", "drift_ratio", "warnings", "run_id", "uptime_s", "durable", "latency_ms", "last_error", "checked_at_ms"} {
		assert.Contains(t, m0, k)
	}
	assert.Equal(t, []any{}, m0["warnings"])
	assert.Equal(t, "", m0["quarantine_reason"])
	for _, k := range []string{"needed", "counting", "up", "masters", "available"} {
		assert.Contains(t, raw["quorum"], k)
	}

	f.setUp(0, false)
	status, b, _ = ready()
	assert.Equal(t, http.StatusServiceUnavailable, status, "4 up but only 2 counting of 3 needed")
	assert.False(t, b.Ready)
	assert.Equal(t, "no_quorum", b.Status)
	assert.Equal(t, readyQuorum{Needed: 3, Counting: 2, Writable: 2, Up: 4, Masters: 5, Available: false}, b.Quorum)
	assert.Equal(t, reason, b.Masters[2].QuarantineReason, "the reason is shown when not ready")
	assert.Len(t, b.Masters[2].Warnings, 1)

	// A quarantined master that goes down is down, and still quarantined.
	f.setUp(2, false)
	_, b, _ = ready()
	assert.Equal(t, "down", b.Masters[2].State)
	assert.Equal(t, reason, b.Masters[2].QuarantineReason)

	// The quarantine ends: its vote counts again.
	f.setUp(0, true)
	f.setUp(2, true)
	f.setStatus(2, func(st *redlock.MasterStatus) { st.QuarantineLeft, st.QuarantineReason = 0, "" })
	status, b, _ = ready()
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "up", b.Masters[2].State)
	assert.Equal(t, 4, b.Quorum.Counting)
}

// TestReadyzShortRunID: a run_id shorter than 8 characters (or none, before
// the first probe) is shown whole.
func TestReadyzShortRunID(t *testing.T) {
	assert.Equal(t, "", readyMasterOf(&redlock.MasterStatus{}).RunID)
	assert.Equal(t, "abc", readyMasterOf(&redlock.MasterStatus{RunID: "abc"}).RunID)
	assert.Equal(t, "down", readyMasterOf(&redlock.MasterStatus{}).State, "no State: derived from Up")
	assert.Equal(t, "up", readyMasterOf(&redlock.MasterStatus{Up: true}).State)
	assert.Equal(t, "repairing", readyMasterOf(&redlock.MasterStatus{Up: true, State: redlock.MasterRepairing}).State)
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
	assert.Contains(t, js.Raw, `getJSON("readyz")`)
	assert.Contains(t, js.Raw, `getJSON("v1/history"`)
	assert.NotContains(t, js.Raw, "innerHTML")
	for _, field := range []string{"m.state", "m.drifting", "m.quarantine_reason", "m.quarantine_left_s", "m.clock_offset_ms",
		"m.drift_ratio", "m.warnings", "q.counting", "q.needed", "h.acquire_latency_ms", "h.acquire_wait_ms", "h.outcomes_per_s", "m.probe_latency_ms"} {
		assert.Contains(t, js.Raw, field, "the dashboard shows %s", field)
	}
	for _, chart := range []string{"c-states", "c-quorum", "c-outcomes", "c-latency", "c-wait", "c-offset", "c-drift", "c-probe"} {
		assert.Contains(t, r.Raw, `id="`+chart+`"`)
	}
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
	f.setStatus(1, func(st *redlock.MasterStatus) {
		st.QuarantineReason, st.QuarantineLeft = "wall clock jumped forward by 2s", 90*time.Second
		st.Drifting = true
		st.ClockOffset = 2500 * time.Millisecond
		st.DriftRatio = 0.02
		st.Warnings = []string{"replica: is a slave, not a master", "cluster: runs in cluster mode"}
	})
	f.repairs.Store(2)
	f.quarantines.Store(3)
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
		`redlock_master_state{master="127.0.0.1:1379",state="up"} 1`,
		`redlock_master_state{master="127.0.0.1:1379",state="down"} 0`,
		`redlock_master_state{master="127.0.0.1:2379",state="quarantined"} 1`,
		`redlock_master_state{master="127.0.0.1:2379",state="up"} 0`,
		`redlock_master_state{master="127.0.0.1:5379",state="down"} 1`,
		`redlock_master_state{master="127.0.0.1:5379",state="repairing"} 0`,
		`redlock_master_state{master="127.0.0.1:5379",state="waiting"} 0`,
		`redlock_master_counts{master="127.0.0.1:1379"} 1`,
		`redlock_master_counts{master="127.0.0.1:2379"} 0`,
		`redlock_master_counts{master="127.0.0.1:5379"} 0`,
		`redlock_master_quarantined{master="127.0.0.1:1379"} 0`,
		`redlock_master_quarantined{master="127.0.0.1:2379"} 1`,
		`redlock_master_quarantine_remaining_seconds{master="127.0.0.1:2379"} 90`,
		`redlock_master_quarantine_remaining_seconds{master="127.0.0.1:1379"} 0`,
		`redlock_master_drifting{master="127.0.0.1:2379"} 1`,
		`redlock_master_drifting{master="127.0.0.1:1379"} 0`,
		`redlock_master_clock_offset_seconds{master="127.0.0.1:2379"} 2.5`,
		`redlock_master_clock_offset_seconds{master="127.0.0.1:1379"} 0`,
		`redlock_master_clock_drift_ratio{master="127.0.0.1:2379"} 0.02`,
		`redlock_master_warnings{master="127.0.0.1:2379"} 2`,
		`redlock_master_warnings{master="127.0.0.1:1379"} 0`,
		`redlock_quorum_available 1`,
		`redlock_quorum_counting 3`,
		`redlock_quorum_writable 3`,
		`redlock_quorum_needed 3`,
		`redlock_fence_repairs_total 2`,
		`redlock_quarantines_total 3`,
		"# TYPE redlock_fence_repairs_total counter",
		"# TYPE redlock_quarantines_total counter",
		"# TYPE redlock_master_quarantined gauge",
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
	// Four up, but the quarantined one does not count: 2 of 3 needed.
	f.setUp(4, true)
	f.setUp(0, false)
	f.setUp(3, false)
	r = ts.do(t, http.MethodGet, "/metrics", "", nil)
	assert.Contains(t, r.Raw, "redlock_quorum_available 0")
	assert.Contains(t, r.Raw, "redlock_quorum_counting 2")
	assert.Contains(t, r.Raw, "redlock_quorum_writable 2")
	// A counting master that refuses writes (OOM) cannot vote for an
	// acquire: counting stays, writable drops, and the margin rule and
	// alerts (writable − needed) see it (a black-box pass: the margin said
	// 2 with two masters refusing writes, 0 left in truth).
	f.setStatus(4, func(st *redlock.MasterStatus) { st.RefusingWrites = true })
	r = ts.do(t, http.MethodGet, "/metrics", "", nil)
	assert.Contains(t, r.Raw, "redlock_quorum_counting 2")
	assert.Contains(t, r.Raw, "redlock_quorum_writable 1")
	assert.Contains(t, r.Raw, "# HELP redlock_master_rtt_seconds")
	assert.NotContains(t, r.Raw, `master="99"`)
}

// TestLockerCollectorPedantic: every scrape-time metric is described, with
// the labels it is collected with (a pedantic registry checks both).
func TestLockerCollectorPedantic(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	f := newFakeLocker()
	f.setStatus(3, func(st *redlock.MasterStatus) {
		st.QuarantineReason, st.QuarantineLeft = "x", time.Minute
		st.Warnings = []string{"replica: is a slave"}
	})
	m.bind(f)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"redlock_master_up", "redlock_master_state", "redlock_master_counts", "redlock_master_quarantined",
		"redlock_master_quarantine_remaining_seconds", "redlock_master_drifting", "redlock_master_clock_offset_seconds",
		"redlock_master_clock_drift_ratio", "redlock_master_warnings", "redlock_quorum_available",
		"redlock_quorum_counting", "redlock_quorum_writable", "redlock_quorum_needed", "redlock_fence_repairs_total", "redlock_quarantines_total", "redlock_contended_retries_total"} {
		assert.True(t, names[n], n)
	}
}

// stateLocker reports master 0 in a state of its own.
type stateLocker struct{ *fakeLocker }

func (l stateLocker) Masters() []redlock.MasterStatus {
	ms := l.fakeLocker.Masters()
	ms[0].State = "fencing"
	return ms
}

// redlock_master_state shows a state that masterStates does not list.
func TestMasterStateUnlisted(t *testing.T) {
	ts := newTestServer(t, stateLocker{newFakeLocker()})
	r := ts.do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	assert.Contains(t, r.Raw, `redlock_master_state{master="127.0.0.1:1379",state="fencing"} 1`)
	assert.Contains(t, r.Raw, `redlock_master_state{master="127.0.0.1:1379",state="up"} 0`)
	assert.NotContains(t, r.Raw, `redlock_master_state{master="127.0.0.1:2379",state="fencing"}`)
}

// TestReadyzLongestMaxTTL: /readyz shows the longest max TTL the daemon
// knows of on its real masters: its own, then a longer one another client
// registered at its probe.
func TestReadyzLongestMaxTTL(t *testing.T) {
	d := newDeployment(t)
	masters := make([]*redis.Options, len(d.servers))
	for i, s := range d.servers {
		masters[i] = &redis.Options{Addr: s.Addr()}
	}
	client := func(maxTTL time.Duration) *redlock.Client {
		c, err := redlock.New(masters, redlock.WithFenceKey(d.prefix+"fence"), redlock.WithMarkerKey(d.prefix+"marker"),
			redlock.WithMaxTTL(maxTTL), redlock.WithHealthInterval(20*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ts := newTestServer(t, NewRedlockLocker(client(time.Minute)), func(o *Options) { o.KeyPrefix = d.prefix })
	longest := func() int64 {
		var b readyBody
		require.NoError(t, json.Unmarshal([]byte(ts.do(t, http.MethodGet, "/readyz", "", nil).Raw), &b))
		return b.LongestMaxTTLS
	}
	assert.Equal(t, int64(60), longest(), "its own max_ttl")
	client(2 * time.Hour) // registers at its first probe, before New returns
	require.Eventually(t, func() bool { return longest() == 7200 }, 5*time.Second, 20*time.Millisecond,
		"another client's longer max TTL, read at the daemon's next probe")
}

// TestReadyzClockBounds: /readyz shows the clock bounds the daemon uses on
// its real masters: its own, then those tightened by another client that
// registers a drift factor of 0.1 at its probe.
func TestReadyzClockBounds(t *testing.T) {
	d := newDeployment(t)
	masters := make([]*redis.Options, len(d.servers))
	for i, s := range d.servers {
		masters[i] = &redis.Options{Addr: s.Addr()}
	}
	client := func(f float64) *redlock.Client {
		c, err := redlock.New(masters, redlock.WithFenceKey(d.prefix+"fence"), redlock.WithMarkerKey(d.prefix+"marker"),
			redlock.WithDriftFactor(f), redlock.WithHealthInterval(20*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ts := newTestServer(t, NewRedlockLocker(client(0.01)), func(o *Options) { o.KeyPrefix = d.prefix })
	bounds := func() readyClockBounds {
		var b readyBody
		require.NoError(t, json.Unmarshal([]byte(ts.do(t, http.MethodGet, "/readyz", "", nil).Raw), &b))
		require.NotNil(t, b.ClockBounds)
		return *b.ClockBounds
	}
	// 50ms + 0.01 × 1s of reference age + 1ms
	assert.Equal(t, readyClockBounds{DriftFactor: 0.01, ValidityDriftFactor: 0.01, ClockAllowanceMS: 61}, bounds(), "its own")
	client(0.1) // registers at its first probe, before New returns
	// 50ms + 0.1 × 1s + 1ms
	want := readyClockBounds{DriftFactor: 0.01, ValidityDriftFactor: 0.1, ClockAllowanceMS: 151}
	require.Eventually(t, func() bool { return bounds() == want }, 5*time.Second, 20*time.Millisecond,
		"another client's looser factor, read at the daemon's next probe")
}

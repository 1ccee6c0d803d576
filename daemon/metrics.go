package daemon

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlockd/redlockd/daemon/limits"
	"github.com/redlockd/redlockd/redlock"
)

// result is the outcome label of redlockd_requests_total.
type result uint8

const (
	resAcquired result = iota
	resNotAcquired
	resReleased
	resNotReleased
	resExtended
	resNotExtended
	resHeld
	resNotHeld
	resBadRequest
	resUnauthorized
	resMethodNotAllowed
	resUnsupportedMediaType
	resTooLarge
	resQuorumUnavailable
	resCancelled
	resInternal
	resTooManyWaiters
	// resTimeout: the client did not send its body within the server's
	// read timeout. Counted apart from bad input, and its duration (the
	// timeout itself) is kept out of the latency histogram.
	resTimeout
	// resAuthLimited: 429, too many failed authentications from the
	// request's source; its key was not looked at.
	resAuthLimited
	// resQuotaExhausted, resRateLimited, resTooManyLocks: 429, refused by
	// the account's limits before the masters were asked.
	resQuotaExhausted
	resRateLimited
	resTooManyLocks
	// resIdemAnswered, resIdemConflict: an idempotency action the masters
	// answered, with 200, or with 409 or 422 (in progress, fingerprint
	// mismatch, not the owner).
	resIdemAnswered
	resIdemConflict
	// resRecordsBudgetFull: 429, an idem_begin of a new record refused
	// for the account's max_idempotency_bytes.
	resRecordsBudgetFull
	numResults
)

var resultNames = [numResults]string{
	"acquired", "not_acquired", "released", "not_released", "extended", "not_extended",
	"held", "not_held", "bad_request", "unauthorized", "method_not_allowed",
	"unsupported_media_type", "too_large", "quorum_unavailable", "cancelled", "internal",
	"too_many_waiters", "timeout", "auth_limited", "quota_exhausted", "rate_limited", "too_many_locks",
	"idempotency_answered", "idempotency_conflict", "records_budget_full",
}

func (r result) String() string { return resultNames[r] }

// plausible reports whether a request can end with (a, r); only these
// series are created up front, so dashboards see zeros rather than gaps.
func plausible(a action, r result) bool {
	switch r {
	case resAcquired, resNotAcquired:
		return a == actAcquire
	case resReleased, resNotReleased:
		return a == actRelease
	case resExtended, resNotExtended:
		return a == actExtend
	case resHeld, resNotHeld:
		return a == actStatus
	case resUnauthorized, resMethodNotAllowed, resUnsupportedMediaType, resTooLarge, resTimeout, resAuthLimited:
		return a == actUnknown
	case resQuorumUnavailable, resCancelled:
		return a != actUnknown
	case resTooManyWaiters, resTooManyLocks:
		return a == actAcquire
	case resQuotaExhausted, resRateLimited:
		return a != actUnknown
	case resIdemAnswered, resIdemConflict, resRecordsBudgetFull:
		return a == actIdempotency
	}
	return true // bad_request, internal
}

// Metrics holds the daemon's Prometheus metrics and is the redlock.Observer
// of the Client the daemon serves (pass it with redlock.WithObserver).
// Create it with NewMetrics. The metrics are:
//
// Requests of the action API (POST /v1/lock and /gateway/distlock):
//
//   - redlockd_requests_total{action,result} counter. action is acquire,
//     release, extend, status, or unknown (refused before the action was
//     known). result is acquired, not_acquired, released, not_released,
//     extended, not_extended, held, not_held (answered, HTTP 200);
//     bad_request (400), unauthorized (401), method_not_allowed (405),
//     unsupported_media_type (415), too_large (413), too_many_waiters
//     (429), quorum_unavailable (503), cancelled (the client went away),
//     internal (500), timeout (the body did not arrive within the read
//     timeout; answered 400), auth_limited (429: too many failed
//     authentications from the request's source); for the idempotency
//     actions idempotency_answered (200), idempotency_conflict (409, 422)
//     and records_budget_full (429: max_idempotency_bytes).
//   - redlockd_auth_failures_total{reason} counter: requests refused at
//     authentication, by reason: missing_key and unknown_key (401),
//     source_limited (429, the key not looked at), admin_token (401 on
//     the admin listener). None reaches a master.
//   - redlockd_request_duration_seconds{action} histogram, from the first
//     byte of handling to the response; timeouts are not observed: their
//     duration is the client's, not the daemon's. Acquires that asked to
//     wait (wait_ms > 0) are not observed here either: one 10 s wait would
//     hide every real latency.
//   - redlockd_acquire_wait_seconds histogram: the acquires with wait_ms,
//     from the first byte of handling to the response, the wait included.
//   - redlockd_requests_in_flight gauge.
//   - redlockd_acquires_waiting gauge: acquires with wait_ms waiting (for
//     a held lock, or for a quorum: a waiting acquire keeps waiting while
//     no quorum can vote, within its wait_ms).
//
// Masters and quorum, read from the served MasterHealth at scrape time (the same
// snapshot GET /readyz shows; the label is host:port):
//
//   - redlock_master_up{master} gauge, 1 when the master answers probes and
//     accepts connections.
//   - redlock_master_state{master,state} gauge, 1 for the state the
//     master is in now and 0 for the others: up, down, quarantined,
//     repairing, waiting, oom (as in GET /readyz). A master that stays
//     repairing needs a fencing repair (see redlockd repair-fences).
//   - redlock_master_counts{master} gauge, 1 when its votes count towards
//     the quorum now (up, not quarantined, not awaiting a fencing repair).
//   - redlock_master_quarantined{master} gauge, 1 while it is quarantined
//     (restart without its data, clock jump, drift): it receives writes but
//     its votes do not count. Also 1 while it awaits a fencing repair.
//   - redlock_master_quarantine_remaining_seconds{master} gauge, how long
//     the quarantine still lasts, 0 when none.
//   - redlock_master_drifting{master} gauge, 1 when its clock rate differs
//     from ours by more than the drift factor.
//   - redlock_master_clock_offset_seconds{master} gauge, its wall clock
//     minus ours at the last probe.
//   - redlock_master_clock_drift_ratio{master} gauge, the rate at which that
//     offset changes (0.01 = 10 ms per second).
//   - redlock_master_warnings{master} gauge, the number of configuration
//     warnings (evicting maxmemory-policy, replica, cluster mode, same
//     server as another address); GET /readyz has their text.
//   - redlock_master_refusing_writes{master} gauge, 1 while the master
//     refuses writes (OOM: used memory above maxmemory under noeviction);
//     GET /readyz has the reason.
//   - redlock_master_write_refusals_total{master} counter, votes the
//     master refused with an OOM error.
//   - redlock_quorum_available gauge, 1 when at least a quorum of masters
//     counts and accepts writes (GET /readyz is 503 otherwise).
//   - redlock_quorum_counting gauge, how many masters' votes count.
//   - redlock_quorum_writable gauge, how many of those accept writes (not
//     refusing for OOM): the masters that can vote for an acquire or an
//     extend. The margin to watch is writable − needed
//     (instance:redlock_quorum:margin).
//   - redlock_quorum_needed gauge, the quorum (N/2+1 of all masters).
//   - redlock_fence_repairs_total counter, fencing counters of masters that
//     lost their data repaired from a quorum.
//   - redlock_quarantines_total counter, times a master was quarantined.
//   - redlock_grant_refusals_total counter, acquires that had the votes
//     and were refused because another master showed a granted lock on
//     the key (a master that voted had lost it silently, or a release did
//     not reach every master; redlock/granted.go).
//   - redlock_master_data_loss_total{reason} counter, times a master was
//     found to have lost lock state, by how (restart, snapshot,
//     state_missing, marker_replaced, evicted, replica, rolled_back).
//
// From the redlock.Observer calls, per master (the label is host:port):
//
//   - redlock_master_rtt_seconds{master} histogram: one pipelined batch
//     round trip to the master.
//   - redlock_master_commands_total{master} counter: commands sent.
//   - redlock_master_batch_errors_total{master} counter: batches that
//     failed with a connection error.
//   - redlock_master_probe_seconds{master} histogram: health probe round
//     trips.
//   - redlock_master_probes_total{master,result} counter: result up or down.
//
// Account limits (quota, rate, max_locks): see limits.Metrics
// (limits/metrics.go): redlockd_quota_remaining{account},
// redlockd_quota_limit{account}, redlockd_quota_exhausted_total{account},
// redlockd_rate_limited_total{account}, redlockd_locks_held{account},
// redlockd_max_locks{account}, redlockd_too_many_locks_total{account},
// redlockd_limits_sync_total{result}.
//
// Observer calls that arrive before the masters' addresses are known (see
// SetMasters) are not recorded.
type Metrics struct {
	limits       *limits.Metrics
	requests     *prometheus.CounterVec
	byPair       [numActions][numResults]prometheus.Counter
	counts       [numActions][numResults]atomic.Uint64
	duration     [numActions]prometheus.Observer
	waitDuration prometheus.Histogram // acquires with wait_ms, kept out of duration
	durCount     [numActions]atomic.Uint64
	durSumNS     [numActions]atomic.Int64
	authFailures [numAuthFailures]prometheus.Counter
	inFlight     prometheus.Gauge
	waiting      prometheus.Gauge
	rtt          *prometheus.HistogramVec
	commands     *prometheus.CounterVec
	batchErrs    *prometheus.CounterVec
	probeRTT     *prometheus.HistogramVec
	probes       *prometheus.CounterVec
	gatherer     prometheus.Gatherer // the registerer, when it is also a Gatherer
	started      time.Time
	mastersMu    sync.Mutex // serializes SetMasters
	perMaster    atomic.Pointer[[]masterMetrics]
	health       atomic.Pointer[healthBox]
	healthDesc   healthDescs
}

// masterStates are the values of redlock_master_state's state label: one
// series per master and state, so that a state that is not there reads 0
// instead of missing.
var masterStates = []redlock.MasterState{
	redlock.MasterUp, redlock.MasterDown, redlock.MasterQuarantined, redlock.MasterRepairing, redlock.MasterWaiting,
	redlock.MasterOOM,
}

// healthDescs describe the scrape-time metrics read from the
// MasterHealth.
type healthDescs struct {
	up, counts, quarantined, quarantineLeft, drifting             *prometheus.Desc
	refusingWrites, writeRefusals                                 *prometheus.Desc
	state                                                         *prometheus.Desc
	clockOffset, driftRatio, warnings                             *prometheus.Desc
	quorumAvailable, quorumCounting, quorumNeeded, quorumWritable *prometheus.Desc
	fenceRepairs, quarantines, dataLoss                           *prometheus.Desc
	grantRefusals, contendedRetries                               *prometheus.Desc
	// Per master group, with master_groups only (groups.go).
	groupAvailable, groupCounting, groupNeeded, groupWritable *prometheus.Desc
	groupMasters, groupOps                                    *prometheus.Desc
}

func newHealthDescs() healthDescs {
	master := []string{"master"}
	return healthDescs{
		up:               prometheus.NewDesc("redlock_master_up", "1 when the master is up (answers probes and accepts connections).", master, nil),
		state:            prometheus.NewDesc("redlock_master_state", "1 for the master's state now (the state label), 0 for the other states.", []string{"master", "state"}, nil),
		counts:           prometheus.NewDesc("redlock_master_counts", "1 when the master's votes count towards the quorum now.", master, nil),
		quarantined:      prometheus.NewDesc("redlock_master_quarantined", "1 while the master is quarantined or awaits a fencing repair: its votes do not count.", master, nil),
		quarantineLeft:   prometheus.NewDesc("redlock_master_quarantine_remaining_seconds", "How long the master's quarantine still lasts; 0 when none.", master, nil),
		refusingWrites:   prometheus.NewDesc("redlock_master_refusing_writes", "1 while the master refuses writes: used memory above maxmemory under noeviction (OOM); acquires and extends get no vote from it.", master, nil),
		writeRefusals:    prometheus.NewDesc("redlock_master_write_refusals_total", "Votes the master refused with an OOM error (used memory above maxmemory).", master, nil),
		drifting:         prometheus.NewDesc("redlock_master_drifting", "1 when the master's clock rate differs from ours by more than the drift factor.", master, nil),
		clockOffset:      prometheus.NewDesc("redlock_master_clock_offset_seconds", "The master's wall clock minus ours at the last probe.", master, nil),
		driftRatio:       prometheus.NewDesc("redlock_master_clock_drift_ratio", "Rate of change of the master's clock offset (0.01 = 10ms per second).", master, nil),
		warnings:         prometheus.NewDesc("redlock_master_warnings", "Configuration warnings about the master (see GET /readyz for the text).", master, nil),
		quorumAvailable:  prometheus.NewDesc("redlock_quorum_available", "1 when at least a quorum of masters counts (up, not quarantined) and accepts writes.", nil, nil),
		quorumWritable:   prometheus.NewDesc("redlock_quorum_writable", "Masters whose votes count now and that accept writes (not refusing for OOM): those that can vote for an acquire.", nil, nil),
		quorumCounting:   prometheus.NewDesc("redlock_quorum_counting", "Masters whose votes count now.", nil, nil),
		quorumNeeded:     prometheus.NewDesc("redlock_quorum_needed", "Masters that must agree: N/2+1.", nil, nil),
		fenceRepairs:     prometheus.NewDesc("redlock_fence_repairs_total", "Fencing counters of masters that lost their data, repaired from a quorum.", nil, nil),
		grantRefusals:    prometheus.NewDesc("redlock_grant_refusals_total", "Acquires that had the votes and were refused because another master showed a granted lock on the key.", nil, nil),
		contendedRetries: prometheus.NewDesc("redlock_contended_retries_total", "Attempts one-shot acquires made again because an attempt was refused with no granted lock on any master (callers that split the votes).", nil, nil),
		quarantines:      prometheus.NewDesc("redlock_quarantines_total", "Times a master was quarantined.", nil, nil),
		dataLoss:         prometheus.NewDesc("redlock_master_data_loss_total", "Times a master was found to have lost lock state, by how.", []string{"reason"}, nil),
		groupAvailable:   prometheus.NewDesc("redlock_group_quorum_available", "With master_groups: 1 when at least a quorum of the group's masters counts and accepts writes.", []string{"group"}, nil),
		groupCounting:    prometheus.NewDesc("redlock_group_quorum_counting", "With master_groups: the group's masters whose votes count now.", []string{"group"}, nil),
		groupWritable:    prometheus.NewDesc("redlock_group_quorum_writable", "With master_groups: the group's masters whose votes count now and that accept writes (not refusing for OOM).", []string{"group"}, nil),
		groupNeeded:      prometheus.NewDesc("redlock_group_quorum_needed", "With master_groups: the group's masters that must agree, N/2+1 of the group.", []string{"group"}, nil),
		groupMasters:     prometheus.NewDesc("redlock_group_masters", "With master_groups: the group's masters in each state.", []string{"group", "state"}, nil),
		groupOps:         prometheus.NewDesc("redlock_group_operations_total", "With master_groups: calls this daemon sent to the group, by operation (acquire, release, extend, status).", []string{"group", "operation"}, nil),
	}
}

type masterMetrics struct {
	addr               string
	rtt, probeRTT      prometheus.Observer
	commands, batchErr prometheus.Counter
	probeUp, probeDown prometheus.Counter
}

type healthBox struct{ h MasterHealth }

var _ redlock.Observer = (*Metrics)(nil)

// Histogram buckets: Redis round trips on a LAN are sub-millisecond; a
// request may wait up to MaxWait.
var (
	rttBuckets     = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
	requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// NewMetrics creates the metrics and registers them with reg. It panics if
// they are already registered there (a programming error, as with
// prometheus.MustRegister). If reg is also a prometheus.Gatherer (a
// *prometheus.Registry is), GET /metrics serves it unless Options.Gatherer
// says otherwise.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlockd_requests_total",
			Help: "Action API requests by action and result.",
		}, []string{"action", "result"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlockd_requests_in_flight",
			Help: "Requests being handled.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlockd_acquires_waiting",
			Help: "Acquires with wait_ms waiting for a held lock or for a quorum.",
		}),
		rtt: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "redlock_master_rtt_seconds",
			Help:    "Round trip of one pipelined batch of commands to a master.",
			Buckets: rttBuckets,
		}, []string{"master"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlock_master_commands_total",
			Help: "Commands sent to a master.",
		}, []string{"master"}),
		batchErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlock_master_batch_errors_total",
			Help: "Batches to a master that failed with a connection error.",
		}, []string{"master"}),
		probeRTT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "redlock_master_probe_seconds",
			Help:    "Round trip of one health probe of a master.",
			Buckets: rttBuckets,
		}, []string{"master"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlock_master_probes_total",
			Help: "Health probes of a master by result (up or down).",
		}, []string{"master", "result"}),
		started: time.Now(),
	}
	authFailures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redlockd_auth_failures_total",
		Help: "Action API requests refused at authentication, by reason (missing_key, unknown_key, source_limited, admin_token).",
	}, []string{"reason"})
	for f := range numAuthFailures {
		m.authFailures[f] = authFailures.WithLabelValues(f.String())
	}
	m.healthDesc = newHealthDescs()
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "redlockd_request_duration_seconds",
		Help:    "Time to answer an action API request, by action.",
		Buckets: requestBuckets,
	}, []string{"action"})
	m.waitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "redlockd_acquire_wait_seconds",
		Help:    "Time to answer an acquire that asked to wait (wait_ms > 0), the wait included. These acquires are not in redlockd_request_duration_seconds.",
		Buckets: requestBuckets,
	})
	for a := range numActions {
		m.duration[a] = duration.WithLabelValues(a.String())
		for r := range numResults {
			if plausible(a, r) {
				m.byPair[a][r] = m.requests.WithLabelValues(a.String(), r.String())
			}
		}
	}
	reg.MustRegister(m.requests, duration, m.waitDuration, authFailures, m.inFlight, m.waiting, m.rtt, m.commands, m.batchErrs, m.probeRTT, m.probes, healthCollector{m})
	m.limits = limits.NewMetrics()
	reg.MustRegister(m.limits.Collectors()...)
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.gatherer = g
	}
	return m
}

// SetMasters names the masters, in the order given to redlock.New, for the
// per-master metrics. New calls it with Options.Health's masters; call it
// before redlock.New to record the Client's first probes too.
func (m *Metrics) SetMasters(addrs []string) {
	m.mastersMu.Lock()
	defer m.mastersMu.Unlock()
	if cur := m.perMaster.Load(); cur != nil && len(*cur) == len(addrs) {
		same := true
		for i, pm := range *cur {
			same = same && pm.addr == addrs[i]
		}
		if same {
			return
		}
	}
	pms := make([]masterMetrics, len(addrs))
	for i, a := range addrs {
		pms[i] = masterMetrics{
			addr:      a,
			rtt:       m.rtt.WithLabelValues(a),
			probeRTT:  m.probeRTT.WithLabelValues(a),
			commands:  m.commands.WithLabelValues(a),
			batchErr:  m.batchErrs.WithLabelValues(a),
			probeUp:   m.probes.WithLabelValues(a, "up"),
			probeDown: m.probes.WithLabelValues(a, "down"),
		}
	}
	m.perMaster.Store(&pms)
}

func (m *Metrics) master(i int) *masterMetrics {
	pms := m.perMaster.Load()
	if pms == nil || i < 0 || i >= len(*pms) {
		return nil
	}
	return &(*pms)[i]
}

// ObserveBatch implements redlock.Observer.
func (m *Metrics) ObserveBatch(master int, size int, d time.Duration, err error) {
	pm := m.master(master)
	if pm == nil {
		return
	}
	pm.rtt.Observe(d.Seconds())
	pm.commands.Add(float64(size))
	if err != nil {
		pm.batchErr.Inc()
	}
}

// ObserveProbe implements redlock.Observer.
func (m *Metrics) ObserveProbe(master int, up bool, d time.Duration) {
	pm := m.master(master)
	if pm == nil {
		return
	}
	pm.probeRTT.Observe(d.Seconds())
	if up {
		pm.probeUp.Inc()
	} else {
		pm.probeDown.Inc()
	}
}

// bind makes the scrape-time master and quorum metrics read h.
func (m *Metrics) bind(h MasterHealth) {
	ms := h.Masters()
	addrs := make([]string, len(ms))
	for i, st := range ms {
		addrs[i] = st.Addr
	}
	m.SetMasters(addrs)
	m.health.Store(&healthBox{h})
}

// request records one finished action API request; waited is an acquire
// with wait_ms, whose duration goes to its own histogram.
func (m *Metrics) request(a action, r result, d time.Duration, waited bool) {
	c := m.byPair[a][r]
	if c == nil {
		c = m.requests.WithLabelValues(a.String(), r.String())
	}
	c.Inc()
	m.counts[a][r].Add(1)
	if r == resTimeout {
		return
	}
	if waited {
		m.waitDuration.Observe(d.Seconds())
		return
	}
	m.duration[a].Observe(d.Seconds())
	m.durCount[a].Add(1)
	m.durSumNS[a].Add(int64(d))
}

// healthCollector reads the bound MasterHealth's snapshot at scrape time.
type healthCollector struct{ m *Metrics }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.m.healthDesc
	for _, desc := range []*prometheus.Desc{
		d.up, d.state, d.counts, d.quarantined, d.quarantineLeft, d.drifting,
		d.refusingWrites, d.writeRefusals,
		d.clockOffset, d.driftRatio, d.warnings,
		d.quorumAvailable, d.quorumCounting, d.quorumNeeded, d.quorumWritable,
		d.fenceRepairs, d.quarantines, d.dataLoss, d.grantRefusals, d.contendedRetries,
		d.groupAvailable, d.groupCounting, d.groupNeeded, d.groupWritable, d.groupMasters, d.groupOps,
	} {
		ch <- desc
	}
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	box := c.m.health.Load()
	if box == nil {
		return
	}
	d := &c.m.healthDesc
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	counting, writableN := 0, 0
	for _, st := range box.h.Masters() {
		a := st.Addr
		if st.Counting {
			counting++
		}
		if writable(&st) {
			writableN++
		}
		gauge(d.refusingWrites, b2f(st.RefusingWrites), a)
		ch <- prometheus.MustNewConstMetric(d.writeRefusals, prometheus.CounterValue, float64(st.WriteRefusals), a)
		state := masterState(&st)
		gauge(d.up, b2f(st.Up), a)
		known := false
		for _, s := range masterStates {
			gauge(d.state, b2f(state == s), a, string(s))
			known = known || state == s
		}
		if !known { // a state this list does not have yet still shows
			gauge(d.state, 1, a, string(state))
		}
		gauge(d.counts, b2f(st.Counting), a)
		gauge(d.quarantined, b2f(st.QuarantineLeft > 0 || state == redlock.MasterQuarantined || state == redlock.MasterRepairing), a)
		gauge(d.quarantineLeft, max(st.QuarantineLeft, 0).Seconds(), a)
		gauge(d.drifting, b2f(st.Drifting), a)
		gauge(d.clockOffset, st.ClockOffset.Seconds(), a)
		gauge(d.driftRatio, st.DriftRatio, a)
		gauge(d.warnings, float64(len(st.Warnings)), a)
	}
	// Available is decided from the same snapshot, as in GET /readyz, so
	// that the two and redlock_quorum_counting never disagree.
	needed := box.h.Quorum()
	available := writableN >= needed
	if gh := box.h.Groups(); gh != nil {
		// Every group needs its own quorum: available only when each has.
		available = c.collectGroups(ch, gh)
	}
	gauge(d.quorumAvailable, b2f(available))
	gauge(d.quorumCounting, float64(counting))
	gauge(d.quorumWritable, float64(writableN))
	gauge(d.quorumNeeded, float64(needed))
	counters := box.h.Counters()
	ch <- prometheus.MustNewConstMetric(d.fenceRepairs, prometheus.CounterValue, float64(counters.FenceRepairs))
	ch <- prometheus.MustNewConstMetric(d.grantRefusals, prometheus.CounterValue, float64(counters.GrantRefusals))
	ch <- prometheus.MustNewConstMetric(d.contendedRetries, prometheus.CounterValue, float64(counters.ContendedRetries))
	ch <- prometheus.MustNewConstMetric(d.quarantines, prometheus.CounterValue, float64(counters.Quarantines))
	losses := counters.DataLosses
	for _, r := range redlock.DataLossReasons {
		ch <- prometheus.MustNewConstMetric(d.dataLoss, prometheus.CounterValue, float64(losses[r]), string(r))
	}
}

// collectGroups sends the redlock_group_* metrics, each group from one
// snapshot of its masters, and reports whether every group has a quorum.
func (c healthCollector) collectGroups(ch chan<- prometheus.Metric, gh *GroupsHealth) bool {
	d := &c.m.healthDesc
	all := true
	for _, grp := range gh.Groups {
		q, ms := groupQuorum(grp.Health)
		all = all && q.Available
		ch <- prometheus.MustNewConstMetric(d.groupAvailable, prometheus.GaugeValue, b2f(q.Available), grp.Name)
		ch <- prometheus.MustNewConstMetric(d.groupCounting, prometheus.GaugeValue, float64(q.Counting), grp.Name)
		ch <- prometheus.MustNewConstMetric(d.groupWritable, prometheus.GaugeValue, float64(q.Writable), grp.Name)
		ch <- prometheus.MustNewConstMetric(d.groupNeeded, prometheus.GaugeValue, float64(q.Needed), grp.Name)
		states := map[redlock.MasterState]int{}
		for _, s := range masterStates {
			states[s] = 0
		}
		for j := range ms {
			states[masterState(&ms[j])]++
		}
		for s, n := range states {
			ch <- prometheus.MustNewConstMetric(d.groupMasters, prometheus.GaugeValue, float64(n), grp.Name, string(s))
		}
		for op, n := range grp.Ops.named() {
			ch <- prometheus.MustNewConstMetric(d.groupOps, prometheus.CounterValue, float64(n), grp.Name, op)
		}
	}
	return all
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// statsBody is GET /v1/stats: the request counters and latency sums since
// the process started, for the dashboard (which computes rates from two
// readings). Counters of series that stayed at zero are left out.
type statsBody struct {
	UptimeSeconds float64                       `json:"uptime_seconds"`
	Requests      map[string]map[string]uint64  `json:"requests"`
	Duration      map[string]statsDurationEntry `json:"duration"`
	// Accounts are the accounts with a quota, rate limit or max_locks.
	Accounts map[string]limits.AccountStats `json:"accounts"`
}

type statsDurationEntry struct {
	Count      uint64  `json:"count"`
	SumSeconds float64 `json:"sum_seconds"`
}

func (m *Metrics) stats() statsBody {
	s := statsBody{
		UptimeSeconds: time.Since(m.started).Seconds(),
		Requests:      map[string]map[string]uint64{},
		Duration:      map[string]statsDurationEntry{},
		Accounts:      m.limits.Stats(),
	}
	for a := range numActions {
		for r := range numResults {
			if n := m.counts[a][r].Load(); n > 0 {
				if s.Requests[a.String()] == nil {
					s.Requests[a.String()] = map[string]uint64{}
				}
				s.Requests[a.String()][r.String()] = n
			}
		}
		if n := m.durCount[a].Load(); n > 0 {
			s.Duration[a.String()] = statsDurationEntry{Count: n, SumSeconds: float64(m.durSumNS[a].Load()) / 1e9}
		}
	}
	return s
}

package daemon

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/redlockd/redlockd/redlock"
)

// The dashboard's history: one sample of the masters, the quorum, the
// request outcomes and the acquire latency every HistoryInterval, for the
// last HistoryWindow, kept in memory and served by GET /v1/history. It
// starts empty with the process.
const (
	// HistoryInterval is the time between two samples.
	HistoryInterval = time.Second
	// HistoryWindow is how far back the history reaches.
	HistoryWindow = 15 * time.Minute
	// historySamples is the ring's fixed capacity: 900.
	historySamples = int(HistoryWindow / HistoryInterval)
)

// history is a ring of historySamples samples, each with one masterSample
// per master, all allocated by newHistory and reused: its memory is fixed
// at historySamples × (200 + 40 × masters) bytes on 64-bit platforms
// (352 KiB for five masters) however long the daemon runs. Sampling reads
// the MasterHealth's snapshot and the metrics' counters; the request path never
// touches it.
type history struct {
	metrics *Metrics
	health  MasterHealth
	started time.Time // when this history began: a page that sees a new value starts over

	mu      sync.Mutex
	samples []sample // the ring; samples[next] is the oldest once full
	next    int
	n       int
	// The cumulative counters at the previous sample, to turn counters
	// into per-interval numbers.
	prevAt      time.Time
	prevResults [numResults]uint64
	prevAcquire histogramMark // acquire duration histogram at the previous sample
	prevWait    histogramMark // acquire wait histogram at the previous sample
	dm          dto.Metric
}

// sample is one moment of the history.
type sample struct {
	at       time.Time
	seconds  float64 // since the previous sample, for rates
	up       int16   // masters that answer
	counting int16   // masters whose votes count
	needed   int16   // the quorum
	// outcomes are the requests that ended during the interval, by result
	// (summed over actions).
	outcomes [numResults]uint32
	// acquireP50 and acquireP99 are in seconds, NaN when no acquire ended
	// during the interval; waitP50 and waitP99 the same for the acquires
	// that asked to wait (wait_ms), which the first two leave out.
	acquireP50, acquireP99 float64
	waitP50, waitP99       float64
	masters                []masterSample
}

// masterSample is one master at one moment. Float fields are NaN when
// unknown (no probe yet, or down for the latency).
type masterSample struct {
	state       redlock.MasterState
	drifting    bool
	counts      bool
	offsetMS    float32 // clock offset, ms
	driftRatio  float32 // 0.01 = 10 ms per second
	probeRTTMS  float32 // last probe round trip, ms
	quarantineS int32   // quarantine left, whole seconds rounded up
}

func newHistory(m *Metrics, mh MasterHealth, now time.Time) *history {
	n := len(mh.Masters())
	h := &history{metrics: m, health: mh, started: now, samples: make([]sample, historySamples)}
	backing := make([]masterSample, historySamples*n)
	for i := range h.samples {
		h.samples[i].masters = backing[i*n : (i+1)*n : (i+1)*n]
	}
	h.prevAcquire.buckets = make([]uint64, len(requestBuckets))
	h.prevWait.buckets = make([]uint64, len(requestBuckets))
	return h
}

// run samples every HistoryInterval until stop is closed.
func (h *history) run(stop <-chan struct{}) {
	t := time.NewTicker(HistoryInterval)
	defer t.Stop()
	h.record(time.Now())
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			h.record(now)
		}
	}
}

// record takes one sample at now.
func (h *history) record(now time.Time) {
	ms := h.health.Masters()
	needed := h.health.Quorum()
	var results [numResults]uint64
	for a := range numActions {
		for r := range numResults {
			results[r] += h.metrics.counts[a][r].Load()
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	s := &h.samples[h.next]
	masters := s.masters
	*s = sample{at: now, needed: int16(needed), masters: masters, acquireP50: math.NaN(), acquireP99: math.NaN(),
		waitP50: math.NaN(), waitP99: math.NaN()}
	if !h.prevAt.IsZero() {
		s.seconds = now.Sub(h.prevAt).Seconds()
		for r := range numResults {
			s.outcomes[r] = uint32(results[r] - h.prevResults[r])
		}
	}
	h.prevAt, h.prevResults = now, results
	if m, ok := h.metrics.duration[actAcquire].(prometheus.Metric); ok {
		s.acquireP50, s.acquireP99 = h.quantiles(m, &h.prevAcquire, s.seconds == 0)
	}
	s.waitP50, s.waitP99 = h.quantiles(h.metrics.waitDuration, &h.prevWait, s.seconds == 0)
	for i := range masters {
		masters[i] = masterSample{state: redlock.MasterDown, offsetMS: nan32, driftRatio: nan32, probeRTTMS: nan32}
	}
	for i := range ms {
		st := &ms[i]
		if st.Index < 0 || st.Index >= len(masters) {
			continue
		}
		x := &masters[st.Index]
		x.state, x.drifting, x.counts = masterState(st), st.Drifting, st.Counting
		x.quarantineS = int32(min(quarantineSeconds(st.QuarantineLeft), math.MaxInt32))
		// A down master's offset, drift and latency are its last
		// readings, not current ones: unknown (null) while it is down.
		if st.Up && !st.CheckedAt.IsZero() {
			x.offsetMS = float32(millis(st.ClockOffset))
			x.driftRatio = float32(finite(st.DriftRatio))
			x.probeRTTMS = float32(millis(st.Latency))
		}
		if st.Up {
			s.up++
		}
		if st.Counting {
			s.counting++
		}
	}
	h.next = (h.next + 1) % len(h.samples)
	h.n = min(h.n+1, len(h.samples))
}

var nan32 = float32(math.NaN())

// histogramMark is a histogram's cumulative counts at the previous sample.
type histogramMark struct {
	buckets []uint64 // cumulative per bucket
	total   uint64
}

// quantiles returns the p50 and p99, in seconds, of the observations of
// histogram m since prev (which it moves on), read from the histogram
// that GET /metrics serves, so the page and a Prometheus
// histogram_quantile over the same interval agree. NaN when there were
// none, or on the first sample (first: the counts include everything
// before it).
func (h *history) quantiles(m prometheus.Metric, prev *histogramMark, first bool) (p50, p99 float64) {
	h.dm.Reset()
	if m.Write(&h.dm) != nil || h.dm.Histogram == nil || len(h.dm.Histogram.Bucket) != len(prev.buckets) {
		return math.NaN(), math.NaN()
	}
	hist := h.dm.Histogram
	delta := make([]uint64, len(prev.buckets)+1) // + the +Inf bucket
	for i, b := range hist.Bucket {
		delta[i] = b.GetCumulativeCount() - prev.buckets[i]
		prev.buckets[i] = b.GetCumulativeCount()
	}
	total := hist.GetSampleCount()
	delta[len(delta)-1] = total - prev.total
	prev.total = total
	if first {
		return math.NaN(), math.NaN()
	}
	return bucketQuantile(0.5, requestBuckets, delta), bucketQuantile(0.99, requestBuckets, delta)
}

// bucketQuantile estimates the q-quantile (0 < q < 1) of observations
// counted in cumulative buckets with the given upper bounds (the last
// entry of cum is the total, +Inf included), interpolating linearly
// inside a bucket as Prometheus's histogram_quantile does. It returns NaN
// when there are no observations, and the highest bound when the quantile
// falls into the +Inf bucket.
func bucketQuantile(q float64, bounds []float64, cum []uint64) float64 {
	total := cum[len(cum)-1]
	if total == 0 {
		return math.NaN()
	}
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for i, upper := range bounds {
		if float64(cum[i]) >= rank {
			in := cum[i] - below
			if in == 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = upper, cum[i]
	}
	return bounds[len(bounds)-1]
}

// historyBody is GET /v1/history, one array entry per sample, oldest
// first, in columns:
//
//	{"interval_ms":1000,"window_s":900,"started_ms":1735689000000,"now_ms":1735689600000,
//	 "t_ms":[1735689599000,1735689600000],
//	 "quorum":{"needed":[3,3],"counting":[5,4],"up":[5,4]},
//	 "masters":[{"index":0,"addr":"127.0.0.1:6379",
//	             "state":["up","down"],"drifting":[false,false],"counts":[true,false],
//	             "quarantine_left_s":[0,0],"clock_offset_ms":[0.41,0.40],
//	             "drift_ratio":[0.000013,0.000012],"probe_latency_ms":[0.213,null]}, …],
//	 "outcomes_per_s":{"acquired":[null,41.9],"quorum_unavailable":[null,0]},
//	 "acquire_latency_ms":{"p50":[null,0.61],"p99":[null,2.3]},
//	 "acquire_wait_ms":{"p50":[null,null],"p99":[null,null]}}
//
// started_ms is when this history began (the process start): a page that
// sees it change drops what it had. With ?since_ms=T only samples taken
// after T (Unix ms) are listed. state is as in GET /readyz; a float is
// null where it is unknown: no probe yet, the latency of a master that is
// down, a rate for the first sample (no interval yet), a latency quantile
// for an interval without acquires. outcomes_per_s has every result, over
// all actions, that some listed sample counted (a result left out had no
// request in them); quantiles are
// interpolated inside the buckets of redlockd_request_duration_seconds
// (acquire_latency_ms, acquires without wait_ms) and
// redlockd_acquire_wait_seconds (acquire_wait_ms, acquires with wait_ms),
// as histogram_quantile does. A down master's clock offset and drift are
// null: its last readings are not current.
type historyBody struct {
	IntervalMS int64                `json:"interval_ms"`
	WindowS    int64                `json:"window_s"`
	StartedMS  int64                `json:"started_ms"`
	NowMS      int64                `json:"now_ms"`
	TMS        []int64              `json:"t_ms"`
	Quorum     historyQuorum        `json:"quorum"`
	Masters    []historyMaster      `json:"masters"`
	Outcomes   map[string][]jsonNum `json:"outcomes_per_s"`
	Acquire    historyLatency       `json:"acquire_latency_ms"`
	Wait       historyLatency       `json:"acquire_wait_ms"`
}

type historyQuorum struct {
	Needed   []int16 `json:"needed"`
	Counting []int16 `json:"counting"`
	Up       []int16 `json:"up"`
}

type historyMaster struct {
	Index           int                   `json:"index"`
	Addr            string                `json:"addr"`
	State           []redlock.MasterState `json:"state"`
	Drifting        []bool                `json:"drifting"`
	Counts          []bool                `json:"counts"`
	QuarantineLeftS []int32               `json:"quarantine_left_s"`
	ClockOffsetMS   []jsonNum             `json:"clock_offset_ms"`
	DriftRatio      []jsonNum             `json:"drift_ratio"`
	ProbeLatencyMS  []jsonNum             `json:"probe_latency_ms"`
}

type historyLatency struct {
	P50 []jsonNum `json:"p50"`
	P99 []jsonNum `json:"p99"`
}

// jsonNum is a JSON number, null when NaN or infinite.
type jsonNum float64

func (n jsonNum) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', 6, 64), nil
}

// body lists the samples taken after since.
func (h *history) body(since time.Time, now time.Time) *historyBody {
	ms := h.health.Masters()
	h.mu.Lock()
	defer h.mu.Unlock()
	first := (h.next - h.n + len(h.samples)) % len(h.samples)
	var idx []int
	for k := range h.n {
		i := (first + k) % len(h.samples)
		if h.samples[i].at.After(since) {
			idx = append(idx, i)
		}
	}
	b := h.newBody(len(idx), ms, now)
	var seen [numResults]bool
	for _, i := range idx {
		for r, n := range h.samples[i].outcomes {
			seen[r] = seen[r] || n > 0
		}
	}
	for k, i := range idx {
		b.add(k, len(idx), &h.samples[i], &seen)
	}
	return b
}

// newBody returns an empty historyBody with room for n samples of the
// masters ms (their addresses; the samples' count of masters rules).
func (h *history) newBody(n int, ms []redlock.MasterStatus, now time.Time) *historyBody {
	b := &historyBody{
		IntervalMS: HistoryInterval.Milliseconds(),
		WindowS:    int64(HistoryWindow / time.Second),
		StartedMS:  h.started.UnixMilli(),
		NowMS:      now.UnixMilli(),
		TMS:        make([]int64, 0, n),
		Quorum: historyQuorum{
			Needed:   make([]int16, 0, n),
			Counting: make([]int16, 0, n),
			Up:       make([]int16, 0, n),
		},
		Masters:  make([]historyMaster, len(h.samples[0].masters)),
		Outcomes: map[string][]jsonNum{},
		Acquire:  historyLatency{P50: make([]jsonNum, 0, n), P99: make([]jsonNum, 0, n)},
		Wait:     historyLatency{P50: make([]jsonNum, 0, n), P99: make([]jsonNum, 0, n)},
	}
	for j := range b.Masters {
		hm := &b.Masters[j]
		hm.Index = j
		if j < len(ms) {
			hm.Addr = ms[j].Addr
		}
		hm.State = make([]redlock.MasterState, 0, n)
		hm.Drifting = make([]bool, 0, n)
		hm.Counts = make([]bool, 0, n)
		hm.QuarantineLeftS = make([]int32, 0, n)
		hm.ClockOffsetMS = make([]jsonNum, 0, n)
		hm.DriftRatio = make([]jsonNum, 0, n)
		hm.ProbeLatencyMS = make([]jsonNum, 0, n)
	}
	return b
}

// add appends sample s, the k-th of n, to b: the outcome rates only of the
// results seen in any of the n (a column of NaN where s covers no time).
func (b *historyBody) add(k, n int, s *sample, seen *[numResults]bool) {
	b.TMS = append(b.TMS, s.at.UnixMilli())
	b.Quorum.Needed = append(b.Quorum.Needed, s.needed)
	b.Quorum.Counting = append(b.Quorum.Counting, s.counting)
	b.Quorum.Up = append(b.Quorum.Up, s.up)
	b.Acquire.P50 = append(b.Acquire.P50, jsonNum(s.acquireP50*1000))
	b.Acquire.P99 = append(b.Acquire.P99, jsonNum(s.acquireP99*1000))
	b.Wait.P50 = append(b.Wait.P50, jsonNum(s.waitP50*1000))
	b.Wait.P99 = append(b.Wait.P99, jsonNum(s.waitP99*1000))
	for r := range numResults {
		if !seen[r] {
			continue
		}
		col := b.Outcomes[r.String()]
		if col == nil {
			col = make([]jsonNum, n)
			b.Outcomes[r.String()] = col
		}
		col[k] = jsonNum(math.NaN())
		if s.seconds > 0 {
			col[k] = jsonNum(float64(s.outcomes[r]) / s.seconds)
		}
	}
	for j := range b.Masters {
		x, hm := &s.masters[j], &b.Masters[j]
		hm.State = append(hm.State, x.state)
		hm.Drifting = append(hm.Drifting, x.drifting)
		hm.Counts = append(hm.Counts, x.counts)
		hm.QuarantineLeftS = append(hm.QuarantineLeftS, x.quarantineS)
		hm.ClockOffsetMS = append(hm.ClockOffsetMS, jsonNum(x.offsetMS))
		hm.DriftRatio = append(hm.DriftRatio, jsonNum(x.driftRatio))
		hm.ProbeLatencyMS = append(hm.ProbeLatencyMS, jsonNum(x.probeRTTMS))
	}
}

// serveHistory answers GET /v1/history; see historyBody. A since_ms that
// is not a whole number of Unix milliseconds ≥ 0 is 400, as is any other
// parameter (a misspelt since_ms would otherwise get the whole history
// back without a word), as the admin listings do.
func (s *Server) serveHistory(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadRequest, "query string: not valid URL encoding")
		return
	}
	for name, vs := range q {
		switch {
		case name != "since_ms":
			writeError(w, http.StatusBadRequest, codeBadRequest, "unknown parameter "+quoteCut(name, 32)+"; the only parameter is since_ms")
			return
		case len(vs) > 1:
			writeError(w, http.StatusBadRequest, codeBadRequest, "since_ms: given more than once")
			return
		}
	}
	since := time.Time{}
	if vs, ok := q["since_ms"]; ok { // since_ms= (empty) is refused, as the listings' limit= is
		v := vs[0]
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			writeError(w, http.StatusBadRequest, codeBadRequest, "since_ms: must be a whole number of Unix milliseconds, 0 or more, got "+quoteCut(v, 32))
			return
		}
		since = time.UnixMilli(ms)
	}
	writeJSONValue(w, http.StatusOK, s.history.body(since, time.Now()))
}

package limits

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the per-account limit metrics, registered with
// Collectors:
//
//   - redlockd_quota_remaining{account} gauge: calls left in the current
//     quota window, as this daemon knows it (accounts with a quota only).
//   - redlockd_quota_limit{account} gauge: the quota per window.
//   - redlockd_quota_exhausted_total{account} counter: calls refused 429
//     quota_exhausted.
//   - redlockd_rate_limited_total{account} counter: calls refused 429
//     rate_limited.
//   - redlockd_locks_held{account} gauge: locks the account holds across
//     the deployment, as this daemon knows it (accounts with max_locks).
//   - redlockd_max_locks{account} gauge: the cap.
//   - redlockd_too_many_locks_total{account} counter: acquires refused 429
//     too_many_locks.
//   - redlockd_limits_sync_total{result} counter: sync rounds with the
//     masters, result ok (a quorum answered) or no_quorum.
type Metrics struct {
	rateLimited, quotaExhausted, tooManyLocks *prometheus.CounterVec
	rounds                                    *prometheus.CounterVec
	roundOK, roundNoQuorum                    prometheus.Counter
	limiter                                   atomic.Pointer[Limiter]
	remain, quotaLimit, held, maxLocks        *prometheus.Desc
}

// accountMetrics are one account's counters, for /metrics and /v1/stats.
type accountMetrics struct {
	rateLimited, quotaExhausted, tooManyLocks prometheus.Counter
	nRateLimited, nQuotaExhausted, nTooMany   atomic.Uint64
}

// NewMetrics creates the metrics; NewLimiter makes them report its
// accounts.
func NewMetrics() *Metrics {
	account := []string{"account"}
	rounds := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redlockd_limits_sync_total",
		Help: "Rounds syncing account limits with the masters, by result: ok (a quorum answered) or no_quorum.",
	}, []string{"result"})
	lm := &Metrics{
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlockd_rate_limited_total",
			Help: "Calls refused 429 rate_limited, by account.",
		}, account),
		quotaExhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlockd_quota_exhausted_total",
			Help: "Calls refused 429 quota_exhausted, by account.",
		}, account),
		tooManyLocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlockd_too_many_locks_total",
			Help: "Acquires refused 429 too_many_locks, by account.",
		}, account),
		roundOK:       rounds.WithLabelValues("ok"),
		roundNoQuorum: rounds.WithLabelValues("no_quorum"),
		remain:        prometheus.NewDesc("redlockd_quota_remaining", "Calls left in the account's current quota window, as this daemon knows it.", account, nil),
		quotaLimit:    prometheus.NewDesc("redlockd_quota_limit", "The account's quota: calls per window.", account, nil),
		held:          prometheus.NewDesc("redlockd_locks_held", "Locks the account holds across the deployment, as this daemon knows it.", account, nil),
		maxLocks:      prometheus.NewDesc("redlockd_max_locks", "The most locks the account may hold at once.", account, nil),
	}
	lm.rounds = rounds
	return lm
}

// Collectors are the collectors to register.
func (lm *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{lm.rateLimited, lm.quotaExhausted, lm.tooManyLocks, lm.rounds, limitCollector{lm}}
}

// accountMetrics creates the account's series, so that they read 0 rather
// than missing before the first refusal.
func (lm *Metrics) accountMetrics(account string) *accountMetrics {
	return &accountMetrics{
		rateLimited:    lm.rateLimited.WithLabelValues(account),
		quotaExhausted: lm.quotaExhausted.WithLabelValues(account),
		tooManyLocks:   lm.tooManyLocks.WithLabelValues(account),
	}
}

func (lm *Metrics) round(ok bool) {
	if ok {
		lm.roundOK.Inc()
	} else {
		lm.roundNoQuorum.Inc()
	}
}

// refused counts a call refused by the account's limits.
func (am *accountMetrics) refused(r Reason) {
	switch r {
	case RateLimited:
		am.rateLimited.Inc()
		am.nRateLimited.Add(1)
	case QuotaExhausted:
		am.quotaExhausted.Inc()
		am.nQuotaExhausted.Add(1)
	case TooManyLocks:
		am.tooManyLocks.Inc()
		am.nTooMany.Add(1)
	}
}

// limitCollector reads the accounts' remaining quota and held locks at
// scrape time.
type limitCollector struct{ lm *Metrics }

func (c limitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lm.remain
	ch <- c.lm.quotaLimit
	ch <- c.lm.held
	ch <- c.lm.maxLocks
}

func (c limitCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.lm.limiter.Load()
	if l == nil {
		return
	}
	now := time.Now()
	for _, st := range l.accounts.Load().states {
		lim := st.limits()
		if lim.QuotaCalls > 0 {
			ch <- prometheus.MustNewConstMetric(c.lm.remain, prometheus.GaugeValue, float64(st.remain(now)), st.name)
			ch <- prometheus.MustNewConstMetric(c.lm.quotaLimit, prometheus.GaugeValue, float64(lim.QuotaCalls), st.name)
		}
		if lim.MaxLocks > 0 {
			ch <- prometheus.MustNewConstMetric(c.lm.held, prometheus.GaugeValue, float64(st.locksHeld()), st.name)
			ch <- prometheus.MustNewConstMetric(c.lm.maxLocks, prometheus.GaugeValue, float64(lim.MaxLocks), st.name)
		}
	}
}

// locksHeld is the held-lock estimate without this daemon's acquires in
// flight.
func (st *accountState) locksHeld() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.heldEstimate() - st.reserved
}

// AccountStats is one account in the daemon's GET /v1/stats.
type AccountStats struct {
	// QuotaLimit and QuotaRemaining are absent without a quota;
	// QuotaResetsAt is the end of the window, Unix seconds.
	QuotaLimit     *int64   `json:"quota_limit,omitempty"`
	QuotaWindowS   *float64 `json:"quota_window_seconds,omitempty"`
	QuotaRemaining *int64   `json:"quota_remaining,omitempty"`
	QuotaResetsAt  *int64   `json:"quota_resets_at,omitempty"`
	Rate           *float64 `json:"rate,omitempty"`
	Burst          *int     `json:"burst,omitempty"`
	RateTokens     *float64 `json:"rate_tokens,omitempty"`
	MaxLocks       *int     `json:"max_locks,omitempty"`
	LocksHeld      *int64   `json:"locks_held,omitempty"`
	QuotaExhausted uint64   `json:"quota_exhausted"`
	RateLimited    uint64   `json:"rate_limited"`
	TooManyLocks   uint64   `json:"too_many_locks"`
}

// Stats lists the accounts that have limits, for GET /v1/stats: none
// before a Limiter reports to lm.
func (lm *Metrics) Stats() map[string]AccountStats {
	return lm.limiter.Load().accountStats()
}

func (l *Limiter) accountStats() map[string]AccountStats {
	out := map[string]AccountStats{}
	if l == nil {
		return out
	}
	now := time.Now()
	for _, st := range l.accounts.Load().states {
		var a AccountStats
		lim := st.limits()
		if lim.QuotaCalls > 0 {
			calls, window, remain := lim.QuotaCalls, lim.QuotaWindow.Seconds(), st.remain(now)
			resets := time.UnixMilli(windowStart(now, lim.QuotaWindow)).Add(lim.QuotaWindow).Unix()
			a.QuotaLimit, a.QuotaWindowS, a.QuotaRemaining, a.QuotaResetsAt = &calls, &window, &remain, &resets
		}
		if lim.Rate > 0 {
			rate, burst, tokens := lim.Rate, lim.Burst, st.bucket(now)
			a.Rate, a.Burst, a.RateTokens = &rate, &burst, &tokens
		}
		if lim.MaxLocks > 0 {
			ml, held := lim.MaxLocks, st.locksHeld()
			a.MaxLocks, a.LocksHeld = &ml, &held
		}
		a.QuotaExhausted = st.metrics.nQuotaExhausted.Load()
		a.RateLimited = st.metrics.nRateLimited.Load()
		a.TooManyLocks = st.metrics.nTooMany.Load()
		out[st.name] = a
	}
	return out
}

// bucket is the rate limit's tokens now: calls that may come at once.
// Negative while other daemons' calls are being paid back.
func (st *accountState) bucket(now time.Time) float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.refill(now)
	return st.tokens
}

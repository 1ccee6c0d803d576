package daemon

import "github.com/prometheus/client_golang/prometheus"

// idemMetrics are the idempotency metrics:
//
//   - redlockd_idempotency_requests_total{action,result} counter: result
//     is begin's outcome (started, expired_in_progress, in_progress,
//     completed, fingerprint_mismatch), ok for the other actions answered,
//     or not_owner, bad_request, quorum_unavailable, error;
//   - redlockd_idempotency_replays_total: begins answered with a stored
//     answer;
//   - redlockd_idempotency_fingerprint_conflicts_total: begins refused for
//     another fingerprint (422);
//   - redlockd_idempotency_takeovers_total: begins after an attempt's lease
//     ended without complete (expired_in_progress);
//   - redlockd_idempotency_stored_bytes_total: bytes of answers stored
//     (body and headers);
//   - redlockd_idempotency_in_progress_age_seconds histogram: the age of
//     the IN_PROGRESS record a begin answered 409 for.
type idemMetrics struct {
	requests      *prometheus.CounterVec
	replays       prometheus.Counter
	conflicts     prometheus.Counter
	takeovers     prometheus.Counter
	stored        prometheus.Counter
	inProgressAge prometheus.Histogram
}

func newIdemMetrics() *idemMetrics {
	return &idemMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlockd_idempotency_requests_total",
			Help: "Idempotency actions by action and result.",
		}, []string{"action", "result"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlockd_idempotency_replays_total",
			Help: "Begins answered with the stored answer of a completed attempt.",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlockd_idempotency_fingerprint_conflicts_total",
			Help: "Begins refused because the key was used with another fingerprint.",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlockd_idempotency_takeovers_total",
			Help: "Begins after an attempt's lease ended without complete (expired_in_progress).",
		}),
		stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlockd_idempotency_stored_bytes_total",
			Help: "Bytes of answers stored (body and headers).",
		}),
		inProgressAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "redlockd_idempotency_in_progress_age_seconds",
			Help:    "Age of the IN_PROGRESS record a begin answered in_progress for.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}),
	}
}

func (m *idemMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.replays, m.conflicts, m.takeovers, m.stored, m.inProgressAge} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

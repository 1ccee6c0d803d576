package redlock

// The clock guard: what a health probe's TIME reading does to a master
// (clock.go holds the estimator itself).

import (
	"fmt"
	"log/slog"
	"time"
)

// observeClock feeds one TIME reading into the master's clock estimator
// (sent and received: our clock around the request, remote: its reply) and
// keeps the master out until its lease horizon on a forward jump or a new
// drift.
func (m *master) observeClock(sent, received, remote time.Time) {
	f := m.c.detectDrift()
	m.st.mu.Lock()
	ev, delta := m.st.clock.observe(sent, received, remote, f)
	wasDrifting := m.st.drifting
	switch ev {
	case clockDrifting:
		m.st.drifting = true
	case clockOK:
		if m.st.clock.rate < f/2 && m.st.clock.rate > -f/2 {
			m.st.drifting = false
		}
	}
	m.st.mu.Unlock()
	switch {
	case ev == clockJumpForward:
		// Its keys may have expired early: treat it like a restart
		// without data, minus the fencing repair (the counter is intact).
		m.clockJumped(delta, "a health probe")
	case ev == clockJumpBackward:
		m.c.opts.logger.Warn("master wall clock jumped backward (its locks will last longer)", masterAttr(m), slog.Duration("by", -delta))
	case ev == clockDrifting && !wasDrifting:
		// Keys set while it ran fast may expire early, for up to max TTL.
		m.holdUntilHorizon(fmt.Sprintf("wall clock drifts at rate %.4f, above the drift factor %.4f", m.st.clock.rate, f))
	}
}

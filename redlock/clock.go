package redlock

import (
	"fmt"
	"log/slog"
	"time"
)

// clockGuard tracks one master's wall clock against ours from TIME samples.
// Redis expires keys by its wall clock, so a master whose clock jumps
// forward drops locks early, and one that runs fast shortens every TTL: both
// break Redlock's drift assumption (Kleppmann, "How to do distributed
// locking", timing assumptions). The guard reports:
//
//   - a forward jump: the offset grew by more than the per-master timeout
//     plus the drift allowance since the previous sample;
//   - drift: over a window of at least minDriftSpan, the offset changed at a
//     rate above the drift factor.
//
// Every offset is uncertain by half the probe's round trip (the master read
// its clock somewhere within it), and both checks discount that
// uncertainty, so a loaded machine whose probes answer slowly is not taken
// for a jumping or drifting clock. Samples whose round trip exceeds the
// per-master timeout are ignored altogether.
type clockGuard struct {
	perMasterTimeout time.Duration

	samples []clockSample // oldest first, at most maxClockSamples
	offset  time.Duration // last accepted offset
	rate    float64       // last computed rate over the window
}

type clockSample struct {
	local  time.Time // our monotonic midpoint of the probe
	offset time.Duration
	// uncertainty is half the probe's round trip: the master read its
	// clock somewhere within it, so offset is known to ± this much.
	uncertainty time.Duration
}

const (
	maxClockSamples = 256              // a memory bound; the window is set by time
	maxDriftWindow  = 10 * time.Second // the rate is judged over about this long
	minDriftSpan    = 3 * time.Second
)

type clockEvent int

const (
	clockOK clockEvent = iota
	clockJumpForward
	clockJumpBackward
	clockDrifting
)

// observe records one TIME sample: sent and received are our clock around
// the TIME call (with monotonic readings), remote the master's answer;
// driftFactor is the one clocks are judged by (Client.detectDrift).
func (g *clockGuard) observe(sent, received, remote time.Time, driftFactor float64) (clockEvent, time.Duration) {
	rtt := received.Sub(sent)
	if rtt > g.perMasterTimeout || rtt < 0 {
		return clockOK, 0
	}
	mid := sent.Add(rtt / 2)
	// Wall-clock difference at the midpoint; Round(0) strips the monotonic
	// reading so that Sub compares wall clocks.
	offset := remote.Sub(mid.Round(0))
	s := clockSample{local: mid, offset: offset, uncertainty: rtt / 2}
	if n := len(g.samples); n > 0 {
		prev := g.samples[n-1]
		elapsed := mid.Sub(prev.local)
		allow := g.perMasterTimeout + time.Duration(float64(elapsed)*driftFactor) + 2*time.Millisecond +
			s.uncertainty + prev.uncertainty
		delta := offset - prev.offset
		if delta > allow || delta < -allow {
			// A jump resets the window: the rate before and after it are
			// separate questions.
			g.samples = append(g.samples[:0], s)
			g.offset, g.rate = offset, 0
			if delta > 0 {
				return clockJumpForward, delta
			}
			return clockJumpBackward, delta
		}
	}
	g.samples = append(g.samples, s)
	// Keep about maxDriftWindow of samples whatever the probe interval (a
	// count-based window of 30 never spanned minDriftSpan at intervals
	// below ~100ms, so drift went unchecked).
	drop := 0
	for len(g.samples)-drop > 2 && mid.Sub(g.samples[drop+1].local) >= maxDriftWindow {
		drop++
	}
	if n := len(g.samples) - drop; n > maxClockSamples {
		drop += n - maxClockSamples
	}
	if drop > 0 {
		g.samples = append(g.samples[:0], g.samples[drop:]...)
	}
	g.offset = offset
	first := g.samples[0]
	span := mid.Sub(first.local)
	if span < minDriftSpan {
		return clockOK, 0
	}
	delta := offset - first.offset
	g.rate = float64(delta) / float64(span)
	// Drifting only if even the most favourable reading of the two
	// samples' uncertainty leaves a rate above the drift factor.
	slack := s.uncertainty + first.uncertainty
	least := max(delta-slack, 0)
	if delta < 0 {
		least = min(delta+slack, 0)
	}
	if r := float64(least) / float64(span); r > driftFactor || r < -driftFactor {
		return clockDrifting, delta
	}
	return clockOK, 0
}

// The clock guard: what a health probe's TIME reading does to a master.

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

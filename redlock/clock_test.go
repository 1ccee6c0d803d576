package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// feed simulates probes every interval against a master whose clock is
// skew(t) ahead of ours, and returns the events seen.
func feed(g *clockGuard, n int, interval, rtt time.Duration, skew func(time.Duration) time.Duration) []clockEvent {
	base := time.Now()
	var out []clockEvent
	for i := range n {
		sent := base.Add(time.Duration(i) * interval)
		received := sent.Add(rtt)
		elapsed := time.Duration(i) * interval
		remote := sent.Add(rtt / 2).Round(0).Add(skew(elapsed))
		ev, _ := g.observe(sent, received, remote, testDriftFactor)
		out = append(out, ev)
	}
	return out
}

// testDriftFactor is the drift factor the guard tests judge by.
const testDriftFactor = 0.01

func newGuard() *clockGuard {
	return &clockGuard{perMasterTimeout: 50 * time.Millisecond}
}

func TestClockGuardSteadyOffsetIsFine(t *testing.T) {
	g := newGuard()
	evs := feed(g, 20, time.Second, time.Millisecond, func(time.Duration) time.Duration { return 3 * time.Second })
	for _, ev := range evs {
		assert.Equal(t, clockOK, ev)
	}
	assert.InDelta(t, 0, g.rate, 1e-9)
}

func TestClockGuardForwardJump(t *testing.T) {
	g := newGuard()
	evs := feed(g, 10, time.Second, time.Millisecond, func(e time.Duration) time.Duration {
		if e >= 5*time.Second {
			return 2 * time.Second
		}
		return 0
	})
	assert.Equal(t, clockJumpForward, evs[5])
	for i, ev := range evs {
		if i != 5 {
			assert.Equal(t, clockOK, ev, "sample %d", i)
		}
	}
}

func TestClockGuardBackwardJump(t *testing.T) {
	g := newGuard()
	evs := feed(g, 4, time.Second, time.Millisecond, func(e time.Duration) time.Duration {
		if e >= 2*time.Second {
			return -time.Second
		}
		return 0
	})
	assert.Equal(t, []clockEvent{clockOK, clockOK, clockJumpBackward, clockOK}, evs)
}

func TestClockGuardFastClockIsDrifting(t *testing.T) {
	g := newGuard()
	// 2% fast: 20ms per 1s probe, below the jump threshold each time,
	// above the 1% drift factor over the window.
	evs := feed(g, 10, time.Second, time.Millisecond, func(e time.Duration) time.Duration {
		return time.Duration(float64(e) * 0.02)
	})
	assert.Equal(t, clockOK, evs[0])
	assert.Equal(t, clockOK, evs[2], "no verdict before the window spans minDriftSpan")
	assert.Contains(t, evs, clockDrifting)
	assert.NotContains(t, evs, clockJumpForward)
	assert.InDelta(t, 0.02, g.rate, 0.001)
}

func TestClockGuardRateWithinDriftFactorIsFine(t *testing.T) {
	g := newGuard()
	evs := feed(g, 20, time.Second, time.Millisecond, func(e time.Duration) time.Duration {
		return time.Duration(float64(e) * 0.005)
	})
	assert.NotContains(t, evs, clockDrifting)
}

func TestClockGuardIgnoresSlowSamples(t *testing.T) {
	g := newGuard()
	// A 2s round trip (a paused master) says nothing precise about its clock.
	ev, _ := g.observe(time.Now(), time.Now().Add(2*time.Second), time.Now().Add(time.Hour), testDriftFactor)
	assert.Equal(t, clockOK, ev)
	assert.Empty(t, g.samples)
}

func TestClockGuardFastRateOnePointOneJumps(t *testing.T) {
	g := newGuard()
	// Rate 1.1 (the drill's fast clock): 100ms per 1s probe exceeds the
	// jump threshold at once.
	evs := feed(g, 3, time.Second, time.Millisecond, func(e time.Duration) time.Duration {
		return time.Duration(float64(e) * 0.1)
	})
	assert.Equal(t, clockJumpForward, evs[1])
}

// TestClockGuardSlowProbesAreNotDrift: on a loaded machine probes answer in
// tens of milliseconds at random points of their round trip; that noise is
// not a jump or a drift, while a real 2% drift is still seen through it.
func TestClockGuardSlowProbesAreNotDrift(t *testing.T) {
	g := newGuard()
	base := time.Now()
	rtts := []time.Duration{49, 45, 3, 48, 1, 40, 5, 49, 2, 44, 1, 47}
	for i, r := range rtts {
		rtt := r * time.Millisecond
		sent := base.Add(time.Duration(i) * time.Second)
		// The master reads its clock at the start or at the end of the
		// round trip, alternately: the worst case for the midpoint.
		read := sent
		if i%2 == 1 {
			read = sent.Add(rtt)
		}
		ev, _ := g.observe(sent, sent.Add(rtt), read.Round(0), testDriftFactor)
		assert.Equal(t, clockOK, ev, "sample %d", i)
	}

	g = newGuard()
	for i, r := range rtts {
		rtt := r * time.Millisecond
		sent := base.Add(time.Duration(i) * time.Second)
		read := sent
		if i%2 == 1 {
			read = sent.Add(rtt)
		}
		skew := time.Duration(float64(time.Duration(i)*time.Second) * 0.05)
		ev, _ := g.observe(sent, sent.Add(rtt), read.Round(0).Add(skew), testDriftFactor)
		if ev == clockDrifting {
			return
		}
	}
	t.Fatal("a 5% drift must be seen through 50ms of probe noise")
}

// TestClockGuardDriftAtShortProbeInterval: at a 50ms probe interval the
// window still spans enough time to judge the rate.
func TestClockGuardDriftAtShortProbeInterval(t *testing.T) {
	g := newGuard()
	evs := feed(g, 200, 50*time.Millisecond, time.Millisecond, func(e time.Duration) time.Duration {
		return time.Duration(float64(e) * 0.03)
	})
	assert.Contains(t, evs, clockDrifting)
	assert.NotContains(t, evs, clockJumpForward)
}

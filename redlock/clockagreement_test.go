package redlock

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Check 2 of clock.go with N − quorum faulty clocks (two of five masters 2 s
// ahead) and one sane master's reading missing or imprecise, as on a busy
// machine: the faulty minority must not get the sane masters held out. It
// did when check 2 judged by the median of the readings there were (a
// black-box run with clock faults on masters 0 and 1 took all five out for
// max TTL: the sane ones were held, then each waited for a horizon no
// quorum could give). The readings are planted, as a probe round would
// leave them, on a Client whose own rounds are an hour apart.
func TestClockAgreementIsNotMovedByAFaultyMinority(t *testing.T) {
	c := newClient(t, WithHealthInterval(time.Hour))
	for _, m := range c.masters {
		require.Eventually(t, func() bool { return m.answeredProbe() && m.st.lastReading.Load() != nil }, 10*time.Second, 10*time.Millisecond)
	}
	ahead := int64(2 * time.Second)
	imprecise := int64(c.maxUncertainty())
	plant := func(offsets [5]int64, uncert [5]int64) {
		now := c.sinceEpoch()
		for i, m := range c.masters {
			r := clockRef{at: now, offset: offsets[i], uncert: uncert[i]}
			m.st.lastReading.Store(&r)
			m.st.ref.Store(&r)
		}
	}
	held := func() (out []int) {
		for i, m := range c.masters {
			if m.st.conds.has(condClockHold) {
				out = append(out, i)
			}
		}
		return out
	}

	// Master 4's reading is imprecise: the readings judged are two sane
	// and two faulty, whose median is a faulty one.
	plant([5]int64{ahead, ahead, 0, 0, 0}, [5]int64{0, 0, 0, 0, imprecise})
	c.checkClockAgreement()
	assert.Empty(t, held(), "no master is held out: the sane ones differ from only two others, the faulty ones from only two")

	// One faulty clock next to two sane precise readings, the other two
	// sane ones imprecise: the faulty master is in a strict minority of
	// the readings and is held out, as the median rule held it (counting
	// only "differs from a quorum" would have let it vote).
	plant([5]int64{ahead, 0, 0, 0, 0}, [5]int64{0, 0, 0, imprecise, imprecise})
	c.checkClockAgreement()
	assert.Equal(t, []int{0}, held())
	plant([5]int64{}, [5]int64{})
	c.checkClockAgreement()
	require.Empty(t, held())

	// The vote check of a first vote (agreesWithOthers) keeps the median
	// of the other masters' references: with all of them precise, a sane
	// master's vote agrees and a faulty one's does not.
	plant([5]int64{ahead, 0, 0, 0, 0}, [5]int64{})
	for i, want := range []bool{false, true, true, true, true} {
		agrees, known := c.agreesWithOthers(c.masters[i], *c.masters[i].st.ref.Load())
		assert.True(t, known)
		assert.Equal(t, want, agrees, fmt.Sprintf("master %d's vote", i))
	}

	plant([5]int64{ahead, ahead, 0, 0, 0}, [5]int64{})
	// Every reading precise: the faulty two differ from the three sane ones,
	// a quorum, and are held out; the sane ones are not.
	c.checkClockAgreement()
	assert.Equal(t, []int{0, 1}, held())

	// The faulty clocks are fixed: they agree with quorum − 1 others again
	// and leave the hold (for their horizon: judgeClockFault).
	plant([5]int64{}, [5]int64{})
	c.checkClockAgreement()
	assert.Empty(t, held())
}

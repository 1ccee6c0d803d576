package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the exits from the states in which a master does not count
// (health.go, "How a master leaves the counting set and comes back"): each
// leaves by its exit within its bound. None asserts a duration measured on
// the wall clock: they wait with deadlines several times the bound, and
// check the bound on the state the Client reports (QuarantineLeft), so a
// loaded machine makes them slower, never red.

// totalLosses is the number of data losses c has seen, every reason.
func totalLosses(c *Client) int64 {
	var n int64
	for _, v := range c.DataLosses() {
		n += v
	}
	return n
}

// countsAgainWithin waits until c has repaired master i (repairs grew past
// before), checks that the quarantine it then set is within bound, waits
// (deadline: several times bound) until the master counts, and then that
// it keeps counting over three more probe rounds with no new loss.
func countsAgainWithin(t *testing.T, c *Client, i int, before int64, bound time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return c.FenceRepairs() > before }, 10*time.Second, 5*time.Millisecond,
		"the loss was seen and repaired: %+v", c.Masters()[i])
	st := c.Masters()[i]
	assert.LessOrEqual(t, st.QuarantineLeft, bound, "the quarantine after the repair is within the bound: %s", st.QuarantineReason)
	require.Eventually(t, func() bool { return c.Masters()[i].Counting }, 4*bound+10*time.Second, 10*time.Millisecond,
		"counts again after its quarantine: %+v", c.Masters()[i])
	losses := totalLosses(c)
	for range 3 {
		c.probeAll()
		c.afterProbes()
		require.True(t, c.Masters()[i].Counting, "keeps counting: %+v", c.Masters()[i])
	}
	assert.Equal(t, losses, totalLosses(c), "no new loss once repaired: %v", c.DataLosses())
}

// TestNewDeploymentLossCountsAgain is the reproduction: a brand-new
// deployment that granted no lock yet, so its fencing counters are all 0,
// loses master 0's data (a restart, or a FLUSHALL). The repair raised the
// counter to the others' highest, 0, with a max-assign that left a missing
// counter missing; the next probe took that for a new loss, and the
// master flipped between repairing and quarantined for good. It must count
// again once its quarantine (the others' lease horizon: no lock, so none)
// is over.
func TestNewDeploymentLossCountsAgain(t *testing.T) {
	const maxTTL = 8 * time.Second
	for _, fault := range []string{"restart", "flushall"} {
		t.Run(fault, func(t *testing.T) {
			c, _ := brandNewClient(t, WithMaxTTL(maxTTL), WithHealthInterval(100*time.Millisecond))
			before := c.FenceRepairs()
			switch fault {
			case "restart":
				restartEmpty(t, 0)
			case "flushall":
				require.NoError(t, direct(t)[0].FlushAll(context.Background()).Err())
			}
			countsAgainWithin(t, c, 0, before, maxTTL)
			lock, err := c.Acquire(context.Background(), newKey(t), time.Second)
			require.NoError(t, err)
			assert.EqualValues(t, 1, lock.Fence(), "the first fence of the deployment")
		})
	}
}

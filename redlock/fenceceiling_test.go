package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFenceCeilingRefusesTheGrant: found by an adversarial pass. Counters
// at MaxFence − 1 (set by hand here; a repair-fences target that high was
// accepted until then, TestRepairFencesRefuses). The next grant gets
// MaxFence, the largest fence; after it no fence is left: the scripts
// compare counters as Lua numbers, and MaxFence + 1 = 2^53 + 0 would be
// stored rounded, so the holder after the next would get the same fence.
// Every acquire past MaxFence, through this Client or another daemon's, is
// refused (quorum unavailable, ErrFenceExhausted among its failures) and
// leaves no key behind. Negative control (nextFence without its check):
// fences 2^53, 2^53 + 1, 2^53 + 1 — the last two holders share a fence.
func TestFenceCeilingRefusesTheGrant(t *testing.T) {
	ctx := context.Background()
	x, opts := brandNewClient(t)
	y := sameDeployment(t, opts...)
	require.Eventually(t, y.QuorumAvailable, 10*time.Second, 10*time.Millisecond)
	fenceKey := x.opts.fenceKey
	for _, r := range direct(t) {
		require.NoError(t, r.Set(ctx, fenceKey, MaxFence-1, 0).Err())
	}

	key := newKey(t)
	l, err := x.Acquire(ctx, key, 2*time.Second, WithRetry(NoRetry()))
	require.NoError(t, err, "MaxFence itself is issued")
	assert.Equal(t, MaxFence, l.Fence())
	require.NoError(t, l.Release(ctx))

	for i, c := range []*Client{y, x, y} {
		_, err := c.Acquire(ctx, key, 2*time.Second, WithRetry(NoRetry()))
		require.ErrorIs(t, err, ErrQuorumUnavailable, "acquire %d after MaxFence", i)
		require.ErrorIs(t, err, ErrFenceExhausted, "acquire %d after MaxFence", i)
		assert.Contains(t, err.Error(), "no fence is left up to the largest, 9007199254740991")
		assert.NotContains(t, err.Error(), "master(s) failed", "every master voted: none failed")
	}
	for i, r := range direct(t) {
		n, err := r.Exists(ctx, key, x.fenceRecordKey(key)).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "master %d: a refused grant leaves no key", i)
		counter, err := r.Get(ctx, fenceKey).Int64()
		require.NoError(t, err)
		assert.LessOrEqual(t, counter, MaxFence, "master %d: no fence above MaxFence written", i)
	}
	for i, st := range x.Masters() {
		assert.Equal(t, MasterUp, st.State, "master %d: nothing looks rolled back", i)
	}
}

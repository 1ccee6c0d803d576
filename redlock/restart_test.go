package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// persistently turns on master 4's AOF with appendfsync fsync and waits
// until the AOF holds its whole dataset; the cleanup restarts the master
// empty, with the suite's non-durable settings.
func persistently(t *testing.T, r *redis.Client, fsync string) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() { require.NoError(t, servers[4].Restart()) })
	require.NoError(t, r.ConfigSet(ctx, "appendfsync", fsync).Err())
	require.NoError(t, r.ConfigSet(ctx, "appendonly", "yes").Err())
	require.Eventually(t, func() bool {
		f := parseInfoFields(r.Info(ctx, "persistence").Val(), "aof_enabled", "aof_rewrite_in_progress", "aof_rewrite_scheduled")
		return f["aof_enabled"] == "1" && f["aof_rewrite_in_progress"] == "0" && f["aof_rewrite_scheduled"] == "0"
	}, 10*time.Second, 10*time.Millisecond, "the AOF rewrite ends")
}

// TestDurableRestartIsNoLoss: master 4 persists every write (appendonly
// yes, appendfsync always) and is restarted cleanly while it holds a lock.
// It kept its data, so it is never quarantined: the lock is still held
// with its vote (masters 0 and 1 do not have the key) and no second holder
// gets in. Its INFO stats started again from zero; they used to be taken
// for a CONFIG RESETSTAT at its first vote. The negative control restarts
// it the same way with appendfsync everysec: a restart of a master that
// does not persist every write is a loss, whatever it happened to keep.
func TestDurableRestartIsNoLoss(t *testing.T) {
	scenario := func(t *testing.T, fsync string, evicted int64, opts ...Option) (*Client, string) {
		ctx := context.Background()
		r := direct(t)[4]
		persistently(t, r, fsync)
		c, _ := brandNewClient(t, opts...)
		require.Eventually(t, func() bool { return c.Masters()[4].Durable == (fsync == "always") }, 5*time.Second, 10*time.Millisecond)
		key := newKey(t)
		placeOn(t, c, key, 30*time.Second, 2, 3, 4)
		warmUp(c) // a vote's baseline of master 4's command count
		before := c.Masters()[4].RunID
		if evicted > 0 {
			c.masters[4].st.inc.evicted.Store(evicted)
		}
		require.NoError(t, servers[4].RestartKeepingData("--appendonly", "yes", "--appendfsync", fsync))
		require.NoError(t, r.Get(ctx, key).Err(), "the lock key survived the restart")
		require.Eventually(t, func() bool {
			_, _ = c.Status(ctx, key) // new lane connections read the run_id
			return c.Masters()[4].RunID != before
		}, 5*time.Second, 10*time.Millisecond)
		return c, key
	}
	durable := func(t *testing.T, evicted int64, opts ...Option) {
		ctx := context.Background()
		c, key := scenario(t, "always", evicted, opts...)
		quarantines := c.quarantines.Load()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			st, err := c.Status(ctx, key)
			require.NoError(ct, err)
			require.True(ct, st.Held, "%+v", st)
		}, 5*time.Second, 20*time.Millisecond, "the lock is held with master 4's vote")
		for range 20 { // votes of the new process, by every lane
			warmUp(c)
		}
		_, err := c.Acquire(ctx, key, 30*time.Second, WithRetry(NoRetry()))
		require.ErrorIs(t, err, ErrNotObtained)
		time.Sleep(200 * time.Millisecond) // a few probes
		st := c.Masters()[4]
		assert.Equal(t, MasterUp, st.State, st.QuarantineReason)
		assert.True(t, st.Counting)
		assert.Equal(t, quarantines, c.quarantines.Load(), "never quarantined")
		for r, n := range c.DataLosses() {
			assert.Zero(t, n, "%s", r)
		}
	}
	t.Run("durable", func(t *testing.T) { durable(t, 0) })
	// The old process had evicted keys once and was repaired since: its
	// eviction baseline is 3 (the repair marker's ev=), the new process
	// counts from 0. No probe runs between the baseline and the restart.
	t.Run("durable, evictions counted before", func(t *testing.T) { durable(t, 3, WithHealthInterval(time.Hour)) })
	t.Run("negative control: appendfsync everysec", func(t *testing.T) {
		c, _ := scenario(t, "everysec", 0)
		require.Eventually(t, func() bool { return c.DataLosses()[LossRestart] == 1 }, 5*time.Second, 10*time.Millisecond)
		assert.False(t, c.Masters()[4].Counting)
	})
}

// TestResetStatIsALoss: CONFIG RESETSTAT without a restart (the same
// run_id) and without evictions: only total_commands_processed went down,
// which would hide evictions made just before it. Masters 0 and 1 hold the
// keys, so master 4's vote is read every time.
// Both forms of the batch reading (batchstats.go) are run.
func TestResetStatIsALoss(t *testing.T) {
	forEachReadingForm(t, testResetStatIsALoss)
}

func testResetStatIsALoss(t *testing.T, bare bool) {
	ctx := context.Background()
	c, _ := brandNewClient(t, WithHealthInterval(time.Hour))
	useReadingForm(t, c, bare)
	placeOn(t, c, newKey(t), time.Second, 2, 3, 4) // master 4's command count, read by its vote
	require.NoError(t, direct(t)[4].ConfigResetStat(ctx).Err())
	key := newKey(t)
	for _, r := range direct(t)[:2] {
		require.NoError(t, r.Set(ctx, key, "foreign", time.Minute).Err())
	}
	_, err := c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrNotObtained)
	assert.EqualValues(t, 1, c.DataLosses()[LossEvicted])
	assert.Contains(t, c.Masters()[4].QuarantineReason, "CONFIG RESETSTAT")
}

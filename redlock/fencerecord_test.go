package redlock

import (
	"context"
	_ "embed"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The release and extend scripts of the version before fence records, as a
// daemon not yet upgraded runs them during a rolling upgrade.
var (
	//go:embed testdata/before-fence-records/release.lua
	oldReleaseLua string
	//go:embed testdata/before-fence-records/extend.lua
	oldExtendLua string
)

// TestStatusFence: status reports the fence the acquire returned, the same
// after extends (Client.Extend and Lock.Extend), and none once released;
// the record keeps the lock's expiry and goes with the lock.
func TestStatusFence(t *testing.T) {
	c := newClient(t)
	rdbs := direct(t)
	ctx := context.Background()
	key := newKey(t)
	rec := c.fenceRecordKey(key)

	lock, err := c.Acquire(ctx, key, 2*time.Second)
	require.NoError(t, err)
	require.Positive(t, lock.Fence())
	st, err := c.Status(ctx, key)
	require.NoError(t, err)
	require.True(t, st.Held)
	assert.Equal(t, lock.Fence(), st.Fence)

	// A quorum (the masters that voted in time) holds "<fence> <token>",
	// expiring with the lock (never before it).
	written := holders(t, rdbs, rec, strconv.FormatInt(lock.Fence(), 10)+" "+lock.Token())
	require.GreaterOrEqual(t, len(written), c.Quorum())
	for _, i := range written {
		lp, rp := pttls(t, rdbs[i], key, rec)
		assert.InDelta(t, lp.Milliseconds(), rp.Milliseconds(), 1, "master %d: lock and record PTTL", i)
		assert.GreaterOrEqual(t, rp.Milliseconds()+1, lp.Milliseconds(), "master %d: record expires before the lock", i)
	}

	// Another key's acquire moves the global counter; this lock's fence
	// stays. (An implementation reporting the counter would fail here.)
	other, err := c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	require.Greater(t, other.Fence(), lock.Fence())

	l2, err := c.Extend(ctx, key, lock.Token(), 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, lock.Fence(), l2.Fence(), "Client.Extend returns the holder's fence")
	require.NoError(t, lock.Extend(ctx, 40*time.Second))
	require.Eventually(t, func() bool {
		for _, i := range written {
			if rdbs[i].PTTL(ctx, rec).Val() < 35*time.Second {
				return false
			}
		}
		return true
	}, time.Second, 5*time.Millisecond, "extend gives the record the lock's PTTL")
	for _, i := range written {
		lp, rp := pttls(t, rdbs[i], key, rec)
		assert.InDelta(t, lp.Milliseconds(), rp.Milliseconds(), 1, "master %d: lock and record PTTL after the extend", i)
	}
	st, err = c.Status(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, lock.Fence(), st.Fence)
	assert.Greater(t, st.Validity, 35*time.Second)

	require.NoError(t, lock.Release(ctx))
	require.Eventually(t, func() bool {
		for _, r := range rdbs {
			if r.Exists(ctx, rec).Val() != 0 {
				return false
			}
		}
		return true
	}, time.Second, 5*time.Millisecond, "release deletes the record")
	st, err = c.Status(ctx, key)
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.Zero(t, st.Fence)
}

// TestStatusFenceMastersDown: with two masters down, acquire writes the
// fence to the other three, and status (which then needs all three) reports it.
func TestStatusFenceMastersDown(t *testing.T) {
	for _, down := range [][]int{{0, 1}, {3, 4}, {1, 3}} {
		t.Run(strconv.Itoa(down[0])+strconv.Itoa(down[1]), func(t *testing.T) {
			withMasters(t, "kill", down...)
			c := newClient(t)
			ctx := context.Background()
			key := newKey(t)
			lock, err := c.Acquire(ctx, key, 5*time.Second)
			require.NoError(t, err)
			st, err := c.Status(ctx, key)
			require.NoError(t, err)
			require.True(t, st.Held)
			assert.Equal(t, lock.Fence(), st.Fence)
			l2, err := c.Extend(ctx, key, lock.Token(), 5*time.Second)
			require.NoError(t, err)
			assert.Equal(t, lock.Fence(), l2.Fence())
			require.NoError(t, lock.Release(ctx))
			st, err = c.Status(ctx, key)
			require.NoError(t, err)
			assert.False(t, st.Held)
			assert.Zero(t, st.Fence)
		})
	}
}

// TestStatusFenceStaleRecord: a record left by an earlier holder (an old
// daemon's release does not delete it) is never reported for a later
// holder, and a lock whose write-back has not reached the masters shows 0.
// Negative control: the stale record, with the earlier holder's fence, is
// on a quorum when status reads it, so a status that did not compare the
// record's token with the lock's would report that fence.
func TestStatusFenceStaleRecord(t *testing.T) {
	c := newClient(t)
	rdbs := direct(t)
	ctx := context.Background()
	key := newKey(t)
	rec := c.fenceRecordKey(key)

	first, err := c.Acquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(holders(t, rdbs, key, first.Token())) == 5 }, time.Second, 5*time.Millisecond)
	// The old release: compare-and-delete of the lock key only.
	old := redis.NewScript(oldReleaseLua)
	for i, r := range rdbs {
		n, err := old.Run(ctx, r, []string{key}, first.Token()).Int()
		require.NoError(t, err)
		require.Equal(t, 1, n, "master %d: the old release deletes a lock the new version wrote", i)
	}
	// A new holder whose write-back has not happened yet: the lock key
	// alone, as an acquire's votes (or an old daemon's acquire) leave it.
	second := "0123456789abcdef0123456789abcdef"
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, key, second, 10*time.Second).Err())
	}
	stale := strconv.FormatInt(first.Fence(), 10) + " " + first.Token()
	// Negative control: the earlier holder's record is on a quorum, so any
	// quorum of holders status reads includes one that has it.
	staleOn := holders(t, rdbs, rec, stale)
	require.GreaterOrEqual(t, len(staleOn), c.Quorum())

	st, err := c.Status(ctx, key)
	require.NoError(t, err)
	require.True(t, st.Held)
	assert.Zero(t, st.Fence, "the earlier holder's fence %d must not be reported for the new holder", first.Fence())
	l, err := c.Extend(ctx, key, second, 10*time.Second)
	require.NoError(t, err)
	assert.Zero(t, l.Fence())
	settle(t, c, key) // the extend answers at a quorum; the rest land just after
	// The extend replaces the earlier holder's record with one for the
	// holder, fence unknown (0): every master that extends a lock marks it
	// granted (granted.go), and status still reports 0, never the stale
	// fence.
	assert.Empty(t, holders(t, rdbs, rec, stale), "the earlier holder's record is replaced")
	assert.Len(t, holders(t, rdbs, rec, "0 "+second), 5, "the extending holder's record, fence unknown")
	st, err = c.Status(ctx, key)
	require.NoError(t, err)
	assert.Zero(t, st.Fence)
}

// TestOldDaemonExtend: a daemon from before fence records extends a lock
// the new version wrote (its compare-and-extend sees the bare token); the
// record then expires before the lock, and status reports 0, not a wrong
// fence, for the rest of the lock.
func TestOldDaemonExtend(t *testing.T) {
	c := newClient(t)
	rdbs := direct(t)
	ctx := context.Background()
	key := newKey(t)

	lock, err := c.Acquire(ctx, key, 300*time.Millisecond)
	require.NoError(t, err)
	settle(t, c, key) // Acquire answers at quorum: the other masters' SETs land just after
	old := redis.NewScript(votePreludeLua + oldExtendLua)
	keys := c.voteKeys(key)[:4] // the old daemon's KEYS: no record
	for i, r := range rdbs {
		raw, err := old.Run(ctx, r, keys, lock.Token(), "3000", "1").Result()
		require.NoError(t, err)
		v, ok := parseVote(raw)
		require.True(t, ok, "%v", raw)
		require.EqualValues(t, 1, v.code, "master %d: the old extend extends a lock the new version wrote", i)
	}
	st, err := c.Status(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, lock.Fence(), st.Fence, "the record lives until the lock's old expiry")
	// Once the record has expired (the lock has 2.5 s more to go):
	require.Eventually(t, func() bool {
		for _, r := range rdbs {
			if r.Exists(ctx, c.fenceRecordKey(key)).Val() != 0 {
				return false
			}
		}
		return true
	}, 2*time.Second, 5*time.Millisecond)
	st, err = c.Status(ctx, key)
	require.NoError(t, err)
	require.True(t, st.Held)
	assert.Zero(t, st.Fence)
	require.NoError(t, lock.Release(ctx))
}

// TestAcquireRefusesReservedKeys: a lock key may not be one of the
// Client's own keys, or a fence record would overwrite it.
func TestAcquireRefusesReservedKeys(t *testing.T) {
	c := newClient(t)
	for _, k := range []string{"redlock:fence", "redlock:fence:x", c.opts.markerKey, c.opts.horizonKey} {
		_, err := c.Acquire(context.Background(), k, time.Second)
		assert.ErrorIs(t, err, ErrInvalid, k)
	}
}

// pttls reads the PTTLs of key and rec on r in one MULTI, so that both
// are read at the same instant of the master's clock: two reads in a row
// differ by the time between them, several ms on a loaded machine.
func pttls(t *testing.T, r *redis.Client, key, rec string) (lock, record time.Duration) {
	t.Helper()
	var lp, rp *redis.DurationCmd
	_, err := r.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
		lp, rp = p.PTTL(context.Background(), key), p.PTTL(context.Background(), rec)
		return nil
	})
	require.NoError(t, err)
	return lp.Val(), rp.Val()
}

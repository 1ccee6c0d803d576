package redlock

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLossQuarantineCoversAnotherClientsLongerTTL: a Client with max TTL
// 2s (a daemon with max_ttl 2) and one allowing an hour (a library client)
// share the masters. The long one holds a 30s lock on every master; master
// 2 restarts empty; the short one repairs it. Its quarantine must last
// until the 30s lock ends (the lease horizon of the others), not 2s from
// the loss: after 2s a contender's vote from master 2 would grant the same
// key while the 30s lock stands (the Docker drill's restart-empty row saw
// that overlap). Before the max TTL registry the short Client capped the
// quarantine at its own max TTL.
func TestLossQuarantineCoversAnotherClientsLongerTTL(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	long := newClient(t, WithMarkerKey(marker), WithMaxTTL(time.Hour), WithHealthInterval(time.Hour))
	short := newClient(t, WithMarkerKey(marker), WithMaxTTL(2*time.Second), WithHealthInterval(20*time.Millisecond))
	require.Eventually(t, func() bool { return short.lossTTL() == time.Hour }, 5*time.Second, 10*time.Millisecond,
		"the short Client reads the long one's registration at its next probe")

	lock, err := long.Acquire(ctx, newKey(t), 30*time.Second)
	require.NoError(t, err)
	defer func() { _ = lock.Release(ctx) }()
	restartEmpty(t, 2)
	require.Eventually(t, func() bool {
		st := short.Masters()[2]
		return st.State == MasterQuarantined && !short.masters[2].st.conds.has(condRepairPending)
	}, 10*time.Second, 10*time.Millisecond, "the short Client repairs master 2 from the others: %v", states(short))
	left := short.Masters()[2].QuarantineLeft
	assert.Greater(t, left, 20*time.Second, "quarantined until the 30s lock ends, not for the short Client's own 2s max TTL")
	assert.Less(t, left, 31*time.Second, "but the lease horizon, not the hour, bounds it")
}

// TestMaxTTLRegistry runs scripts/max_ttl.lua on a real master: the
// longest live registration is returned; a shorter one does not lower it;
// registering again extends a registration; an entry lapses its max TTL
// after its last registration, and the key goes with the last entry.
func TestMaxTTLRegistry(t *testing.T) {
	ctx := context.Background()
	rdb := direct(t)[0]
	key := "marker:" + newKey(t) + ":max_ttl"
	run := func(ms int64) int64 {
		t.Helper()
		v, err := maxTTLScript.Run(ctx, rdb, []string{key}, ms, maxTTLCeilingMS).Int64Slice()
		require.NoError(t, err)
		require.Len(t, v, 2)
		assert.Zero(t, v[1], "no odd entries")
		return v[0]
	}
	assert.Zero(t, run(0), "nothing registered")
	assert.Equal(t, int64(400), run(400))
	assert.Equal(t, int64(400), run(100), "a shorter max TTL does not lower the longest")
	assert.Equal(t, int64(400), run(0), "reading does not register")
	time.Sleep(250 * time.Millisecond)
	assert.Equal(t, int64(400), run(400), "registering again extends the entry")
	time.Sleep(250 * time.Millisecond)
	assert.Equal(t, int64(400), run(0), "still within 400ms of its last registration")
	time.Sleep(500 * time.Millisecond)
	assert.Zero(t, run(0), "every entry lapsed")
	n, err := rdb.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no key left behind")
	_, err = rdb.Get(ctx, key).Result()
	assert.ErrorIs(t, err, redis.Nil)
}

// TestRepairFencesUsesTheLongestRegisteredMaxTTL: repair-fences run with a
// max TTL of 1s keeps the masters that lost their data out for the hour a
// Client of the masters registered: a client allowing hour-long locks may
// hold one the wiped masters lost.
func TestRepairFencesUsesTheLongestRegisteredMaxTTL(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	lostMajority(t, marker)
	newClient(t, WithMarkerKey(marker), WithMaxTTL(time.Hour), WithHealthInterval(time.Hour)) // registers at its first probe
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: time.Second})
	require.NoError(t, err)
	assert.Equal(t, time.Hour, res.RegisteredMaxTTL)
	later := newClient(t, WithMarkerKey(marker), WithMaxTTL(time.Second))
	for i := range 3 {
		assert.Greater(t, later.Masters()[i].QuarantineLeft, 59*time.Minute, "master %d", i)
	}
}

// TestMaxTTLRegistryDistrustsPlantedEntries: entries no Client writes (a
// member that is not a number or not positive, one far beyond the
// ceiling, a score of +inf) are skipped or counted as MaxTTLCeiling. Before
// the cap, a planted 999999999999999999 ms overflowed time.Duration
// (repair-fences printed "556601h…") and a +inf score made PEXPIRE fail,
// which stopped every registration on that master.
func TestMaxTTLRegistryDistrustsPlantedEntries(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	key := marker + ":max_ttl"
	rdb := direct(t)[0]
	future := float64(time.Now().Add(time.Hour).UnixMilli())
	require.NoError(t, rdb.ZAdd(ctx, key,
		redis.Z{Score: future, Member: "999999999999999999"},
		redis.Z{Score: future, Member: "-5"},
		redis.Z{Score: future, Member: "abc"},
		redis.Z{Score: future, Member: "nan"},
		redis.Z{Score: math.Inf(1), Member: "2000"},
	).Err())

	v, err := maxTTLScript.Run(ctx, rdb, []string{key}, 1000, maxTTLCeilingMS).Int64Slice()
	require.NoError(t, err, "registration still works")
	assert.Equal(t, []int64{maxTTLCeilingMS, 5}, v, "the huge member counts as the ceiling; four entries are odd (huge, -5, abc, nan) plus the +inf score")
	pttl, err := rdb.PTTL(ctx, key).Result()
	require.NoError(t, err)
	assert.Positive(t, pttl, "PEXPIRE took a finite expiry")
	assert.LessOrEqual(t, pttl, MaxTTLCeiling+time.Second)
	score, err := rdb.ZScore(ctx, key, "1000").Result()
	require.NoError(t, err, "this Client's entry was added")
	assert.InDelta(t, float64(time.Now().Add(time.Second).UnixMilli()), score, 5000)

	c := newClient(t, WithMarkerKey(marker), WithHealthInterval(time.Hour))
	assert.Equal(t, MaxTTLCeiling, c.lossTTL(), "no overflow: the Client believes the ceiling")
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: time.Second, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, MaxTTLCeiling, res.RegisteredMaxTTL)
}

// TestMaxTTLCeiling: New and RepairFences refuse a max TTL above the
// ceiling, naming the limit.
func TestMaxTTLCeiling(t *testing.T) {
	_, err := New(masterOptions(), WithMaxTTL(MaxTTLCeiling+time.Millisecond))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "above the ceiling 8760h0m0s")
	_, err = RepairFences(context.Background(), masterOptions(), RepairOptions{MaxTTL: MaxTTLCeiling + time.Millisecond})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "repair max TTL must be in [0, 8760h0m0s]")
}

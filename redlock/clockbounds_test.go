package redlock

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// TestDriftFactorRange: New refuses a drift factor outside [0, 0.1],
// naming the limit, and accepts both ends.
func TestDriftFactorRange(t *testing.T) {
	for _, f := range []float64{-0.01, 0.1001, 0.4, math.NaN(), math.Inf(1)} {
		_, err := New(masterOptions(), WithDriftFactor(f))
		require.ErrorIs(t, err, ErrInvalid, "%v", f)
		assert.ErrorContains(t, err, "drift factor must be in [0, 0.1]")
	}
	for _, f := range []float64{0, MaxDriftFactor} {
		c := newClient(t, WithDriftFactor(f), WithHealthInterval(time.Hour))
		assert.Equal(t, f, c.ClockBounds().DriftFactor)
	}
}

// runClockBounds runs scripts/clock_bounds.lua as a probe does, with
// member registered for keep ("" only reads).
func runClockBounds(t *testing.T, rdb *redis.Client, key, member string, keep time.Duration) []int64 {
	t.Helper()
	v, err := clockBoundsScript.Run(context.Background(), rdb, []string{key}, member, keep.Milliseconds(), maxTTLCeilingMS,
		int64(MaxDriftFactor*driftPPM), 100_000, 1_000_000, 2_000_000).Int64Slice()
	require.NoError(t, err)
	require.Len(t, v, 7)
	return v
}

// TestClockBoundsRegistry runs scripts/clock_bounds.lua on a real master:
// the strictest checks and loosest budgets of the live entries come back;
// an entry lapses its keep after its last registration, and the key goes
// with the last entry.
func TestClockBoundsRegistry(t *testing.T) {
	ctx := context.Background()
	rdb := direct(t)[0]
	key := "marker:" + newKey(t) + ":clock_bounds"
	assert.Equal(t, []int64{0, 0, 0, 0, 0, 0, 0}, runClockBounds(t, rdb, key, "", 0), "nothing registered")
	// defaults: 0.01, 50ms, 2s: blind 50 + 20 ms
	assert.Equal(t, []int64{1, 10000, 10000, 50000, 2000000, 70000, 0}, runClockBounds(t, rdb, key, "10000:50000:2000000", 400*time.Millisecond))
	// 0.1, 100ms, 1s: blind 100 + 100 ms; the strict one's u and f stay
	v := runClockBounds(t, rdb, key, "100000:100000:1000000", 1500*time.Millisecond)
	assert.Equal(t, []int64{2, 10000, 100000, 50000, 1000000, 200000, 0}, v)
	time.Sleep(250 * time.Millisecond)
	assert.Equal(t, int64(2), runClockBounds(t, rdb, key, "10000:50000:2000000", 400*time.Millisecond)[0], "registering again extends the entry")
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, []int64{1, 100000, 100000, 100000, 1000000, 200000, 0}, runClockBounds(t, rdb, key, "", 0), "the strict entry lapsed")
	time.Sleep(900 * time.Millisecond)
	assert.Equal(t, []int64{0, 0, 0, 0, 0, 0, 0}, runClockBounds(t, rdb, key, "", 0), "every entry lapsed")
	n, err := rdb.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no key left behind")
}

// TestClockBoundsRegistryDistrustsPlantedEntries: entries no Client writes
// (not of the form f:u:r, negative, a drift factor above 0.1, u of 0 or
// above 100ms, r outside [1s, 2s]) are skipped, and a score of +inf counts
// as the ceiling so that PEXPIRE still works. A Client over such a
// registry keeps its own bounds.
func TestClockBoundsRegistryDistrustsPlantedEntries(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	key := marker + ":clock_bounds"
	future := float64(time.Now().Add(time.Hour).UnixMilli())
	for _, rdb := range direct(t) {
		require.NoError(t, rdb.ZAdd(ctx, key,
			redis.Z{Score: future, Member: "abc"},
			redis.Z{Score: future, Member: "-1:50000:2000000"},
			redis.Z{Score: future, Member: "400000:50000:2000000"},
			redis.Z{Score: future, Member: "10000:0:2000000"},
			redis.Z{Score: future, Member: "10000:999999999999:2000000"},
			redis.Z{Score: future, Member: "10000:50000:1"},
			redis.Z{Score: future, Member: "10000:50000:99999999999999999999"},
			redis.Z{Score: future, Member: "0.5:50000:2000000"},
			redis.Z{Score: math.Inf(1), Member: "20000:50000:2000000"},
		).Err())
	}
	rdb := direct(t)[0]
	v := runClockBounds(t, rdb, key, "10000:50000:2000000", time.Second)
	assert.Equal(t, []int64{2, 10000, 20000, 50000, 2000000, 90000, 9}, v, "eight odd members and the +inf score; the +inf entry itself is sane and counts")
	pttl, err := rdb.PTTL(ctx, key).Result()
	require.NoError(t, err)
	assert.Positive(t, pttl, "PEXPIRE took a finite expiry")
	assert.LessOrEqual(t, pttl, MaxTTLCeiling+time.Second)

	c := newClient(t, WithMarkerKey(marker), WithPerMasterTimeout(50*time.Millisecond), WithHealthInterval(time.Hour))
	b := c.ClockBounds()
	assert.Equal(t, 0.01, b.DriftFactor, "no planted factor below its own")
	assert.Equal(t, 0.02, b.ValidityDriftFactor, "the sane planted 0.02 counts")
	assert.Equal(t, 91*time.Millisecond, b.ClockAllowance, "50ms + 0.02 × 2s + 1ms; not a planted huge uncertainty")
}

// TestClockBoundsShared: a Client at the default drift factor and one at
// 0.1 with a 100ms per-master timeout and a 100ms health interval, on the
// same masters: both judge clocks by 0.01, 50ms and 1s, and both budget
// validities for 0.1 and the larger blind spot (100ms + 0.1 × 1s + 1ms).
func TestClockBoundsShared(t *testing.T) {
	marker := "marker:" + newKey(t)
	a := newClient(t, WithMarkerKey(marker), WithPerMasterTimeout(50*time.Millisecond), WithHealthInterval(20*time.Millisecond))
	b := newClient(t, WithMarkerKey(marker), WithDriftFactor(0.1), WithPerMasterTimeout(100*time.Millisecond), WithHealthInterval(100*time.Millisecond))
	want := ClockBounds{DriftFactor: 0.01, ValidityDriftFactor: 0.1, ClockAllowance: 100*time.Millisecond + 100*time.Millisecond + time.Millisecond}
	assert.Equal(t, want, b.ClockBounds(), "b read a's entry before New returned")
	require.Eventually(t, func() bool { return a.ClockBounds() == want }, 5*time.Second, 10*time.Millisecond, "a reads b's at its next probe: %+v", a.ClockBounds())
	for _, c := range []*Client{a, b} {
		assert.Equal(t, 50*time.Millisecond, c.maxUncertainty())
		assert.Equal(t, time.Second, c.maxRefAge())
		assert.Equal(t, 100*time.Millisecond+2*time.Millisecond+want.ClockAllowance, c.drift(time.Second))
	}
	assert.True(t, a.reservedKey(marker+":clock_bounds"), "Acquire refuses the registry's key")
	off := newClient(t, WithMarkerKey(marker), WithPerMasterTimeout(50*time.Millisecond), withGuardOff(guardswitch.SharedClockBounds))
	assert.Equal(t, ClockBounds{DriftFactor: 0.01, ValidityDriftFactor: 0.01, ClockAllowance: 71 * time.Millisecond}, off.ClockBounds(), "with sharing off, its own")
}

// TestMixedDriftFactorsDoNotLoosenTheClockChecks: the case. A runs
// the defaults (drift factor 0.01: 83ms of drift for a 1s lock); B runs
// 0.1. Both probe hourly, so each reads the other's entry only if that was
// registered before its own first probe, and B's only reference for master
// 4's clock is about 1.5s old when it votes: at 0.1 it would let a jump of
// up to 0.1 × 1.5s + the readings' uncertainty pass unseen. A takes a 1s
// lock on masters 2, 3, 4; master 4's clock jumps 130ms forward, beyond
// A's own 83ms. B asks as soon as A's key is gone from master 4 (before
// any probe of B's, whose comparison of the masters would see the jump)
// and keeps asking: it must not win before A's validity ends.
//
// When B starts after A, B judges master 4 by A's 0.01 and sees the jump.
// When B starts first, B never learns A's factor, but A budgets for B's
// 0.1 and B's blind spot (353ms of a 1s lock), so A's validity ends before
// its key on master 4 does. The negative controls turn the sharing off in
// both: B wins while A is valid.
func TestMixedDriftFactorsDoNotLoosenTheClockChecks(t *testing.T) {
	const jump = 130 * time.Millisecond
	scenario := func(t *testing.T, bFirst bool, extra ...Option) (first *Lock, won time.Time, a, b *Client) {
		opts, rdbs, clock := skewedMasters(t)
		startB := func() { b = hourlyClient(t, opts, append([]Option{WithDriftFactor(0.1)}, extra...)...) }
		if bFirst {
			startB()
		}
		a = hourlyClient(t, opts, extra...)
		if !bFirst {
			startB()
		}
		bStarted := time.Now()
		// B's references are from its first probes; A's lock is placed so
		// that its key on master 4 expires (1s − the jump later) about
		// 1.5s after them, within B's maxRefAge of 2s.
		time.Sleep(time.Until(bStarted.Add(600 * time.Millisecond)))
		key := "clock:" + t.Name()
		first = placeOnly(t, a, rdbs, key, time.Second, 2, 3, 4)
		require.NoError(t, clock.Jump(jump))
		require.Eventually(t, func() bool { return rdbs[4].Exists(context.Background(), key).Val() == 0 }, 5*time.Second, time.Millisecond)
		t.Logf("B asks %v after its first probe; A's validity left %v", time.Since(bStarted), first.Validity())
		_, err := b.Acquire(context.Background(), key, time.Second, WithWait(10*time.Second), WithRetry(LinearBackoff(time.Millisecond)))
		require.NoError(t, err)
		return first, time.Now(), a, b
	}
	t.Run("B starts after A: B judges by A's factor", func(t *testing.T) {
		first, won, a, b := scenario(t, false)
		assert.False(t, won.Before(first.ValidUntil()), "B won %v before A's validity ended", first.ValidUntil().Sub(won))
		assert.Equal(t, 0.01, a.ClockBounds().ValidityDriftFactor, "A never read B's entry")
		assert.Contains(t, b.Masters()[4].QuarantineReason, "jumped forward", "B's vote check saw the jump")
	})
	t.Run("B starts first: A budgets for B's factor", func(t *testing.T) {
		first, won, a, b := scenario(t, true)
		assert.False(t, won.Before(first.ValidUntil()), "B won %v before A's validity ended", first.ValidUntil().Sub(won))
		assert.Equal(t, 0.1, b.ClockBounds().DriftFactor, "B never read A's entry")
		assert.Equal(t, ClockBounds{DriftFactor: 0.01, ValidityDriftFactor: 0.1, ClockAllowance: 251 * time.Millisecond}, a.ClockBounds())
	})
	for _, bFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("negative control: sharing off, B first %v", bFirst), func(t *testing.T) {
			first, won, _, _ := scenario(t, bFirst, withGuardOff(guardswitch.SharedClockBounds), withGuardOff(guardswitch.GrantedLock))
			assert.True(t, won.Before(first.ValidUntil()), "B wins while A is valid")
		})
	}
}

// hourlyClient starts a Client that probes hourly and returns once every
// master counts: a master whose first probe read its clock too imprecisely
// to compare with the others (a loaded machine) is judged by the clock
// readings of votes instead, here of acquires of a key of its own.
func hourlyClient(t *testing.T, opts []*redis.Options, copts ...Option) *Client {
	t.Helper()
	c, err := New(opts, append([]Option{WithHealthInterval(time.Hour)}, copts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	require.Eventually(t, func() bool {
		for _, st := range c.Masters() {
			if !st.Counting {
				if l, err := c.Acquire(ctx, "warm:"+t.Name(), time.Second, WithRetry(NoRetry())); err == nil {
					_ = l.Release(ctx)
				}
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	return c
}

// TestStricterRegisteredBoundsAreNamed: an entry stricter than any reading
// can meet (1µs of uncertainty) holds every master back; each master's
// reason then names the registry and the bounds it imposes, so an
// operator finds the entry rather than suspecting the clocks. Removing the
// entry lets a new Client count the masters.
func TestStricterRegisteredBoundsAreNamed(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	key := marker + ":clock_bounds"
	future := float64(time.Now().Add(time.Hour).UnixMilli())
	for _, rdb := range direct(t) {
		require.NoError(t, rdb.ZAdd(ctx, key, redis.Z{Score: future, Member: "0:1:1000000"}).Err())
	}
	c := newClient(t, WithMarkerKey(marker), WithHealthInterval(50*time.Millisecond))
	require.Eventually(t, func() bool {
		for _, st := range c.Masters() {
			if st.Counting || !strings.Contains(st.QuarantineReason, key) || !strings.Contains(st.QuarantineReason, "at most 1µs") {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "every master held back, its reason naming the registry: %+v", c.Masters())

	for _, rdb := range direct(t) {
		require.NoError(t, rdb.ZRem(ctx, key, "0:1:1000000").Err())
	}
	fresh := newClient(t, WithMarkerKey(marker))
	for i, st := range fresh.Masters() {
		assert.NotContains(t, st.QuarantineReason, key, "master %d: its own bounds again", i)
	}
}

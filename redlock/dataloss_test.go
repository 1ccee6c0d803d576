package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// brandNewClient returns a Client of a deployment of its own on the test
// masters (a fresh marker key, written by the Client itself, so every
// master carries a marker of its own as in production) and the options to
// start more Clients of the same deployment: more daemons.
func brandNewClient(t *testing.T, opts ...Option) (*Client, []Option) {
	t.Helper()
	marker := "marker:" + newKey(t)
	opts = append([]Option{WithMarkerKey(marker), WithFenceKey(marker + ":fence"), WithHealthInterval(50 * time.Millisecond), WithPerMasterTimeout(500 * time.Millisecond)}, opts...)
	c := sameDeployment(t, opts...)
	require.Eventually(t, func() bool {
		for _, st := range c.Masters() {
			if st.State != MasterUp {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "a brand-new deployment serves at once: %v", states(c))
	return c, opts
}

// sameDeployment starts another Client (another daemon) with opts.
func sameDeployment(t *testing.T, opts ...Option) *Client {
	t.Helper()
	c, err := New(masterOptions(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// placeOn acquires key for ttl and deletes its key on every test master
// but those in on (placeOnly).
func placeOn(t *testing.T, c *Client, key string, ttl time.Duration, on ...int) *Lock {
	t.Helper()
	return placeOnly(t, c, direct(t), key, ttl, on...)
}

// TestFlushAllWithoutRestart is the reproduction: a lock with ttl 30s,
// FLUSHALL on two masters, two seconds later on a third. No second holder
// while the first lock is valid (through this Client or another daemon's
// started between the faults), and the deployment fails closed once three
// masters lost their data. The negative control turns the data-loss check
// off: the flushed masters grant the lock again.
func TestFlushAllWithoutRestart(t *testing.T) {
	scenario := func(t *testing.T, opts ...Option) (*Lock, *Client, *Client) {
		ctx := context.Background()
		c, all := brandNewClient(t, opts...)
		key := newKey(t)
		first, err := c.Acquire(ctx, key, 30*time.Second)
		require.NoError(t, err)
		settle(t, c, key) // no SET of first's still on its way to be applied after a flush
		rdbs := direct(t)
		require.NoError(t, rdbs[0].FlushAll(ctx).Err())
		require.NoError(t, rdbs[1].FlushAll(ctx).Err())
		other := sameDeployment(t, all...) // a daemon started between the faults
		time.Sleep(2 * time.Second)
		require.NoError(t, rdbs[2].FlushAll(ctx).Err())
		require.Greater(t, first.Validity(), 20*time.Second, "the first lock is still valid")
		return first, c, other
	}
	t.Run("protected", func(t *testing.T) {
		ctx := context.Background()
		first, c, other := scenario(t)
		for _, cl := range []*Client{c, other} {
			_, err := cl.Acquire(ctx, first.Key(), 30*time.Second, WithRetry(NoRetry()))
			require.ErrorIs(t, err, ErrNotObtained)
			_, err = cl.Acquire(ctx, newKey(t), time.Second, WithRetry(NoRetry()))
			require.ErrorIs(t, err, ErrQuorumUnavailable, "three of five lost their data: fail closed")
		}
	})
	t.Run("negative control: data-loss check off", func(t *testing.T) {
		first, c, _ := scenario(t, withGuardOff(guardswitch.DataLossCheck), withGuardOff(guardswitch.GrantedLock))
		_, err := c.Acquire(context.Background(), first.Key(), 30*time.Second, WithRetry(NoRetry()))
		require.NoError(t, err, "the flushed masters grant the lock while the first is valid")
	})
}

// TestFlushAllThreeAtOnceKeepsFencesUp: three masters flushed at once (a
// majority) cannot hand out a lock, let alone fence 1 again; the negative
// control shows the fence going back to 1.
func TestFlushAllThreeAtOnceKeepsFencesUp(t *testing.T) {
	scenario := func(t *testing.T, opts ...Option) (*Lock, *Lock, error) {
		ctx := context.Background()
		c, _ := brandNewClient(t, append(opts, WithHealthInterval(time.Hour))...)
		key := newKey(t)
		var first *Lock
		for range 5 {
			l, err := c.Acquire(ctx, key, time.Second)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
			first = l
		}
		first, err := c.Acquire(ctx, key, 30*time.Second)
		require.NoError(t, err)
		settle(t, c, key) // no SET of first's still on its way to be applied after the flush
		rdbs := direct(t)
		for i := range 3 {
			require.NoError(t, rdbs[i].FlushAll(ctx).Err())
		}
		c.fenceIssued.Store(0) // as another daemon: see fenceScenario
		second, err := c.Acquire(ctx, key, 30*time.Second, WithRetry(NoRetry()))
		return first, second, err
	}
	t.Run("protected", func(t *testing.T) {
		_, _, err := scenario(t)
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, err, ErrMasterDataLost)
	})
	t.Run("negative control: data-loss check off", func(t *testing.T) {
		// The refusals of masters 3 and 4 carry their counters: the
		// fence from every answer (fence.go) is off too, or it keeps the
		// fence above the first's while the second holder is let in.
		first, second, err := scenario(t, withGuardOff(guardswitch.DataLossCheck), withGuardOff(guardswitch.GrantedLock), withGuardOff(guardswitch.FenceAboveEveryAnswer))
		require.NoError(t, err, "a second holder while the first is valid")
		assert.Equal(t, int64(1), second.Fence(), "and the fence back at 1 (the first had %d)", first.Fence())
	})
}

// lossFault is one way a master can lose lock state without a restart.
type lossFault struct {
	name string
	// removesLock: the fault removes the lock's key too, so without the
	// check a second holder gets in (the negative control applies).
	removesLock bool
	apply       func(t *testing.T, r *redis.Client, marker, key string)
}

func lossFaults() []lossFault {
	ctx := context.Background()
	return []lossFault{
		{"FLUSHDB", true, func(t *testing.T, r *redis.Client, _, _ string) { require.NoError(t, r.FlushDB(ctx).Err()) }},
		{"SWAPDB", true, func(t *testing.T, r *redis.Client, _, _ string) {
			require.NoError(t, r.Do(ctx, "SWAPDB", "0", "9").Err())
			t.Cleanup(func() { r.Do(ctx, "SWAPDB", "0", "9") })
		}},
		{"DEL of every redlock key (a cleanup script)", true, func(t *testing.T, r *redis.Client, marker, key string) {
			keys, err := r.Keys(ctx, marker+"*").Result()
			require.NoError(t, err)
			require.NoError(t, r.Unlink(ctx, append(keys, key)...).Err())
		}},
		{"DEL of the marker only", false, func(t *testing.T, r *redis.Client, marker, _ string) { require.NoError(t, r.Del(ctx, marker).Err()) }},
		{"DEL of the fencing counter only", false, func(t *testing.T, r *redis.Client, marker, _ string) {
			require.NoError(t, r.Del(ctx, marker+":fence").Err())
		}},
		{"DEL of the lease horizon only", false, func(t *testing.T, r *redis.Client, marker, _ string) {
			require.NoError(t, r.Del(ctx, marker+":horizon").Err())
		}},
		{"eviction (allkeys-lru, small maxmemory)", true, forceEviction},
		{"REPLICAOF another master, then REPLICAOF NO ONE", true, func(t *testing.T, r *redis.Client, _, _ string) {
			host, port, _ := strings.Cut(servers[0].Addr(), ":")
			require.NoError(t, r.ReplicaOf(ctx, host, port).Err())
			t.Cleanup(func() { r.ReplicaOf(ctx, "NO", "ONE") })
			require.Eventually(t, func() bool {
				return strings.Contains(r.Info(ctx, "replication").Val(), "master_link_status:up")
			}, 10*time.Second, 10*time.Millisecond, "the sync completes")
			require.NoError(t, r.ReplicaOf(ctx, "NO", "ONE").Err())
		}},
	}
}

// forceEviction lowers maxmemory just above what the master uses, sets
// allkeys-lru and writes until the lock's key has been evicted.
func forceEviction(t *testing.T, r *redis.Client, _, key string) {
	ctx := context.Background()
	used, err := strconv.ParseInt(parseInfoFields(r.Info(ctx, "memory").Val(), "used_memory")["used_memory"], 10, 64)
	require.NoError(t, err)
	require.NoError(t, r.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+2<<20, 10)).Err())
	t.Cleanup(func() {
		r.ConfigSet(ctx, "maxmemory", "0")
		r.ConfigSet(ctx, "maxmemory-policy", "noeviction")
		keys, _ := r.Keys(ctx, "filler:*").Result()
		if len(keys) > 0 {
			r.Unlink(ctx, keys...)
		}
	})
	filler := strings.Repeat("x", 16<<10)
	for i := 0; r.Exists(ctx, key).Val() == 1; i++ {
		require.Less(t, i, 20000, "the lock key was never evicted")
		require.NoError(t, r.Set(ctx, fmt.Sprintf("filler:%d", i), filler, 0).Err())
	}
	// One eviction episode: evicted_keys has grown; no more evictions after.
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", "0").Err())
}

// TestEveryWayOfLosingData: for each way a master can lose lock state
// while it keeps running, a lock placed on exactly masters 2, 3, 4 (master
// 4 then loses its state) keeps a second holder out when it is asked
// within milliseconds, before any health probe (probes are an hour apart
// here: the vote scripts see the loss). The master is reported as having
// lost its data. Where the fault removes the lock's key, the negative
// control (check off) shows the double grant.
func TestEveryWayOfLosingData(t *testing.T) {
	for _, f := range lossFaults() {
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			c, opts := brandNewClient(t)
			slow := sameDeployment(t, append(opts, WithHealthInterval(time.Hour))...)
			key := newKey(t)
			placeOn(t, c, key, 30*time.Second, 2, 3, 4)
			f.apply(t, direct(t)[4], markerKeyOf(opts), key)
			warmUp(slow)
			_, err := slow.Acquire(ctx, key, 30*time.Second, WithRetry(NoRetry()))
			require.ErrorIs(t, err, ErrNotObtained)
			assert.Contains(t, []MasterState{MasterRepairing, MasterQuarantined}, slow.Masters()[4].State, "%v", slow.Masters()[4])
			require.Eventually(t, func() bool { return c.Masters()[4].State != MasterUp }, 5*time.Second, 10*time.Millisecond,
				"the probing Client sees it too")
			// Each Client counts the loss once, unless it adopted the other's
			// repair first (the repair marker), which is no loss of its own.
			var n int64
			for _, cl := range []*Client{c, slow} {
				var k int64
				for _, v := range cl.DataLosses() {
					k += v
				}
				if !strings.HasPrefix(f.name, "eviction") { // repairs under memory pressure evict again
					assert.LessOrEqual(t, k, int64(1), "one loss counted: %v", cl.DataLosses())
				}
				n += k
			}
			assert.Positive(t, n, "the loss is counted")
		})
		if !f.removesLock {
			continue
		}
		t.Run(f.name+": negative control", func(t *testing.T) {
			ctx := context.Background()
			c, opts := brandNewClient(t, withGuardOff(guardswitch.DataLossCheck), withGuardOff(guardswitch.GrantedLock))
			slow := sameDeployment(t, append(opts, WithHealthInterval(time.Hour))...)
			key := newKey(t)
			first := placeOn(t, c, key, 30*time.Second, 2, 3, 4)
			f.apply(t, direct(t)[4], markerKeyOf(opts), key)
			warmUp(slow)
			// slow probes once an hour: on a loaded machine its vote clock
			// readings may be too imprecise to count (ErrMasterClockUnknown,
			// failing closed). Such attempts say nothing about the data-loss
			// check; the next attempt reads the clocks again.
			var err error
			for range 5 {
				_, err = slow.Acquire(ctx, key, 30*time.Second, WithRetry(NoRetry()))
				if err == nil || !errors.Is(err, ErrMasterClockUnknown) {
					break
				}
			}
			require.NoError(t, err, "without the check a second holder gets in")
			assert.Greater(t, first.Validity(), 20*time.Second)
		})
	}
}

// warmUp takes and releases an unrelated lock: its votes are fresh clock
// readings for a Client whose probes are an hour apart, after a fault that
// took longer than the readings may be old (a replica's sync).
func warmUp(c *Client) {
	ctx := context.Background()
	if l, err := c.Acquire(ctx, fmt.Sprintf("warmup:%d", keySeq.Add(1)), time.Second); err == nil {
		_ = l.Release(ctx)
	}
}

func markerKeyOf(opts []Option) string {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	return o.markerKey
}

// TestReplicaIsNotAMaster: a master turned into a replica stops counting
// (probe: role slave), and counts again only once it is a master again
// and repaired.
func TestReplicaIsNotAMaster(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t)
	r := direct(t)[4]
	host, port, _ := strings.Cut(servers[0].Addr(), ":")
	require.NoError(t, r.ReplicaOf(ctx, host, port).Err())
	t.Cleanup(func() { r.ReplicaOf(ctx, "NO", "ONE") })
	require.Eventually(t, func() bool { return c.Masters()[4].State == MasterRepairing }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, c.Masters()[4].QuarantineReason, "slave")
	assert.EqualValues(t, 1, c.DataLosses()[LossReplica])
	require.NoError(t, r.ReplicaOf(ctx, "NO", "ONE").Err())
	require.Eventually(t, func() bool { return c.Masters()[4].State == MasterQuarantined }, 5*time.Second, 10*time.Millisecond,
		"a master again: repaired, then quarantined until its lease horizon")
}

// TestPromotedReplicaCountedOnce: master 4 is made a replica of master 0
// and promoted again (REPLICAOF, then REPLICAOF NO ONE). Client a sees the
// loss (its marker is master 0's); before a repairs it, Client b (another
// daemon) does; a's next probe adopts b's repair marker, which ends a's
// pending repair. That same probe must not judge master 4's replication
// ID, which changed with the fault, against the one known from before the
// repair: one fault, one loss counted by each daemon (the metric
// redlock_master_data_loss_total that operators alert on). a's health loop
// is held off (probeMu) so that the order is this one every time.
func TestPromotedReplicaCountedOnce(t *testing.T) {
	a, opts := brandNewClient(t, WithHealthInterval(time.Hour))
	b := sameDeployment(t, opts...)
	require.Eventually(t, func() bool { return b.Masters()[4].State == MasterUp }, 10*time.Second, 10*time.Millisecond, "%v", states(b))
	var promote lossFault
	for _, f := range lossFaults() {
		if strings.HasPrefix(f.name, "REPLICAOF") {
			promote = f
		}
	}
	promote.apply(t, direct(t)[4], markerKeyOf(opts), "")

	a.probeMu.Lock() // a's health loop waits; a probes master 4 by hand
	held := true
	defer func() {
		if held {
			a.probeMu.Unlock()
		}
	}()
	m := a.masters[4]
	m.probeOnce()
	require.EqualValues(t, 1, a.DataLosses()[LossMarkerReplaced], "a sees the loss: %v", a.DataLosses())
	require.True(t, m.st.conds.has(condRepairPending))

	b.kickHealth()
	require.Eventually(t, func() bool { return b.FenceRepairs() == 1 }, 10*time.Second, 10*time.Millisecond, "b repairs master 4")
	m.probeOnce()
	losses := func() (n int64) {
		for _, v := range a.DataLosses() {
			n += v
		}
		return n
	}
	require.EqualValues(t, 1, losses(), "one fault, one loss: %v", a.DataLosses())
	require.False(t, m.st.conds.has(condRepairPending), "a adopted b's repair")
	assert.EqualValues(t, 1, a.FenceRepairs())
	a.probeMu.Unlock()
	held = false

	a.probeAll() // a later round takes the promoted master's ID as the baseline
	assert.EqualValues(t, 1, losses(), "one fault, one loss: %v", a.DataLosses())
}

// TestQuarantineLastsUntilTheLeaseHorizon: a master that lost its data is
// kept out until the locks it may have held have ended — read from a quorum
// of the others' lease horizons — not for max TTL (an hour here). A lock
// granted just before the loss still keeps a second holder out, and the
// master counts again soon after that lock's TTL.
func TestQuarantineLastsUntilTheLeaseHorizon(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t, WithMaxTTL(time.Hour))
	key := newKey(t)
	first := placeOn(t, c, key, 3*time.Second, 2, 3, 4)
	require.NoError(t, direct(t)[4].FlushAll(ctx).Err())
	_, err := c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrNotObtained, "the lock granted just before the loss keeps a second holder out")
	require.Eventually(t, func() bool { return c.Masters()[4].State == MasterQuarantined }, 5*time.Second, 10*time.Millisecond)
	st := c.Masters()[4]
	assert.Less(t, st.QuarantineLeft, 5*time.Second, "bounded by the lease horizon, not by max TTL: %v", st.QuarantineReason)
	assert.Contains(t, st.QuarantineReason, "lease horizon")
	for first.Validity() > 0 {
		_, err := c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
		require.Error(t, err, "no second holder while the first is valid")
		time.Sleep(50 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return c.Masters()[4].State == MasterUp }, 10*time.Second, 10*time.Millisecond)
	next, err := c.Acquire(ctx, key, time.Second, WithWait(5*time.Second))
	require.NoError(t, err)
	assert.Greater(t, next.Fence(), first.Fence())
	assert.Positive(t, c.FenceRepairs())
}

// TestHorizonWithoutQuorumFallsBackToMaxTTL: with two masters down, the
// others cannot give a quorum of lease horizons, so a master that lost its
// data stays out for max TTL.
func TestHorizonWithoutQuorumFallsBackToMaxTTL(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t, WithMaxTTL(time.Hour))
	placeOn(t, c, newKey(t), 3*time.Second, 0, 1, 2, 3, 4)
	withMasters(t, "pause", 2, 3)
	require.Eventually(t, func() bool { return !c.Masters()[2].Up && !c.Masters()[3].Up }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, direct(t)[4].FlushAll(ctx).Err())
	require.Eventually(t, func() bool { return c.Masters()[4].State != MasterUp }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	st := c.Masters()[4]
	assert.Greater(t, st.QuarantineLeft, 50*time.Minute, "two others cannot bound the outstanding locks: max TTL")
}

// TestRollbackToOlderData: master 4's data goes back to an older copy
// without a restart (what REPLICAOF to a server holding its old snapshot,
// then REPLICAOF NO ONE, or DEBUG RELOAD of an old dump do): its marker is
// its own, but its lease horizon is older and the lock is gone. The
// horizon only ever grows, so the vote that reads the older one is not
// counted. The negative control turns the data-loss check off.
func TestRollbackToOlderData(t *testing.T) {
	scenario := func(t *testing.T, opts ...Option) (*Client, error) {
		ctx := context.Background()
		c, _ := brandNewClient(t, append(opts, WithHealthInterval(time.Hour))...)
		r := direct(t)[4]
		horizonKey := markerKeyOf([]Option{WithMarkerKey(c.opts.markerKey)}) + ":horizon"
		old, err := r.Get(ctx, horizonKey).Result() // the "snapshot"
		require.NoError(t, err)
		key := newKey(t)
		first := placeOn(t, c, key, 30*time.Second, 2, 3, 4)
		require.NoError(t, r.Set(ctx, horizonKey, old, 0).Err())
		require.NoError(t, r.Del(ctx, key).Err())
		_, err = c.Acquire(ctx, key, 30*time.Second, WithRetry(NoRetry()))
		require.Greater(t, first.Validity(), 20*time.Second)
		return c, err
	}
	t.Run("protected", func(t *testing.T) {
		c, err := scenario(t)
		require.ErrorIs(t, err, ErrNotObtained)
		assert.EqualValues(t, 1, c.DataLosses()[LossRolledBack], "%v", err)
	})
	t.Run("negative control: data-loss check off", func(t *testing.T) {
		_, err := scenario(t, withGuardOff(guardswitch.DataLossCheck), withGuardOff(guardswitch.GrantedLock))
		require.NoError(t, err, "a second holder")
	})
}

// TestResetStatHidesNoEviction: evictions followed by CONFIG RESETSTAT
// (evicted_keys back to 0) are caught: the count went down. Both forms
// of the batch reading (batchstats.go) are run.
func TestResetStatHidesNoEviction(t *testing.T) {
	forEachReadingForm(t, testResetStatHidesNoEviction)
}

func testResetStatHidesNoEviction(t *testing.T, bare bool) {
	ctx := context.Background()
	c, opts := brandNewClient(t)
	slow := sameDeployment(t, append(opts, WithHealthInterval(time.Hour))...)
	useReadingForm(t, slow, bare)
	key := newKey(t)
	placeOn(t, c, key, 30*time.Second, 2, 3, 4)
	warmUp(slow) // its baseline of evicted_keys, read by a vote
	r := direct(t)[4]
	forceEviction(t, r, "", key)
	require.NoError(t, r.ConfigResetStat(ctx).Err())
	_, err := slow.Acquire(ctx, key, 30*time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Contains(t, []MasterState{MasterRepairing, MasterQuarantined}, slow.Masters()[4].State)
}

// TestAdoptedRepairReplacesTheProvisionalQuarantine: a daemon that saw a
// master lose its data keeps it out for max TTL (an hour here) until it
// knows the lease horizon; when another daemon's repair marker arrives
// first, its <until> (seconds here) replaces that provisional quarantine,
// as this daemon's own repair would. Before, it kept the hour: which
// replica won the race to repair decided whether the master was out for
// seconds or for max_ttl. The loss is set up by hand (lostData without its
// health round), because this Client's own repair would otherwise win the
// race within milliseconds.
func TestAdoptedRepairReplacesTheProvisionalQuarantine(t *testing.T) {
	c := newClient(t, WithHealthInterval(time.Hour), WithMaxTTL(time.Hour))
	warmUp(c)
	m := c.masters[4]
	require.NotNil(t, m.st.ref.Load(), "a clock reading")
	m.st.conds.set(condRepairPending)
	m.st.lostAt.Store(c.sinceEpoch())
	m.quarantine("lost its data (test)", time.Hour)
	require.Greater(t, m.quarantineLeft(), 59*time.Minute)

	// Another daemon's repair, written just after the loss, keeps the
	// master out for 5s more.
	now := time.Now()
	value := fmt.Sprintf("repaired %d 0123456789abcdef %d %s", now.Add(10*time.Millisecond).UnixMilli(), now.Add(5*time.Second).UnixMilli(), m.runID())
	mk, ok := parseMarker(value)
	require.True(t, ok)
	m.adoptRepair(value, mk, now)
	assert.False(t, m.st.conds.has(condRepairPending), "the repair is done")
	assert.Less(t, m.quarantineLeft(), 6*time.Second, "the repair's <until>, not the provisional max TTL")
	assert.Greater(t, m.quarantineLeft(), 4*time.Second, "but not shorter")

	// A marker written before the loss is no repair of it: the
	// provisional quarantine stays.
	m.st.conds.set(condRepairPending)
	m.st.lostAt.Store(c.sinceEpoch())
	m.quarantine("lost its data again (test)", time.Hour)
	old := fmt.Sprintf("repaired %d 0123456789abcdef %d %s", now.Add(-time.Minute).UnixMilli(), now.Add(5*time.Second).UnixMilli(), m.runID())
	mk, ok = parseMarker(old)
	require.True(t, ok)
	m.adoptRepair(old, mk, time.Now())
	assert.True(t, m.st.conds.has(condRepairPending))
	assert.Greater(t, m.quarantineLeft(), 59*time.Minute)
}

// TestRollbackUnderADominatingHorizon: master 4 goes back to a copy of its
// data taken after a 30s lock raised its lease horizon, losing a 5s lock
// granted since (on masters 2, 3, 4). The 5s lock did not raise the
// horizon, so the older copy shows the same horizon and the horizon check
// cannot see the rollback; the fencing counter, raised by the 5s lock's
// write-back, went back, and that is seen. Found by an adversarial review:
// a second holder was granted with 4.8s of the 5s lock left, and the same
// fence. Without fencing there is no counter: the negative control shows
// that rollback going unseen.
func TestRollbackUnderADominatingHorizon(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []Option
		another bool // the contender goes through another Client
		caught  bool
	}{
		{"same client", nil, false, true},
		{"another daemon that probed since the grant", nil, true, true},
		{"negative control: fencing off", []Option{WithFenceKey("")}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c, opts := brandNewClient(t, append([]Option{WithHealthInterval(time.Hour)}, tc.opts...)...)
			contender := c
			if tc.another {
				contender = sameDeployment(t, append(opts, WithHealthInterval(20*time.Millisecond))...)
			}
			r := direct(t)[4]
			horizonKey := c.opts.horizonKey
			placeOn(t, c, newKey(t), 30*time.Second, 2, 3, 4) // raises the horizon 30s ahead
			oldH, err := r.Get(ctx, horizonKey).Result()      // the older copy
			require.NoError(t, err)
			var oldF string
			if c.opts.fenceKey != "" {
				oldF = r.Get(ctx, c.opts.fenceKey).Val()
			}
			key := newKey(t)
			lost := placeOn(t, c, key, 5*time.Second, 2, 3, 4)
			require.Equal(t, oldH, r.Get(ctx, horizonKey).Val(), "the 5s lock did not raise the horizon")
			if tc.another {
				require.Eventually(t, func() bool {
					s := &contender.masters[4].st.inc.countersSeen
					s.mu.Lock()
					defer s.mu.Unlock()
					return s.counter >= lost.Fence()
				}, 5*time.Second, 5*time.Millisecond, "the other daemon's probe read master 4's counter since the grant")
			}
			// Back to the older copy: the horizon as it was, the 5s lock
			// gone, the counter back.
			require.NoError(t, r.Set(ctx, horizonKey, oldH, 0).Err())
			if oldF != "" {
				require.NoError(t, r.Set(ctx, c.opts.fenceKey, oldF, 0).Err())
			}
			require.NoError(t, r.Del(ctx, key).Err())

			second, err := contender.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
			if !tc.caught {
				require.NoError(t, err, "negative control: a second holder")
				assert.True(t, time.Now().Before(lost.ValidUntil()), "while the 5s lock stands")
				_ = second.Release(ctx)
				return
			}
			require.Error(t, err, "no second holder while the 5s lock stands")
			assert.Equal(t, int64(1), contender.DataLosses()[LossRolledBack], "master 4's rollback is seen")
			assert.Contains(t, contender.Masters()[4].QuarantineReason, "fencing counter fell")
		})
	}
}

// TestFirstSeenRetriedWhenTheHorizonCannotBeWritten: the masters carry the
// deployment's marker but no lease horizon (a deployment from before
// horizons), and the Client's first attempt to write them fails (here: the
// token generator errs for the first round's five). The master must not be taken as seen without
// an expected marker: before, its votes were then refused for good while
// Masters reported it counting. Now the rule runs again next round.
func TestFirstSeenRetriedWhenTheHorizonCannotBeWritten(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	for _, r := range direct(t) {
		require.NoError(t, r.Del(ctx, marker+":horizon").Err())
	}
	var calls atomic.Int64
	flaky := func() (string, error) {
		if calls.Add(1) <= 5 {
			return "", errors.New("no randomness this once")
		}
		return RandomToken()
	}
	c := newClient(t, WithMarkerKey(marker), withNonceSource(flaky), WithHealthInterval(20*time.Millisecond))
	require.Eventually(t, func() bool { return c.masters[0].st.inc.expectedMarker.Load() != nil }, 5*time.Second, 5*time.Millisecond,
		"the marker rule runs again and master 0 gets its expected marker")
	require.GreaterOrEqual(t, calls.Load(), int64(6), "the first round failed to write")
	st := c.Masters()[0]
	assert.Equal(t, st.Counting, c.masters[0].counts())
	require.Eventually(t, func() bool { return c.Masters()[0].Counting }, 5*time.Second, 5*time.Millisecond, "%+v", c.Masters()[0])
	// Its votes count: with masters 3 and 4 paused, an acquire needs it.
	withMasters(t, "pause", 3, 4)
	lock, err := c.Acquire(ctx, newKey(t), time.Second, WithRetry(NoRetry()))
	require.NoError(t, err, "master 0's vote counts")
	_ = lock.Release(ctx)
}

// TestHorizonMissingWhileAQuorumHaveTheirs: a Client starts while master 0
// kept its marker and fencing counter but lost its lease horizon and a
// lock key (an allkeys-* eviction while no Client watched), the lock being
// on masters 0, 1, 2. Every other master has its horizon, so this is not a
// deployment from before horizons: master 0 lost data, and is kept out
// until the lease horizon of the others. Before, it voted at once and the
// new Client granted the key again on masters 0, 3, 4.
func TestHorizonMissingWhileAQuorumHaveTheirs(t *testing.T) {
	ctx := context.Background()
	c, opts := brandNewClient(t, WithHealthInterval(time.Hour))
	key := newKey(t)
	lock := placeOn(t, c, key, 10*time.Second, 0, 1, 2)
	r := direct(t)[0]
	require.NoError(t, r.Del(ctx, c.opts.horizonKey, key).Err())

	later := sameDeployment(t, append(opts, WithHealthInterval(20*time.Millisecond))...)
	st := later.Masters()[0]
	assert.Contains(t, []MasterState{MasterQuarantined, MasterRepairing}, st.State, "%+v", st)
	assert.Contains(t, st.QuarantineReason, "lease horizon missing")
	_, err := later.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
	require.Error(t, err, "no second holder while the 10s lock stands")
	assert.True(t, time.Now().Before(lock.ValidUntil()))
	require.Eventually(t, func() bool { return !later.masters[0].st.conds.has(condRepairPending) }, 5*time.Second, 5*time.Millisecond,
		"repaired from the others: %v", states(later))
	assert.True(t, time.Now().Add(later.Masters()[0].QuarantineLeft).After(lock.ValidUntil()), "kept out until the lock has ended")
}

// TestReadingFromBeforeARepairCountsNoLoss: a vote sent before a repair
// of its master, that ran before the repair's write and is judged after the
// repair completed, shows the loss the repair ended. It counts no second
// loss and its vote does not count (TestEveryWayOfLosingData counted some
// losses twice this way: warmUp's vote and the acquire's, one each side of
// the slow Client's own repair). Negative control: the same reading sent
// after the repair is a new loss, counted once.
func TestReadingFromBeforeARepairCountsNoLoss(t *testing.T) {
	c, _ := brandNewClient(t)
	m := c.masters[4]
	sent := reply{idx: 4, gen: m.st.inc.repairGen.Load()}
	exp := *m.st.inc.expectedMarker.Load()
	m.expectMarker(&exp) // a repair completed after the vote was sent
	stale := sighting{by: "a vote", gen: sent.gen}
	assert.False(t, m.markerMatches("", time.Now(), &stale), "the stale reading does not count")
	m.lostDataSeen(sent.gen, LossStateMissing, "a stale vote")
	assert.False(t, m.st.conds.has(condRepairPending), "no loss pending")
	assert.Zero(t, c.DataLosses()[LossStateMissing])

	fresh := sighting{by: "a vote", gen: m.st.inc.repairGen.Load()}
	assert.False(t, m.markerMatches("", time.Now(), &fresh))
	assert.Equal(t, int64(1), c.DataLosses()[LossStateMissing], "negative control: a reading sent after the repair shows a new loss")
	assert.True(t, m.st.conds.has(condRepairPending))
	m.lostDataSeen(fresh.gen, LossStateMissing, "the same loss seen again")
	assert.Equal(t, int64(1), c.DataLosses()[LossStateMissing], "one loss counted once")
}

// TestFenceAcknowledgementRecordedAtDelivery: an acquire reads its early
// fence write-back's answers only after its last vote, so a vote of another
// acquire, run on the master after the write-back, can arrive first. The
// lane records each acknowledgement (counterAtLeast) as it delivers it,
// whoever reads the answer and when, so that vote is judged against it: a
// counter read below the acknowledged fence is a rollback. Found by a
// review of the change that took the write-back's goroutine away; without
// the lane's recording nothing is known until the answer is read.
func TestFenceAcknowledgementRecordedAtDelivery(t *testing.T) {
	c, _, l := heldOnEveryMaster(t)
	fence := l.Fence() + 1000
	fw := c.sendFence(l.set(), l.Token(), fence, nil)
	require.Eventually(t, func() bool { return int(fw.out.arrived.Load()) == fw.sent }, 5*time.Second, time.Millisecond,
		"every master answered; nobody read the answers yet")
	for _, m := range c.masters {
		s := &m.st.inc.countersSeen
		s.mu.Lock()
		counter := s.counter
		s.mu.Unlock()
		assert.Equal(t, fence, counter, "master %d: the acknowledgement is known before it is read", m.idx)
	}
	// A vote after the write-back that read a lower counter: a rollback.
	m := c.masters[2]
	h := time.Now().UnixMilli() + time.Hour.Milliseconds() // above every horizon read so far
	assert.False(t, m.countersGrow(counterRead{horizon: h, raised: h, counter: fence - 1}, time.Now().Add(time.Second), sighting{by: "a vote", gen: m.st.inc.repairGen.Load()}))
	assert.Equal(t, int64(1), c.DataLosses()[LossRolledBack])
	assert.Equal(t, 4, fw.read(context.Background(), 5, false, &OutcomeError{}), "the answers are still there to read; master 2's no longer counts")
}

// TestFenceAcknowledgementFromBeforeARepairIsNotRecorded: a write-back sent
// before a repair of its master, delivered after the repair completed, is
// not recorded: the repaired counter is the new baseline, and the next vote
// reading it is no rollback (found by a review: the healthy master was
// quarantined again). Negative control: the same answer sent after the
// repair is recorded.
func TestFenceAcknowledgementFromBeforeARepairIsNotRecorded(t *testing.T) {
	c, _, l := heldOnEveryMaster(t)
	m := c.masters[3]
	f := l.Fence() + 1000
	oldGen := m.st.inc.repairGen.Load()
	t1 := time.Now()
	exp := *m.st.inc.expectedMarker.Load()
	m.expectMarker(&exp) // a repair completes (repairOne) before the lane delivers
	m.resetCountersSeen()
	ack := fmt.Sprintf("1 %d %d", t1.Unix(), t1.Nanosecond()/1000)
	m.fenceAcknowledged(f, ack, oldGen)
	h := time.Now().UnixMilli() + time.Hour.Milliseconds()
	fresh := sighting{by: "a vote", gen: m.st.inc.repairGen.Load()}
	assert.True(t, m.countersGrow(counterRead{horizon: h, raised: h, counter: f - 10}, time.Now().Add(time.Second), fresh),
		"a vote after the repair reads the repaired counter: no rollback")
	assert.Zero(t, c.DataLosses()[LossRolledBack])

	t2 := time.Now().Add(2 * time.Second)
	m.fenceAcknowledged(f, fmt.Sprintf("1 %d %d", t2.Unix(), t2.Nanosecond()/1000), fresh.gen)
	assert.False(t, m.countersGrow(counterRead{horizon: h, raised: h, counter: f - 10}, t2.Add(time.Second), fresh),
		"negative control: acknowledged after the repair, then read lower: a rollback")
}

// withNonceSource replaces the source of the marker and repair-marker
// nonces (options.nonce), to make writing them fail.
func withNonceSource(f func() (string, error)) Option {
	return func(o *options) { o.nonce = f }
}

// TestShortTokensNeverReachTheMarker: a TokenGenerator's tokens may be
// short ("t1"); the marker of a brand-new deployment and the repair marker
// of a master that lost its data take their nonce from crypto/rand, not
// from it. Before, New panicked on the brand-new masters (slice bounds out
// of range [:16]) and, with a marker already planted, the health loop's
// repair of a master restarted empty killed the process the same way.
func TestShortTokensNeverReachTheMarker(t *testing.T) {
	ctx := context.Background()
	var n atomic.Int64
	short := func() (string, error) { return fmt.Sprintf("t%d", n.Add(1)), nil }
	c, _ := brandNewClient(t, WithTokenGenerator(short))
	lock, err := c.Acquire(ctx, newKey(t), time.Second, WithRetry(NoRetry()))
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	// Master 0 loses its bookkeeping keys: the health loop repairs it.
	require.NoError(t, direct(t)[0].Del(ctx, c.opts.markerKey, c.opts.horizonKey, c.opts.fenceKey).Err())
	require.Eventually(t, func() bool { return c.masters[0].st.inc.repairedAt.Load() > 0 }, 10*time.Second, 10*time.Millisecond,
		"master 0 is repaired: %+v", c.Masters()[0])
	lock, err = c.Acquire(ctx, newKey(t), time.Second, WithRetry(NoRetry()))
	require.NoError(t, err, "four masters vote")
	assert.Regexp(t, `^t\d+$`, lock.Token(), "lock tokens still come from the generator")
	require.NoError(t, lock.Release(ctx))
}

// TestTokenGeneratorFailureIsNotObtained: a TokenGenerator that fails or
// returns an empty token fails the Acquire with an error matching
// ErrNotObtained (Acquire's contract), naming the generator.
func TestTokenGeneratorFailureIsNotObtained(t *testing.T) {
	ctx := context.Background()
	for name, gen := range map[string]TokenGenerator{
		"error": func() (string, error) { return "", errors.New("boom") },
		"empty": func() (string, error) { return "", nil },
	} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, WithTokenGenerator(gen))
			_, err := c.Acquire(ctx, newKey(t), time.Second, WithRetry(NoRetry()))
			require.ErrorIs(t, err, ErrNotObtained)
			assert.Contains(t, err.Error(), "token generator")
			_, err = c.AcquireMulti(ctx, []string{newKey(t), newKey(t)}, time.Second, WithRetry(NoRetry()))
			require.ErrorIs(t, err, ErrNotObtained)
			for _, st := range c.Masters() {
				assert.Equal(t, MasterUp, st.State, "the markers do not depend on the generator: %+v", st)
			}
		})
	}
}

// TestFenceCatchUpReachesAQuarantinedMaster: a master quarantined after a
// loss takes no write-backs while it is out (up to max TTL); the health
// loop's catch-up (spreadFence) raises its counter with the counting
// masters', so an operator's RepairFences after a later loss of a majority
// finds the newest fence on it, within its margin, if it is one of the
// few that kept their data. Found by a black-box pass: the counter stayed
// at its repair's value for the whole quarantine.
func TestFenceCatchUpReachesAQuarantinedMaster(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t, WithMaxTTL(time.Hour))
	hold, err := c.Acquire(ctx, newKey(t), 30*time.Second) // its horizon keeps the flushed master out
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Release(context.Background()) })
	rdbs := direct(t)
	require.NoError(t, rdbs[4].FlushAll(ctx).Err())
	require.Eventually(t, func() bool { return c.Masters()[4].State == MasterQuarantined }, 5*time.Second, 10*time.Millisecond)
	repairedAt, err := rdbs[4].Get(ctx, c.opts.fenceKey).Int64()
	require.NoError(t, err, "repaired: its counter is back")
	var last int64
	for range 20 {
		l, err := c.Acquire(ctx, newKey(t), time.Second)
		require.NoError(t, err)
		last = l.Fence()
		require.NoError(t, l.Release(ctx))
	}
	require.Greater(t, last, repairedAt)
	require.Eventually(t, func() bool {
		v, err := rdbs[4].Get(ctx, c.opts.fenceKey).Int64()
		return err == nil && v == last
	}, 5*time.Second, 10*time.Millisecond, "the quarantined master's counter caught up with the newest fence %d (repaired at %d)", last, repairedAt)
	assert.Equal(t, MasterQuarantined, c.Masters()[4].State, "raised while it is out, not once it counts again")
	for i := range 4 {
		v, err := rdbs[i].Get(ctx, c.opts.fenceKey).Int64()
		require.NoError(t, err)
		assert.Equal(t, last, v, "master %d", i)
	}
}

// TestQuorumExpectedInWithAPausedMaster: two masters quarantined until a
// held lock ends, and a third paused: the paused one may be back in a
// second and make a quorum with the two counting, so no time is promised
// (the quarantines' end was, as the daemon's Retry-After was: 300 s for a
// 2 s pause, found by a black-box pass).
func TestQuorumExpectedInWithAPausedMaster(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t, WithMaxTTL(time.Hour), WithPerMasterTimeout(50*time.Millisecond))
	hold, err := c.Acquire(ctx, newKey(t), 30*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Release(context.Background()) })
	rdbs := direct(t)
	require.NoError(t, rdbs[3].FlushAll(ctx).Err())
	require.NoError(t, rdbs[4].FlushAll(ctx).Err())
	require.Eventually(t, func() bool {
		st := c.Masters()
		return st[3].State == MasterQuarantined && st[4].State == MasterQuarantined
	}, 5*time.Second, 10*time.Millisecond, "%v", states(c))
	back, known := c.QuorumExpectedIn()
	assert.True(t, known)
	assert.Zero(t, back, "three masters count now")

	withMasters(t, "pause", 2)
	require.Eventually(t, func() bool { return c.Masters()[2].State == MasterDown }, 10*time.Second, 10*time.Millisecond, "%v", states(c))
	back, known = c.QuorumExpectedIn()
	assert.False(t, known, "the paused master may make a quorum sooner than the quarantines end (%v)", back)
}

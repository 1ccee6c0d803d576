package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// states returns every master's State.
func states(c *Client) []MasterState {
	var out []MasterState
	for _, st := range c.Masters() {
		out = append(out, st.State)
	}
	return out
}

// TestNewDeploymentWaitsForEveryMaster: with no marker on any master that
// answers, the masters that did not answer may hold the markers (and the
// fencing counters) of a deployment whose others all lost their data, so
// no master votes until every master has answered.
func TestNewDeploymentWaitsForEveryMaster(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	withMasters(t, "kill", 4)
	c, err := New(masterOptions(), WithMarkerKey(marker), WithHealthInterval(20*time.Millisecond), WithPerMasterTimeout(500*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, []MasterState{MasterWaiting, MasterWaiting, MasterWaiting, MasterWaiting, MasterDown}, states(c))
	_, err = c.Acquire(ctx, newKey(t), time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrQuorumUnavailable)
	assert.False(t, c.QuorumAvailable())

	require.NoError(t, servers[4].Restart())
	require.Eventually(t, func() bool { return c.QuorumAvailable() && c.Masters()[4].State == MasterUp }, 10*time.Second, 10*time.Millisecond,
		"once every master answered without a marker, a brand-new deployment serves: %v", states(c))
	lock, err := c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
}

// lostMajority takes fences to at least 10 with a Client, stops it, and
// restarts masters 0, 1 and 2 empty while no Client watches: their markers
// and fencing counters are gone, and two masters keep theirs.
func lostMajority(t *testing.T, marker string) int64 {
	plantMarker(marker)
	// Max TTL 1s, as the Clients of the tests that use it: the max TTL
	// registered on the masters bounds the repair's quarantine.
	c := newClient(t, WithMarkerKey(marker), WithHealthInterval(20*time.Millisecond), WithMaxTTL(time.Second))
	fence := takeFences(t, c, newKey(t), 10)
	// The last fence was written back to a quorum, which may be masters
	// 0, 1 and 2 alone; the health loop copies it to the others. Wait for
	// that, or restarting 0, 1 and 2 would lose it for a reason this test
	// is not about.
	rdbs := direct(t)
	require.Eventually(t, func() bool {
		for _, r := range rdbs[3:] {
			if v, err := r.Get(context.Background(), "redlock:fence").Int64(); err != nil || v < fence {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the health loop copies the highest fence to every master")
	require.NoError(t, c.Close())
	restartEmpty(t, 0, 1, 2)
	return fence
}

// TestMajorityLossFailsClosedUntilRepaired: a Client started after three
// masters lost their data finds the marker on only two. Until this change
// it took that for a brand-new deployment and the three empty masters could
// grant a lock with fence 1; now they are "repairing" and the Client
// refuses. redlockd repair-fences (RepairFences) raises every counter past
// the highest left; the waiting Client then counts them once their
// quarantine ends, and the next fence is above the repair target.
func TestMajorityLossFailsClosedUntilRepaired(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	before := lostMajority(t, marker)

	c := newClient(t, WithMarkerKey(marker), WithHealthInterval(20*time.Millisecond), WithMaxTTL(time.Second))
	st := c.Masters()
	for i := range 3 {
		assert.Equal(t, MasterRepairing, st[i].State, "master %d", i)
		assert.Contains(t, st[i].QuarantineReason, "repair-fences")
	}
	assert.Equal(t, []MasterState{MasterUp, MasterUp}, states(c)[3:])
	key := newKey(t)
	_, err := c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrQuorumUnavailable, "fail closed: no quorum kept its fencing counter")
	time.Sleep(200 * time.Millisecond) // ten probe rounds: the Client cannot repair them on its own
	assert.Equal(t, MasterRepairing, c.Masters()[0].State)

	res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: time.Second})
	require.NoError(t, err)
	assert.Equal(t, 5, res.Answered)
	assert.GreaterOrEqual(t, res.Highest, before)
	assert.Equal(t, res.Highest+DefaultRepairMargin, res.Target)
	rdbs := direct(t)
	for i, mr := range res.Masters {
		require.NoError(t, mr.Err, "master %d", i)
		assert.GreaterOrEqual(t, mr.After, res.Target)
		v, err := rdbs[i].Get(ctx, "redlock:fence").Int64()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, v, res.Target, "master %d counter", i)
		assert.True(t, strings.HasPrefix(rdbs[i].Get(ctx, marker).Val(), "repaired "), "master %d marker", i)
	}

	require.Eventually(t, func() bool { return c.QuorumAvailable() && c.Masters()[0].Counting && c.Masters()[2].Counting }, 10*time.Second, 10*time.Millisecond,
		"the waiting Client accepts the repair: %v", states(c))
	lock, err := c.Acquire(ctx, key, time.Second)
	require.NoError(t, err)
	assert.Greater(t, lock.Fence(), res.Target, "fences continue above the repair target")
	require.NoError(t, lock.Release(ctx))

	// A Client started now finds every marker, and the repair's
	// quarantine (written on the masters, and its own max TTL after the
	// operator's repair: repairEnd) is over.
	later := newClient(t, WithMarkerKey(marker), WithMaxTTL(time.Second))
	assert.Equal(t, []MasterState{MasterUp, MasterUp, MasterUp, MasterUp, MasterUp}, states(later))
}

// TestRepairBeforeTheClientSawTheRestart: three masters restart empty and
// the operator's repair-fences reaches them before the running Client's
// next probe does, as in the Docker drill, where the drill runs it the
// moment the fresh containers answer PING. The Client then sees the
// restart (run_id changed) and the repair marker in one probe. The marker
// carries the new process's run_id, so it was written after the restart
// that lost the data: the repair is adopted and the masters count again
// once its quarantine is over. Before, the Client required the marker to be
// younger than the moment it saw the loss; it never was, and the masters
// stayed "repairing" (fail closed, for good) until a second repair-fences.
func TestRepairBeforeTheClientSawTheRestart(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	// One health round at start; the test runs the later ones itself.
	c := newClient(t, WithMarkerKey(marker), WithHealthInterval(time.Hour), WithMaxTTL(2*time.Second))
	warmUp(c)
	require.True(t, c.QuorumAvailable())
	restartEmpty(t, 0, 1, 2)
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: 2 * time.Second})
	require.NoError(t, err)
	for i, mr := range res.Masters {
		require.NoError(t, mr.Err, "master %d", i)
	}
	// The Client sees the restart later than the repair by more than its
	// clock allowance (in the drill: 123ms, a probe interval's chance), so
	// the repair is, by the clocks, older than the loss as the Client saw
	// it.
	time.Sleep(c.clockAllowance() + 100*time.Millisecond)

	c.probeAll()
	st := c.Masters()
	for i := range 3 {
		assert.NotEqual(t, MasterRepairing, st[i].State, "master %d: the repair is adopted (%s)", i, st[i].QuarantineReason)
		assert.False(t, st[i].Counting, "master %d: not before the repair's quarantine ends", i)
	}
	require.Eventually(t, func() bool {
		c.probeAll()
		for _, m := range c.Masters() {
			if !m.Counting {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "the repaired masters count once the repair's quarantine is over: %v", states(c))
	lock, err := c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	assert.Greater(t, lock.Fence(), res.Target, "fences continue above the repair target")
	require.NoError(t, lock.Release(ctx))
}

// TestRepairFollowsLoss: the two proofs that a repair marker was written
// after a pending loss. A marker of the process that started with the
// restart is one whatever its time; a marker of the process before it is
// judged by its time; and a later loss within one process (FLUSHALL after
// the restart was repaired) forgets the run_id proof of the earlier one.
func TestRepairFollowsLoss(t *testing.T) {
	c := newClient(t, WithHealthInterval(time.Hour), WithMaxTTL(time.Hour))
	warmUp(c)
	m := c.masters[4]
	require.NotNil(t, m.st.ref.Load(), "a clock reading")
	before := m.runID()
	const after = "0000000000000000000000000000000000000001"
	m.observeRunID(after, "a test")
	require.True(t, m.st.conds.has(condRepairPending), "a restart without durable persistence is a loss")
	now := time.Now()
	marker := func(at time.Time, runID string) (string, marker) {
		v := fmt.Sprintf("repaired %d 0123456789abcdef %d %s", at.UnixMilli(), now.Add(time.Second).UnixMilli(), runID)
		mk, ok := parseMarker(v)
		require.True(t, ok, v)
		return v, mk
	}
	_, mk := marker(now.Add(-time.Minute), before)
	assert.False(t, m.repairFollowsLoss(mk), "the old process's marker, older than the loss")
	_, mk = marker(now.Add(time.Minute), before)
	assert.True(t, m.repairFollowsLoss(mk), "the time rule: a marker younger than the loss")
	fresh, mk := marker(now.Add(-time.Minute), after)
	assert.True(t, m.repairFollowsLoss(mk), "the new process's marker, whatever its time")

	m.adoptRepair(fresh, mk, now)
	require.False(t, m.st.conds.has(condRepairPending), "adopted and completed")
	m.lostData(LossStateMissing, "a test")
	assert.False(t, m.repairFollowsLoss(mk), "a marker from before this loss, on the same process")
	m.lossAfterStartOf("0000000000000000000000000000000000000002")
	assert.False(t, m.repairFollowsLoss(mk), "a later process's run_id is not this marker's")
}

// TestRepairQuarantineSurvivesDaemonRestart: the quarantine a repair
// writes on a master (the repair marker's until) holds for a Client started
// later, which never saw the loss.
func TestRepairQuarantineSurvivesDaemonRestart(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	lostMajority(t, marker)
	_, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: time.Hour})
	require.NoError(t, err)
	later := newClient(t, WithMarkerKey(marker), WithMaxTTL(time.Hour))
	st := later.Masters()
	for i := range 3 {
		assert.Equal(t, MasterQuarantined, st[i].State, "master %d", i)
		assert.Greater(t, st[i].QuarantineLeft, 59*time.Minute, "master %d", i)
		assert.Contains(t, st[i].QuarantineReason, "repaired by `redlockd repair-fences` after losing its data")
	}
	assert.Equal(t, []MasterState{MasterUp, MasterUp}, states(later)[3:], "the masters that kept their data count at once")
}

// TestRepairFencesTwiceKeepsTheQuarantine: a second repair-fences run
// finds the first one's repair markers in place (so it takes those masters
// for ones that kept their data) and must not end their quarantine: a
// Client started after it still keeps the wiped masters out for max TTL.
// Before the repair script kept the later <until>, the second run wrote
// <until> = now and the later Client counted them at once.
func TestRepairFencesTwiceKeepsTheQuarantine(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	lostMajority(t, marker)
	_, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: time.Hour})
	require.NoError(t, err)
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: time.Hour})
	require.NoError(t, err)
	for i := range 3 {
		mk, ok := parseMarker(res.Masters[i].Marker)
		require.True(t, ok && mk.repaired, "master %d: the second run found the first one's marker: %q", i, res.Masters[i].Marker)
	}
	later := newClient(t, WithMarkerKey(marker), WithMaxTTL(time.Hour))
	st := later.Masters()
	for i := range 3 {
		assert.Equal(t, MasterQuarantined, st[i].State, "master %d", i)
		assert.Greater(t, st[i].QuarantineLeft, 59*time.Minute, "master %d", i)
	}
	assert.Equal(t, []MasterState{MasterUp, MasterUp}, states(later)[3:])
}

// TestParseMarker: every marker format, and what is not a marker.
func TestParseMarker(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	ms := now.UnixMilli()
	mk, ok := parseMarker(fmt.Sprintf("redlockd %d", ms))
	require.True(t, ok)
	assert.Equal(t, marker{at: now, evicted: -1}, mk)
	mk, ok = parseMarker(fmt.Sprintf("redlockd %d 0123456789abcdef", ms))
	require.True(t, ok)
	assert.Equal(t, marker{at: now, evicted: -1}, mk)
	mk, ok = parseMarker(fmt.Sprintf("repaired %d", ms))
	require.True(t, ok)
	assert.Equal(t, marker{repaired: true, at: now, evicted: -1}, mk)
	mk, ok = parseMarker(fmt.Sprintf("repaired %d 0123456789abcdef %d abc123", ms, ms+5000))
	require.True(t, ok)
	assert.Equal(t, marker{repaired: true, at: now, until: now.Add(5 * time.Second), runID: "abc123", evicted: -1}, mk)
	mk, ok = parseMarker(fmt.Sprintf("repaired %d 0123456789abcdef %d abc123 ev=42", ms, ms+5000))
	require.True(t, ok)
	assert.Equal(t, marker{repaired: true, at: now, until: now.Add(5 * time.Second), runID: "abc123", evicted: 42}, mk)
	mk, ok = parseMarker(fmt.Sprintf("repaired %d 0123456789abcdef %d abc123 ev=0 operator", ms, ms+5000))
	require.True(t, ok)
	assert.Equal(t, marker{repaired: true, at: now, until: now.Add(5 * time.Second), runID: "abc123", evicted: 0, byOperator: true}, mk)
	mk, ok = parseMarker(fmt.Sprintf("repaired %d 0123456789abcdef %d abc123 operator", ms, ms+5000))
	require.True(t, ok)
	assert.Equal(t, marker{repaired: true, at: now, until: now.Add(5 * time.Second), runID: "abc123", evicted: -1, byOperator: true}, mk)
	mk, ok = parseMarker(fmt.Sprintf("repaired %d 0123456789abcdef %d abc123 ev=3 kept", ms, ms))
	require.True(t, ok)
	assert.Equal(t, marker{repaired: true, at: now, until: now, runID: "abc123", evicted: 3, kept: true}, mk)
	assert.False(t, mk.lostBefore(), "a repair of an intact master ended no loss")
	// An unknown trailing field, or a bad ev=, or both operator and kept:
	// a marker, but no run_id, so never adopted as a repair.
	for _, tail := range []string{"what", "ev=-1", "ev=x", "operator extra", "operator kept", "kept operator"} {
		mk, ok = parseMarker(fmt.Sprintf("repaired %d 0123456789abcdef %d abc123 %s", ms, ms+5000, tail))
		require.True(t, ok, tail)
		assert.Empty(t, mk.runID, tail)
	}
	for _, v := range []string{"", "redlockd", "repaired ", "repaired x", "repaired -5", "other 5"} {
		_, ok = parseMarker(v)
		assert.False(t, ok, "%q", v)
	}
}

// TestRepairFencesRefuses: bad options, and too few masters answering,
// leave every master untouched.
func TestRepairFencesRefuses(t *testing.T) {
	ctx := context.Background()
	rdbs := direct(t)
	key := "fence:" + newKey(t)
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, key, 7, 0).Err())
	}
	for _, o := range []RepairOptions{
		{FenceKey: key, Margin: -1}, {FenceKey: key, Min: -1}, {FenceKey: key, Timeout: -time.Second},
		// Found by a trial: a margin of MaxInt64 wrapped the target to 1.
		{FenceKey: key, Margin: math.MaxInt64}, {FenceKey: key, Min: math.MaxInt64}, {FenceKey: key, Min: MaxFence},
		{FenceKey: key, Margin: MaxFence}, // 7 + MaxFence: above the largest exact fence
		// Found by an adversarial pass: a target of MaxFence was accepted,
		// and the fences after it repeated (TestFenceCeilingRefusesTheGrant).
		// A repair leaves RepairHeadroom fences.
		{FenceKey: key, Min: MaxFence - 1}, {FenceKey: key, Min: maxRepairTarget},
		{FenceKey: key, Margin: maxRepairTarget + 1},
		{FenceKey: key, Margin: maxRepairTarget}, // 7 + the largest margin
	} {
		_, err := RepairFences(ctx, masterOptions(), o)
		require.ErrorIs(t, err, ErrInvalid, "%+v", o)
	}
	for _, r := range rdbs {
		assert.Equal(t, "7", r.Get(ctx, key).Val(), "nothing written")
	}
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: key, MarkerKey: "marker:" + newKey(t), Min: maxRepairTarget - 1})
	require.NoError(t, err, "the largest target is allowed")
	assert.Equal(t, MaxFence-RepairHeadroom, res.Target)
	require.NoError(t, rdbs[0].Set(ctx, key, MaxFence-5, 0).Err())
	_, err = RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: key})
	require.ErrorIs(t, err, ErrInvalid, "a counter within the headroom of MaxFence: no target leaves the headroom")
	assert.Contains(t, err.Error(), "leaves 2^40 fences")
	require.NoError(t, rdbs[0].Set(ctx, key, MaxFence+1, 0).Err())
	_, err = RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: key})
	require.ErrorIs(t, err, ErrInvalid, "a counter beyond MaxFence is refused")
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, key, 7, 0).Err())
	}
	_, err = RepairFences(ctx, nil, RepairOptions{})
	require.ErrorIs(t, err, ErrInvalid)

	withMasters(t, "kill", 0)
	res, err = RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: key, Timeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, ErrQuorumUnavailable, "a master down may hold the highest counter")
	assert.Contains(t, err.Error(), "4 of 5 masters answered")
	assert.Equal(t, int64(7), res.Highest)
	withMasters(t, "kill", 1, 2)
	_, err = RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: key, Timeout: 300 * time.Millisecond, AllowMissing: true})
	require.ErrorIs(t, err, ErrQuorumUnavailable, "two of five could all be masters that lost their data")
	for i := 3; i < 5; i++ {
		assert.Equal(t, "7", rdbs[i].Get(ctx, key).Val(), "nothing written")
	}
}

// TestRepairFencesAllowMissingAndMin: with a quorum answering and
// AllowMissing, the counters are raised to Min+1 when that is above the
// highest plus the margin; the down master is left for the Clients.
func TestRepairFencesAllowMissingAndMin(t *testing.T) {
	ctx := context.Background()
	rdbs := direct(t)
	key := "fence:" + newKey(t)
	marker := "marker:" + newKey(t)
	for i, r := range rdbs {
		require.NoError(t, r.Set(ctx, key, 100+i, 0).Err())
	}
	dry, err := RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: key, MarkerKey: marker, Margin: 10, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, int64(104), dry.Highest)
	assert.Equal(t, int64(114), dry.Target)
	assert.Equal(t, "100", rdbs[0].Get(ctx, key).Val(), "dry run writes nothing")

	withMasters(t, "kill", 4)
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: key, MarkerKey: marker, Margin: 10, Min: 5000, AllowMissing: true, Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, int64(103), res.Highest)
	assert.Equal(t, int64(5001), res.Target)
	assert.False(t, res.Masters[4].Answered)
	assert.Error(t, res.Masters[4].Err)
	for i := range 4 {
		assert.Equal(t, "5001", rdbs[i].Get(ctx, key).Val())
		assert.Equal(t, int64(5001), res.Masters[i].After)
	}
}

// TestHealthLoopSpreadsTheHighestFence: a counting master whose fencing
// counter lags (a late voter gets no write-back) is raised to the highest
// counter of the counting masters within a few probe rounds, so that after
// the loss of a majority the survivors are close to the newest fence.
func TestHealthLoopSpreadsTheHighestFence(t *testing.T) {
	ctx := context.Background()
	rdbs := direct(t)
	key := "fence:" + newKey(t)
	for i, r := range rdbs {
		require.NoError(t, r.Set(ctx, key, 10*(i+1), 0).Err())
	}
	newClient(t, WithFenceKey(key), WithHealthInterval(20*time.Millisecond))
	require.Eventually(t, func() bool {
		for _, r := range rdbs {
			if v, _ := r.Get(ctx, key).Int64(); v != 50 {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "every counter raised to 50, none beyond")
}

// TestRestoredFromSnapshotAtStartup: a master whose marker was written
// before its server last started restarted with old data (an RDB snapshot,
// an AOF not fsynced always): it may miss locks granted since the snapshot.
// A Client started later quarantines it (a running one sees the run_id
// change). Found by a trial: a second daemon granted a lock a first daemon
// still held on exactly a quorum. The state is planted on real masters:
// markers stamped after each server's start, but master 2's stamped an
// hour before its start.
func TestRestoredFromSnapshotAtStartup(t *testing.T) {
	ctx := context.Background()
	rdbs := direct(t)
	plant := func() string {
		// As the Client does, stamp only servers up for 2s or more: their
		// start time, from INFO's whole-second uptime, may be 1s late.
		require.Eventually(t, func() bool {
			for _, r := range rdbs {
				if _, uptime, _, ok := parseInfoServer(r.Info(ctx, "server").Val()); !ok || uptime < 2*time.Second {
					return false
				}
			}
			return true
		}, 10*time.Second, 50*time.Millisecond)
		marker := "marker:" + newKey(t)
		for i, r := range rdbs {
			now, err := r.Time(ctx).Result()
			require.NoError(t, err)
			at := now
			if i == 2 {
				_, uptime, _, ok := parseInfoServer(r.Info(ctx, "server").Val())
				require.True(t, ok)
				at = now.Add(-uptime - time.Hour)
			}
			require.NoError(t, r.Set(ctx, marker, fmt.Sprintf("redlockd %d", at.UnixMilli()), 0).Err())
		}
		return marker
	}
	t.Run("quarantined", func(t *testing.T) {
		c := newClient(t, WithMarkerKey(plant()))
		st := c.Masters()
		assert.Contains(t, []MasterState{MasterQuarantined, MasterRepairing}, st[2].State)
		assert.Contains(t, st[2].QuarantineReason, "data older than its restart")
		assert.Greater(t, st[2].QuarantineLeft, time.Hour, "until max TTL (24h) after its start")
		for _, i := range []int{0, 1, 3, 4} {
			assert.Equal(t, MasterUp, st[i].State, "master %d: its marker is newer than its start", i)
		}
	})
	t.Run("negative control: quarantine off, it votes", func(t *testing.T) {
		c := newClient(t, WithMarkerKey(plant()), withGuardOff(guardswitch.Quarantine))
		assert.Equal(t, MasterUp, c.Masters()[2].State)
		assert.True(t, c.Masters()[2].Counting)
	})
}

// TestMarkerCarriesTheMasterTime: markers the Client writes are stamped
// with the master's own time, after the server's start.
func TestMarkerCarriesTheMasterTime(t *testing.T) {
	ctx := context.Background()
	rdbs := direct(t)
	marker := "marker:" + newKey(t)
	c, err := New(masterOptions(), WithMarkerKey(marker), WithHealthInterval(20*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	require.Eventually(t, func() bool {
		for _, r := range rdbs {
			if r.Exists(ctx, marker).Val() != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for i, r := range rdbs {
		mk, ok := parseMarker(r.Get(ctx, marker).Val())
		at := mk.at
		require.True(t, ok, "master %d: %q", i, r.Get(ctx, marker).Val())
		now, err := r.Time(ctx).Result()
		require.NoError(t, err)
		_, uptime, _, _ := parseInfoServer(r.Info(ctx, "server").Val())
		// uptime_in_seconds is whole seconds, rounded down: the server
		// started up to a second before now − uptime (a master started
		// under a second ago reads 0).
		assert.False(t, at.Before(now.Add(-uptime-time.Second)), "master %d: written after its start", i)
		assert.False(t, at.After(now), "master %d", i)
	}
}

// wipeAllAndRepair restarts every master empty while lock (granted by a
// Client whose health probes are far apart, so it has not registered its
// max TTL again) stands, and runs RepairFences with an operator's max TTL
// of 10ms and the fence of lock as --min: the max TTL registry went with
// the data, so the repair markers say 10ms.
func wipeAllAndRepair(t *testing.T, marker string, lock *Lock) *RepairResult {
	t.Helper()
	restartEmpty(t, 0, 1, 2, 3, 4)
	res, err := RepairFences(context.Background(), masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: 10 * time.Millisecond, Min: lock.Fence()})
	require.NoError(t, err)
	return res
}

// TestOperatorRepairKeepsTheClientsOwnMaxTTL: every master is wiped while a
// Client with max TTL 4s holds a 3s lock, and the operator runs
// repair-fences with a max TTL shorter than that at once, before any
// client registered its max TTL again. The Client adopts the repair but
// keeps the masters out until its own max TTL after the repair: no master
// counts again while the 3s lock may stand. The new-user run saw the
// negative control's behaviour: a daemon with max_ttl 40 adopted a
// repair-fences --max-ttl 5 and granted the key again 5.7s later while its
// 30s lock stood.
func TestOperatorRepairKeepsTheClientsOwnMaxTTL(t *testing.T) {
	for _, tc := range []struct {
		name     string
		operator bool // leave the markers as RepairFences wrote them
	}{
		{"protected", true},
		{"negative control: markers without the operator tag", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			marker := "marker:" + newKey(t)
			plantMarker(marker)
			c := newClient(t, WithMarkerKey(marker), WithMaxTTL(4*time.Second), WithHealthInterval(time.Hour))
			key := newKey(t)
			lock, err := c.Acquire(ctx, key, 3*time.Second)
			require.NoError(t, err)
			res := wipeAllAndRepair(t, marker, lock)
			assert.Zero(t, res.RegisteredMaxTTL, "the registry went with the data")
			rdbs := direct(t)
			for i, r := range rdbs {
				v := r.Get(ctx, marker).Val()
				require.True(t, strings.HasSuffix(v, " operator"), "master %d marker %q", i, v)
				if !tc.operator {
					require.NoError(t, r.Set(ctx, marker, strings.TrimSuffix(v, " operator"), 0).Err())
				}
			}

			// The Client's next vote sees the restarts (new connections),
			// and its probe adopts the repairs.
			_, err = c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
			require.Error(t, err)
			require.Eventually(t, func() bool {
				for i := range c.masters {
					if c.masters[i].st.conds.has(condRepairPending) {
						return false
					}
				}
				return true
			}, 10*time.Second, 10*time.Millisecond, "the Client adopts the repair: %v", states(c))
			// (The reason shown is the repair's, or the loss's when its
			// provisional quarantine is the longer one.)
			countsAgain := time.Now().Add(c.Masters()[0].QuarantineLeft)
			for _, st := range c.Masters() {
				countsAgain = earliest(countsAgain, time.Now().Add(st.QuarantineLeft))
			}
			if !tc.operator {
				assert.True(t, countsAgain.Before(lock.ValidUntil()), "the old rule lets the masters vote while the lock stands")
				require.Eventually(t, c.QuorumAvailable, 2*time.Second, 5*time.Millisecond)
				got, err := c.Acquire(ctx, key, time.Second)
				require.NoError(t, err, "negative control: a second holder")
				assert.True(t, time.Now().Before(lock.ValidUntil()), "granted while the first lock stands")
				_ = got.Release(ctx)
				return
			}
			assert.True(t, countsAgain.After(lock.ValidUntil()), "no master counts before the 3s lock has ended: counts again at %v, lock until %v",
				countsAgain.Format(time.StampMilli), lock.ValidUntil().Format(time.StampMilli))
			_, err = c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
			require.ErrorIs(t, err, ErrQuorumUnavailable)
			assert.True(t, time.Now().Before(lock.ValidUntil()), "refused while the first lock stood")
		})
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TestOperatorRepairGrowsWithALaterRegistration: after the wipe and the
// operator's short repair, a Client with max TTL 3s starts and keeps the
// masters out for its own bound after the repair; then another client,
// which allows 9s locks and held one on the wiped masters, registers again.
// The first Client must then keep the masters out for 9s after the repair:
// that client's lock may still stand.
func TestOperatorRepairGrowsWithALaterRegistration(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	long := newClient(t, WithMarkerKey(marker), WithMaxTTL(9*time.Second), WithHealthInterval(time.Hour))
	lock, err := long.Acquire(ctx, newKey(t), 8*time.Second)
	require.NoError(t, err)
	res := wipeAllAndRepair(t, marker, lock)
	require.Zero(t, res.RegisteredMaxTTL, "the registry went with the data")

	short := newClient(t, WithMarkerKey(marker), WithMaxTTL(3*time.Second), WithHealthInterval(20*time.Millisecond))
	for i, st := range short.Masters() {
		assert.Equal(t, MasterQuarantined, st.State, "master %d", i)
		assert.Less(t, st.QuarantineLeft, 3500*time.Millisecond, "master %d: its own 3s bound until it learns of the longer one", i)
	}

	// The long client's probe registers 9s again; the short one reads it.
	long.kickHealth()
	require.Eventually(t, func() bool { return short.lossTTL() == 9*time.Second }, 5*time.Second, 10*time.Millisecond)
	for i, st := range short.Masters() {
		assert.True(t, time.Now().Add(st.QuarantineLeft).After(lock.ValidUntil()), "master %d stays out until the 8s lock has ended", i)
	}
}

// TestRepairFencesRefusesWithoutACounterOrMin: when no master kept its
// fencing counter, the newest fence is unknown: RepairFences refuses
// without Min, writing nothing, and repairs with it (fences continue above
// Min). Before, it raised the counters to the margin alone, and after an
// earlier repair had taken them past it the fences went back.
func TestRepairFencesRefusesWithoutACounterOrMin(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	fenceKey := "fence:" + newKey(t)
	rdbs := direct(t)
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, fenceKey, 0, 0).Err()) // the deployment's counter, as plantMarker plants the default one
	}
	c := newClient(t, WithMarkerKey(marker), WithFenceKey(fenceKey), WithMaxTTL(time.Second))
	lock, err := c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	require.NoError(t, c.Close())
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, fenceKey, DefaultRepairMargin+17, 0).Err()) // an earlier repair's counters
	}
	restartEmpty(t, 0, 1, 2, 3, 4)

	_, err = RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: fenceKey, MarkerKey: marker, MaxTTL: time.Second})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "--min")
	for i, r := range rdbs {
		assert.Zero(t, r.Exists(ctx, fenceKey, marker).Val(), "master %d: nothing written", i)
	}

	res, err := RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: fenceKey, MarkerKey: marker, MaxTTL: time.Second, Min: DefaultRepairMargin + 17})
	require.NoError(t, err)
	assert.Equal(t, DefaultRepairMargin+18, res.Target)
	for i, r := range rdbs {
		v, err := r.Get(ctx, fenceKey).Int64()
		require.NoError(t, err)
		assert.Equal(t, DefaultRepairMargin+18, v, "master %d", i)
	}
}

// TestSelfRepairDropsTheOperatorHint: master 2 restarts empty while 3 and 4
// are paused, so no quorum of counting masters can repair it and its
// reason says to run repair-fences. Once 3 and 4 answer again the Client
// repairs master 2 itself, and the reason must no longer send the operator
// to repair-fences (/readyz kept that hint after the repair).
func TestSelfRepairDropsTheOperatorHint(t *testing.T) {
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	c := newClient(t, WithMarkerKey(marker), WithMaxTTL(10*time.Second), WithHealthInterval(20*time.Millisecond))
	// A lock raises the lease horizon, so the repair leaves master 2
	// quarantined (and its reason shown) until the lock ends.
	lock, err := c.Acquire(context.Background(), newKey(t), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, servers[3].Pause())
	require.NoError(t, servers[4].Pause())
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			assert.NoError(t, servers[3].Resume())
			assert.NoError(t, servers[4].Resume())
		}
	}
	t.Cleanup(resume)
	restartEmpty(t, 2)
	require.Eventually(t, func() bool {
		st := c.Masters()[2]
		return st.State == MasterRepairing && strings.Contains(st.QuarantineReason, "run `redlockd repair-fences`")
	}, 10*time.Second, 10*time.Millisecond, "no quorum to repair from: %+v", c.Masters()[2])

	resume()
	require.Eventually(t, func() bool { return !c.masters[2].st.conds.has(condRepairPending) }, 10*time.Second, 10*time.Millisecond,
		"the Client repairs master 2 from 0, 1, 3 and 4: %v", states(c))
	st := c.Masters()[2]
	require.Equal(t, MasterQuarantined, st.State, "until the lock's end: %+v", st)
	assert.NotContains(t, st.QuarantineReason, "repair-fences", "repaired by the Client itself")
	assert.Contains(t, st.QuarantineReason, "counts again when every lock it may have held has ended")
	assert.True(t, time.Now().Add(st.QuarantineLeft).After(lock.ValidUntil()))
}

// TestEvictionsBetweenRepairAndAdoptionAreSeen: masters 0-2 restart empty,
// the operator repairs, and master 0 (repaired, so the adopting Client
// forgets what it read there before) evicts keys before the running
// Client's next probe adopts the repair there. The repair marker carries
// master 0's evicted_keys at the repair (ev=), so the adopting Client
// counts the evictions since as a loss. Before, it took the count it read
// at adoption as the baseline and never saw them. (A master repair-fences
// found intact, such as 3, keeps the Client's own baseline:
// TestOperatorRepairOfAnIntactMasterKeepsWhatTheClientRead.)
func TestEvictionsBetweenRepairAndAdoptionAreSeen(t *testing.T) {
	for _, tc := range []struct {
		name  string
		strip bool // remove ev= from master 0's marker, as an older repair wrote it
	}{
		{"protected", false},
		{"negative control: a marker without ev=", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			marker := "marker:" + newKey(t)
			plantMarker(marker)
			c := newClient(t, WithMarkerKey(marker), WithMaxTTL(time.Second), WithHealthInterval(time.Hour))
			restartEmpty(t, 0, 1, 2)
			_, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: time.Second})
			require.NoError(t, err)
			r := direct(t)[0]
			v := r.Get(ctx, marker).Val()
			require.Contains(t, v, " ev=", "master 0's repair marker")
			if tc.strip {
				f := slices.DeleteFunc(strings.Fields(v), func(x string) bool { return strings.HasPrefix(x, "ev=") })
				require.NoError(t, r.Set(ctx, marker, strings.Join(f, " "), 0).Err())
			}
			evictSome(t, r)

			before := c.DataLosses()[LossEvicted]
			// Two whole probe rounds, run here (the health loop's are an
			// hour apart): the first adopts the repair on master 0.
			c.probeAll()
			c.probeAll()
			exp := c.masters[0].st.inc.expectedMarker.Load()
			require.NotNil(t, exp)
			require.True(t, strings.HasPrefix(*exp, "repaired "), "the Client adopted master 0's repair: %q", *exp)
			if tc.strip {
				assert.Equal(t, before, c.DataLosses()[LossEvicted], "negative control: the evictions go unseen")
				return
			}
			assert.Greater(t, c.DataLosses()[LossEvicted], before, "the evictions since the repair are a loss: %v", states(c))
			assert.True(t, c.masters[0].st.conds.has(condRepairPending), "master 0 is out until repaired again")
		})
	}
}

// evictSome makes r evict keys: volatile-lru (only keys with a TTL, so the
// marker and counters stay), maxmemory just above use, then filler keys
// with a TTL until evicted_keys grows; maxmemory is lifted again after.
func evictSome(t *testing.T, r *redis.Client) {
	t.Helper()
	ctx := context.Background()
	evicted := func() int64 {
		n, err := strconv.ParseInt(parseInfoFields(r.Info(ctx, "stats").Val(), "evicted_keys")["evicted_keys"], 10, 64)
		require.NoError(t, err)
		return n
	}
	start := evicted()
	used, err := strconv.ParseInt(parseInfoFields(r.Info(ctx, "memory").Val(), "used_memory")["used_memory"], 10, 64)
	require.NoError(t, err)
	require.NoError(t, r.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err())
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+2<<20, 10)).Err())
	t.Cleanup(func() {
		r.ConfigSet(ctx, "maxmemory", "0")
		r.ConfigSet(ctx, "maxmemory-policy", "noeviction")
		keys, _ := r.Keys(ctx, "evfiller:*").Result()
		if len(keys) > 0 {
			r.Unlink(ctx, keys...)
		}
	})
	filler := strings.Repeat("x", 16<<10)
	for i := 0; evicted() == start; i++ {
		require.Less(t, i, 20000, "nothing was evicted")
		require.NoError(t, r.Set(ctx, fmt.Sprintf("evfiller:%d", i), filler, time.Minute).Err())
	}
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", "0").Err())
}

// TestOperatorRepairOfAnIntactMasterKeepsWhatTheClientRead: master 3 rolls
// back to an older copy of its data (its lease horizon lower, a 20s lock on
// masters 1, 2 and 3 gone from it), and an operator runs repair-fences
// before the Client looks at master 3 again. repair-fences finds the
// marker, horizon and counter there, so it takes master 3 for one that
// kept its data and writes a repair marker without a quarantine. The
// Client adopted that marker by forgetting what it had read from master 3
// (the horizon it compares with): the rollback went unseen, and the lock
// was granted again on masters 0, 3 and 4 while it stood. The negative
// control turns that back on (guard RepairKeepsBaselines off) and must see
// the second holder. (Since repair-fences quarantines a master whose
// counter lags, the counters are made equal first, as the health loop
// does: without that, masters 0 and 4, which the lock did not reach, were
// quarantined and refused the second acquire with or without the fix.)
func TestOperatorRepairOfAnIntactMasterKeepsWhatTheClientRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		keep bool // the guard is on: the rollback is seen
	}{
		// The granted-lock check (masters 1 and 2 answer that a granted
		// lock holds the key) is off in both: the fix alone decides.
		{"guard on", []Option{withGuardOff(guardswitch.GrantedLock)}, true},
		{"negative control: every repair marker resets the baselines", []Option{withGuardOff(guardswitch.GrantedLock), withGuardOff(guardswitch.RepairKeepsBaselines)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c, _ := brandNewClient(t, append([]Option{WithHealthInterval(time.Hour)}, tc.opts...)...)
			r := direct(t)[3]
			old, err := r.Get(ctx, c.opts.horizonKey).Result() // the older copy
			require.NoError(t, err)
			key := newKey(t)
			first := placeOn(t, c, key, 20*time.Second, 1, 2, 3)
			// The health loop copies the highest fencing counter to every
			// master (spreadFence): 0 and 4, which the lock did not
			// reach, catch up, and none lags for repair-fences to
			// quarantine.
			highest, err := r.Get(ctx, c.opts.fenceKey).Int64()
			require.NoError(t, err)
			for _, m := range direct(t) {
				require.NoError(t, m.Set(ctx, c.opts.fenceKey, highest, 0).Err())
			}
			// The rollback: master 3's horizon back to the older copy's
			// and the lock gone; its counter as it was.
			require.NoError(t, r.Set(ctx, c.opts.horizonKey, old, 0).Err())
			require.NoError(t, r.Del(ctx, key).Err())
			res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: c.opts.markerKey, FenceKey: c.opts.fenceKey, MaxTTL: time.Minute})
			require.NoError(t, err)
			mk, ok := parseMarker(res.Masters[3].Marker)
			require.True(t, ok && !mk.repaired, "master 3 looked intact to repair-fences: %q", res.Masters[3].Marker)
			for i, mr := range res.Masters {
				require.Empty(t, mr.Lost, "repair-fences found master %d intact and quarantined none", i)
			}

			// The Client's next look at the masters adopts the repair
			// markers (the probe's own reading, sent before the adoption,
			// counts no loss); the acquire's votes read master 3 again.
			c.probeAll()
			c.afterProbes()
			second, err := c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
			if err == nil {
				_ = second.Release(ctx)
			}
			require.True(t, time.Now().Before(first.ValidUntil()), "the first lock still stood at the second acquire")
			if !tc.keep {
				assert.Zero(t, c.DataLosses()[LossRolledBack], "%v", c.DataLosses())
				require.NoError(t, err, "with the baselines reset, the rollback goes unseen and a second holder gets in on masters 0, 3 and 4")
				return
			}
			require.ErrorIs(t, err, ErrNotObtained, "no second holder while the first lock stands")
			assert.EqualValues(t, 1, c.DataLosses()[LossRolledBack], "%v", c.DataLosses())
		})
	}
}

// TestFencesContinueAboveWhatTheClientIssued: every master is wiped and the
// operator repairs with a --min below the fences already issued (the
// new-user run: 1000065 issued, --min 5, next fence 1000001). The running
// Client knows the fences it issued and continues above them; the next
// fence is above the highest it issued, and the write-back raises the
// counters so other clients continue above it too.
func TestFencesContinueAboveWhatTheClientIssued(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	fenceKey := "fence:" + newKey(t)
	rdbs := direct(t)
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, fenceKey, 2*DefaultRepairMargin, 0).Err()) // an earlier repair's counters
	}
	// Probes an hour apart: it must not repair the masters one by one from
	// the others while they restart.
	var logs logBuffer
	c := newClient(t, WithMarkerKey(marker), WithFenceKey(fenceKey), WithMaxTTL(time.Second), WithHealthInterval(time.Hour), WithLogger(logs.logger()))
	first, err := c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	require.Greater(t, first.Fence(), 2*DefaultRepairMargin)
	require.NoError(t, first.Release(ctx))

	restartEmpty(t, 0, 1, 2, 3, 4)
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{FenceKey: fenceKey, MarkerKey: marker, MaxTTL: time.Second, Min: 5})
	require.NoError(t, err)
	require.Less(t, res.Target, first.Fence(), "the operator's floor is too low")

	var next *Lock
	require.Eventually(t, func() bool {
		next, err = c.Acquire(ctx, newKey(t), time.Second, WithRetry(NoRetry()))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the repaired masters count again: %v", states(c))
	assert.Greater(t, next.Fence(), first.Fence(), "fences do not go back")
	// The counters really went below a fence this Client issued: it says so.
	assert.Equal(t, 1, logs.count(fenceWarning), "%s", logs.b.String())
	later := newClient(t, WithMarkerKey(marker), WithFenceKey(fenceKey), WithMaxTTL(time.Second))
	require.Eventually(t, later.QuorumAvailable, 10*time.Second, 20*time.Millisecond)
	third, err := later.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	assert.Greater(t, third.Fence(), next.Fence(), "another client continues above: the write-back raised the counters")
}

// TestRepairFencesQuarantinesALaggingCounter: master 4 rolls back to a
// copy of its data taken after a 30s lock raised its lease horizon, losing
// a 5s lock granted since (on masters 2, 3 and 4), and an operator runs
// repair-fences before the Client looks at master 4 again. The older copy
// has its marker, its horizon (the same: the 5s lock did not raise it) and
// a counter, so master 4 looks intact; only its counter is below the
// others' (the health loop had copied the 5s lock's fence to every
// master). repair-fences takes it for a master that may have rolled back:
// it quarantines it for the max TTL stay, and the lock is not granted again
// while the 5s lock stands. The negative control is the old rule: master 4
// written intact, its counter raised above what the Client read, and the
// rollback, which only the counter showed, unseen: a second holder.
func TestRepairFencesQuarantinesALaggingCounter(t *testing.T) {
	// The granted-lock check (granted.go) also refuses the second holder
	// here, whatever repair-fences does: it is off unless a subtest says
	// so, so that this test shows repair-fences' own rule.
	scenario := func(t *testing.T, o RepairOptions, opts ...Option) (*Client, *RepairResult, *Lock, *Lock, error) {
		ctx := context.Background()
		if len(opts) == 0 {
			opts = []Option{withGuardOff(guardswitch.GrantedLock)}
		}
		c, _ := brandNewClient(t, append(opts, WithHealthInterval(time.Hour))...)
		r := direct(t)[4]
		placeOn(t, c, newKey(t), 30*time.Second, 2, 3, 4) // raises the horizon 30s ahead
		oldF := r.Get(ctx, c.opts.fenceKey).Val()         // the older copy
		key := newKey(t)
		lost := placeOn(t, c, key, 5*time.Second, 2, 3, 4)
		c.probeAll() // the health loop copies the highest fence to masters 0 and 1
		c.afterProbes()
		for i, r := range direct(t) {
			require.Equal(t, strconv.FormatInt(lost.Fence(), 10), r.Get(ctx, c.opts.fenceKey).Val(), "master %d", i)
		}
		require.NoError(t, r.Set(ctx, c.opts.fenceKey, oldF, 0).Err()) // the rollback
		require.NoError(t, r.Del(ctx, key).Err())

		o.MarkerKey, o.FenceKey, o.MaxTTL = c.opts.markerKey, c.opts.fenceKey, time.Minute
		res, err := RepairFences(ctx, masterOptions(), o)
		require.NoError(t, err)
		c.probeAll() // the Client's next look at master 4
		c.afterProbes()
		second, err := c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
		require.True(t, time.Now().Before(lost.ValidUntil()), "while the 5s lock stands")
		return c, res, lost, second, err
	}
	t.Run("protected", func(t *testing.T) {
		c, res, _, second, err := scenario(t, RepairOptions{})
		if err == nil {
			_ = second.Release(context.Background())
		}
		require.ErrorIs(t, err, ErrNotObtained, "no second holder")
		assert.Contains(t, res.Masters[4].Lost, "below the highest found")
		for i := range 4 {
			assert.Empty(t, res.Masters[i].Lost, "master %d kept its data", i)
		}
		st := c.Masters()[4]
		assert.Equal(t, MasterQuarantined, st.State)
		assert.Contains(t, st.QuarantineReason, "repair-fences")
		assert.Greater(t, st.QuarantineLeft, 50*time.Second, "the max TTL stay")
	})
	t.Run("a lagging counter trusted, the granted-lock check on", func(t *testing.T) {
		c, _, _, _, err := scenario(t, RepairOptions{trustLaggingCounters: true}, WithHealthInterval(time.Hour))
		require.ErrorIs(t, err, ErrLockHeld, "masters 2 and 3 show the granted lock")
		assert.Equal(t, int64(1), c.GrantRefusals())
	})
	t.Run("negative control: a lagging counter trusted", func(t *testing.T) {
		_, res, lost, second, err := scenario(t, RepairOptions{trustLaggingCounters: true})
		require.NoError(t, err, "a second holder")
		assert.Empty(t, res.Masters[4].Lost)
		assert.Greater(t, second.Fence(), lost.Fence(), "with a fence above the lost lock's: only the resource can tell")
	})
}

// TestRepairFencesSeesARestartFromOlderData: a master that is not durable
// and whose marker was written before its server last started restarted
// with data from before its restart (an RDB snapshot): it may miss locks,
// and only the marker rule shows it when the counter does not (only an
// extend was lost). RepairFences applies the Clients' marker rule and
// quarantines it; it used to take it for intact and overwrite its marker,
// so a daemon started later counted it at once (a break-it pass). A
// marker written after the start is an intact master's.
func TestRepairFencesSeesARestartFromOlderData(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		offset   time.Duration // of the marker's time from the server's start
		wantLost bool
	}{
		{"marker older than the restart", -5 * time.Second, true},
		{"marker written after the start", 5 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := brandNewClient(t, WithHealthInterval(time.Hour))
			r := direct(t)[4]
			now, err := r.Time(ctx).Result()
			require.NoError(t, err)
			info, err := r.Info(ctx, "server").Result()
			require.NoError(t, err)
			_, uptime, _, ok := parseInfoServer(info)
			require.True(t, ok)
			started := now.Add(-uptime)
			at := started.Add(tc.offset)
			if !tc.wantLost && at.After(now) {
				at = now // a marker from the future would be another rule's
			}
			require.NoError(t, r.Set(ctx, c.opts.markerKey, fmt.Sprintf("redlockd %d 0123456789abcdef", at.UnixMilli()), 0).Err())

			res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: c.opts.markerKey, FenceKey: c.opts.fenceKey, MaxTTL: uptime + time.Minute})
			require.NoError(t, err)
			for i := range 4 {
				assert.Empty(t, res.Masters[i].Lost, "master %d kept its data", i)
			}
			if tc.wantLost {
				assert.Contains(t, res.Masters[4].Lost, "with data older than its restart")
				v := r.Get(ctx, c.opts.markerKey).Val()
				assert.True(t, strings.HasSuffix(v, " operator"), "quarantined by its marker: %q", v)
			} else {
				assert.Empty(t, res.Masters[4].Lost)
			}
		})
	}
}

// TestKeptRepairEndsALossTheClientSaw: three masters roll back (their lease
// horizons fall; counters, markers and run_ids stay), so the running Client
// fails closed: it cannot repair them without a quorum that kept its data.
// repair-fences finds every master intact (it does not compare horizons)
// and writes "kept" markers. The Client's repair round, which has no
// quorum to read horizons from, finds the operator's marker written after
// the loss it saw and completes the repair as an operator's: it rewrites
// the marker as one that ended a loss, and the masters stay out for the max
// TTL after it, then count again. The marker is durable: a Client started
// afterwards knows those masters kept their data only since the repair
// (KeptSince, which the idempotency records go by). Negative control (run
// by hand): a Client that takes "kept" for "nothing happened" stays closed
// for good.
//
// With "after earlier repairs", masters 0–2 each lost data alone before
// and this Client repaired them (plain repair markers): repair-fences then
// writes a plain marker, not "kept" (repair.lua will not say "kept" over a
// repair that ended a loss), which ends no loss either; the Client's
// repair round treats it the same way.
func TestKeptRepairEndsALossTheClientSaw(t *testing.T) {
	for _, earlier := range []bool{false, true} {
		name := "first markers"
		if earlier {
			name = "after earlier repairs"
		}
		t.Run(name, func(t *testing.T) { keptRepairEndsALoss(t, earlier) })
	}
}

// handDrivenClient is a Client of a brand-new deployment (max TTL 1 s)
// whose health loop runs only when the test calls round.
func handDrivenClient(t *testing.T) (c *Client, opts []Option, round func()) {
	t.Helper()
	c, opts = brandNewClient(t, WithHealthInterval(time.Hour), WithMaxTTL(time.Second))
	return c, opts, func() {
		c.probeAll()
		c.afterProbes()
	}
}

func keptRepairEndsALoss(t *testing.T, earlier bool) {
	ctx := context.Background()
	// The health loop is driven by hand (round): the three rollbacks must
	// be seen in one probe round, or the Client repairs the first one it
	// sees itself, from a quorum of the others.
	c, opts, round := handDrivenClient(t)
	rdbs := direct(t)
	// rollBack takes the lease horizon of masters on back half a second
	// below its value now, once a probe read that value: an older copy's.
	rollBack := func(on ...int) {
		round()
		for _, i := range on {
			v, err := rdbs[i].Get(ctx, c.opts.horizonKey).Int64()
			require.NoError(t, err)
			require.NoError(t, rdbs[i].Set(ctx, c.opts.horizonKey, v-500, 0).Err())
		}
		round()
	}
	allCount := func() bool {
		round()
		for _, st := range c.Masters() {
			if !st.Counting {
				return false
			}
		}
		return true
	}
	if earlier {
		for i := range 3 {
			// The master repaired before is back: a quorum to repair from.
			require.Eventually(t, allCount, 10*time.Second, 10*time.Millisecond)
			lock, err := c.Acquire(ctx, newKey(t), time.Second)
			require.NoError(t, err)
			require.NoError(t, lock.Release(ctx))
			rollBack(i) // master i alone: the Client repairs it from the others
			mk, ok := parseMarker(rdbs[i].Get(ctx, c.opts.markerKey).Val())
			require.True(t, ok && mk.repaired && mk.lostBefore(), "the Client repaired master %d itself", i)
		}
		require.Eventually(t, allCount, 10*time.Second, 10*time.Millisecond)
	}
	lock, err := c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err, "the votes raise every master's lease horizon")
	require.NoError(t, lock.Release(ctx))
	// Every counter at the highest, as the health loop makes them
	// (spreadFence): none lags for repair-fences to find.
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, c.opts.fenceKey, lock.Fence(), 0).Err())
	}
	rollBack(0, 1, 2)
	require.Equal(t, []MasterState{MasterRepairing, MasterRepairing, MasterRepairing, MasterUp, MasterUp}, states(c), "the rollback of a majority is seen")
	round()
	require.Equal(t, MasterRepairing, c.Masters()[0].State, "the Client cannot repair them on its own")
	_, err = c.Acquire(ctx, newKey(t), time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrQuorumUnavailable, "closed")

	repaired := time.Now()
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: c.opts.markerKey, FenceKey: c.opts.fenceKey, MaxTTL: time.Second})
	require.NoError(t, err)
	for i, mr := range res.Masters {
		require.Empty(t, mr.Lost, "repair-fences found master %d intact", i)
	}
	require.Eventually(t, func() bool { round(); return c.QuorumAvailable() }, 10*time.Second, 10*time.Millisecond,
		"the Client reopens after the operator's repair: %v", c.Masters())
	assert.GreaterOrEqual(t, time.Since(repaired), 900*time.Millisecond, "the masters stayed out for the max TTL after the repair")
	for i, r := range rdbs {
		v := r.Get(ctx, c.opts.markerKey).Val()
		mk, ok := parseMarker(v)
		require.True(t, ok && mk.repaired, "master %d marker %q", i, v)
		assert.Equal(t, i < 3, mk.lostBefore(), "master %d marker %q: a loss ended by a repair on the rolled-back masters only", i, v)
	}
	lock, err = c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	assert.Greater(t, lock.Fence(), res.Highest)
	require.NoError(t, lock.Release(ctx))

	// What the rolled-back masters held before the repair may be gone
	// (idempotency records, which outlive any lock): a Client started now
	// knows it from their markers.
	later := sameDeployment(t, opts...)
	require.Eventually(t, func() bool { return later.QuorumAvailable() }, 10*time.Second, 10*time.Millisecond)
	for i, st := range later.Masters() {
		if i < 3 {
			assert.WithinDuration(t, repaired, st.KeptSince, 3*time.Second, "master %d", i)
		} else {
			assert.True(t, st.KeptSince.IsZero(), "master %d: %v", i, st.KeptSince)
		}
	}
}

// adoptionWatch is a slog handler that, at each "master repaired by
// another redlockd" line (the adoption ending a pending loss), records
// whether that master counted at that moment.
type adoptionWatch struct {
	c       atomic.Pointer[Client]
	mu      sync.Mutex
	counted []string // "<addr> counts=<bool> left=<quarantine left>"
}

func (w *adoptionWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *adoptionWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *adoptionWatch) WithGroup(string) slog.Handler            { return w }
func (w *adoptionWatch) Handle(_ context.Context, r slog.Record) error {
	c := w.c.Load()
	if c == nil || !strings.HasPrefix(r.Message, "master repaired by another redlockd") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "master" {
			for _, st := range c.Masters() {
				if st.Addr == a.Value.String() {
					w.mu.Lock()
					w.counted = append(w.counted, fmt.Sprintf("%s counts=%v left=%v", st.Addr, st.Counting, st.QuarantineLeft))
					w.mu.Unlock()
				}
			}
		}
		return true
	})
	return nil
}

// TestAdoptedRepairQuarantinesBeforeItCounts: three masters lost their
// data and the waiting Client's provisional quarantine (its max TTL from
// the loss) has run out when the operator's repair-fences comes. The
// Client adopts each repair marker; the marker's quarantine is set before
// the pending repair ends, so at no moment does the master count without
// it: at the adoption's log line it does not count. Before, the pending
// repair ended first, and the master counted until the next statement set
// the quarantine (a review saw "counts=true left=0s" at that line).
func TestAdoptedRepairQuarantinesBeforeItCounts(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	lostMajority(t, marker)
	w := &adoptionWatch{}
	c := newClient(t, WithMarkerKey(marker), WithHealthInterval(20*time.Millisecond), WithMaxTTL(time.Second), WithLogger(slog.New(w)))
	w.c.Store(c)
	require.Equal(t, MasterRepairing, c.Masters()[0].State)
	time.Sleep(1200 * time.Millisecond) // the loss's own quarantine (max TTL 1s) runs out
	_, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: marker, MaxTTL: time.Second})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.QuorumAvailable() && c.Masters()[0].Counting }, 10*time.Second, 10*time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Len(t, w.counted, 3, "one adoption per lost master")
	for _, line := range w.counted {
		assert.Contains(t, line, "counts=false", "the adopted repair's quarantine is in force when the pending repair ends")
	}
}

// TestRepairScriptWritesOnlyOverTheMarkerRead: given the marker the caller
// read (ARGV[7], the Client completing repair-fences' repair), the repair
// script writes nothing when the marker is another by now (the master
// flushed, or repaired again, in between): no marker, counter or horizon
// of a repair judged on a state that is gone.
func TestRepairScriptWritesOnlyOverTheMarkerRead(t *testing.T) {
	ctx := context.Background()
	r := direct(t)[0]
	p := newKey(t)
	keys := []string{p + ":marker", p + ":marker:horizon", p + ":fence"}
	require.NoError(t, r.MSet(ctx, keys[0], "redlockd 1 now", keys[1], "5", keys[2], "7").Err())
	out, err := repairScript.Run(ctx, r, keys, "100", "1000", "0123456789abcdef", "1000", "runid", "operator", "redlockd 1 then").Slice()
	require.NoError(t, err)
	assert.Equal(t, []any{"", int64(0), ""}, out)
	vals, err := r.MGet(ctx, keys...).Result()
	require.NoError(t, err)
	assert.Equal(t, []any{"redlockd 1 now", "5", "7"}, vals, "nothing written")

	out, err = repairScript.Run(ctx, r, keys, "100", "1000", "0123456789abcdef", "1000", "runid", "operator", "redlockd 1 now").Slice()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(out[0].(string), "repaired "), "%v", out)
	assert.Equal(t, int64(100), out[1])
}

// TestRestoredFromSnapshotMadeDurableAfterItsStart: the marker rule's
// durable exemption needs the server durable since it loaded its data. Two
// masters' markers were written an hour before their start: master 2 was
// started durable (appendonly, appendfsync always) and loaded its AOF; master
// 3 was started from a snapshot and then made durable with CONFIG SET. A
// Client started afterwards lets master 2 vote and quarantines masters 3 and 4:
// its durability now says nothing of the data it started with (the AOF
// rewrite that turning appendonly on starts shows it). Found by a helper:
// master 3 was counted, its lower counter quietly caught up by spreadFence.
func TestRestoredFromSnapshotMadeDurableAfterItsStart(t *testing.T) {
	ctx := context.Background()
	srvs := make([]*redisproc.Server, 5)
	for i := range srvs {
		var args []string
		if i == 2 {
			args = []string{"--appendonly", "yes", "--appendfsync", "always"}
		}
		s, err := redisproc.Start(redisproc.Options{ExtraArgs: args})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop() })
		srvs[i] = s
	}
	mo := make([]*redis.Options, len(srvs))
	rdbs := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		mo[i] = &redis.Options{Addr: s.Addr()}
		rdbs[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { rdbs[i].Close() })
	}
	for _, arg := range [][]any{{"appendonly", "yes"}, {"appendfsync", "always"}} {
		require.NoError(t, rdbs[3].ConfigSet(ctx, arg[0].(string), arg[1].(string)).Err())
	}
	// Master 4: turned durable while a BGSAVE runs, so its AOF rewrite is
	// only scheduled (aof_rewrites still 0) while the Client meets it.
	for i := range 200 {
		require.NoError(t, rdbs[4].Set(ctx, fmt.Sprintf("ballast:%d", i), "x", 0).Err())
	}
	require.NoError(t, rdbs[4].ConfigSet(ctx, "rdb-key-save-delay", "100000").Err()) // 20 s of BGSAVE
	require.NoError(t, rdbs[4].BgSave(ctx).Err())
	for _, arg := range [][]any{{"appendonly", "yes"}, {"appendfsync", "always"}} {
		require.NoError(t, rdbs[4].ConfigSet(ctx, arg[0].(string), arg[1].(string)).Err())
	}
	require.Eventually(t, func() bool {
		for _, r := range rdbs {
			if _, uptime, _, ok := parseInfoServer(r.Info(ctx, "server").Val()); !ok || uptime < 2*time.Second {
				return false
			}
		}
		p := parseInfoFields(rdbs[3].Info(ctx, "persistence").Val(), "aof_rewrite_in_progress", "aof_rewrites")
		return p["aof_rewrite_in_progress"] == "0" && p["aof_rewrites"] == "1"
	}, 10*time.Second, 50*time.Millisecond, "servers up 2s, master 3's AOF rewritten once")
	// CONFIG RESETSTAT zeroes aof_rewrites: the rewrite must still show.
	require.NoError(t, rdbs[3].ConfigResetStat(ctx).Err())
	p4 := parseInfoFields(rdbs[4].Info(ctx, "persistence").Val(), "aof_rewrite_scheduled", "aof_rewrites")
	require.Equal(t, map[string]string{"aof_rewrite_scheduled": "1", "aof_rewrites": "0"}, p4, "master 4's rewrite waits for its BGSAVE")
	marker := "marker:" + newKey(t)
	for i, r := range rdbs {
		now, err := r.Time(ctx).Result()
		require.NoError(t, err)
		at := now
		if i >= 2 {
			_, uptime, _, ok := parseInfoServer(r.Info(ctx, "server").Val())
			require.True(t, ok)
			at = now.Add(-uptime - time.Hour)
		}
		require.NoError(t, r.Set(ctx, marker, fmt.Sprintf("redlockd %d", at.UnixMilli()), 0).Err())
		// The rest of a deployment's state: a lease horizon in the past
		// and a fencing counter.
		require.NoError(t, r.Set(ctx, marker+":horizon", strconv.FormatInt(now.UnixMilli()-1000, 10), 0).Err())
		require.NoError(t, r.Set(ctx, "redlock:fence", "10", 0).Err())
	}
	c, err := New(mo, WithMarkerKey(marker))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	st := c.Masters()
	assert.True(t, st[2].Durable)
	assert.Equal(t, MasterUp, st[2].State, "durable since its start: its data is whole")
	assert.True(t, st[3].Durable, "durable now")
	assert.Contains(t, []MasterState{MasterQuarantined, MasterRepairing}, st[3].State, "made durable after it loaded a snapshot")
	assert.Contains(t, st[3].QuarantineReason, "data older than its restart")
	assert.False(t, st[3].Counting)
	assert.True(t, st[4].Durable, "durable now")
	assert.Contains(t, []MasterState{MasterQuarantined, MasterRepairing}, st[4].State, "made durable with its rewrite still scheduled")
	assert.False(t, st[4].Counting)

	// RepairFences applies the same rule.
	res, err := RepairFences(ctx, mo, RepairOptions{MarkerKey: marker, MaxTTL: time.Hour})
	require.NoError(t, err)
	assert.Empty(t, res.Masters[2].Lost, "master 2")
	assert.Contains(t, res.Masters[3].Lost, "data older than its restart", "master 3")
	assert.Contains(t, res.Masters[4].Lost, "data older than its restart", "master 4")
}

// TestKeptRepairKeepsTheEarlierLossEnd: repair-fences on a deployment
// whose master 0 lost its data once and was repaired by a Client (a plain
// repair marker at T0), everything intact since: the run writes master 0
// a plain marker (never "kept" over a loss) that carries since=T0, so a
// Client started afterwards knows master 0 kept its data since T0 — the
// end of the only loss — not since the run (MasterAnswer.KeptSince, which
// the placement registry's gate and the idempotency records go by); the
// others stay "kept". Negative control: the marker stamped the run as
// the loss's end, and every gated daemon took the registrations there for
// lost, shut out for a registration's life + the max TTL (a black-box
// pass: every run of repair-fences on a deployment that had once
// repaired each master, 62–65 s at max_ttl 60 s).
func TestKeptRepairKeepsTheEarlierLossEnd(t *testing.T) {
	ctx := context.Background()
	c, opts, round := handDrivenClient(t)
	rdbs := direct(t)
	lock, err := c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	// Master 0 rolls back (its lease horizon below what a probe read); the
	// Client repairs it from the others.
	round()
	v, err := rdbs[0].Get(ctx, c.opts.horizonKey).Int64()
	require.NoError(t, err)
	require.NoError(t, rdbs[0].Set(ctx, c.opts.horizonKey, v-500, 0).Err())
	round()
	earlier, ok := parseMarker(rdbs[0].Get(ctx, c.opts.markerKey).Val())
	require.True(t, ok && earlier.lostBefore(), "the Client repaired master 0")
	require.Eventually(t, func() bool { round(); return c.Masters()[0].Counting }, 10*time.Second, 10*time.Millisecond)
	// Counters even, as the health loop makes them: none lags.
	for _, r := range rdbs {
		require.NoError(t, r.Set(ctx, c.opts.fenceKey, DefaultRepairMargin, 0).Err())
	}

	time.Sleep(50 * time.Millisecond) // the run's time differs from T0
	res, err := RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: c.opts.markerKey, FenceKey: c.opts.fenceKey, MaxTTL: time.Second})
	require.NoError(t, err)
	for i, mr := range res.Masters {
		require.Empty(t, mr.Lost, "repair-fences found master %d intact", i)
	}
	mk, ok := parseMarker(rdbs[0].Get(ctx, c.opts.markerKey).Val())
	require.True(t, ok && mk.repaired && mk.lostBefore(), "never kept over a loss")
	require.True(t, mk.at.After(earlier.at), "a new marker")
	assert.Equal(t, earlier.at, mk.since, "since= is the earlier repair's time")

	later := sameDeployment(t, opts...)
	require.Eventually(t, func() bool { return later.QuorumAvailable() }, 10*time.Second, 10*time.Millisecond)
	for i, st := range later.Masters() {
		if i == 0 {
			assert.Equal(t, earlier.at, st.KeptSince, "master 0 kept its data since the earlier repair")
		} else {
			assert.True(t, st.KeptSince.IsZero(), "master %d: %v", i, st.KeptSince)
		}
	}
	// The running Client adopts the run's marker and keeps counting master
	// 0: the run ended no loss.
	round()
	assert.True(t, c.Masters()[0].Counting, "%v", c.Masters()[0])

	// A second run carries the same since=.
	_, err = RepairFences(ctx, masterOptions(), RepairOptions{MarkerKey: c.opts.markerKey, FenceKey: c.opts.fenceKey, MaxTTL: time.Second})
	require.NoError(t, err)
	mk2, ok := parseMarker(rdbs[0].Get(ctx, c.opts.markerKey).Val())
	require.True(t, ok)
	assert.Equal(t, earlier.at, mk2.since, "kept from the marker found")
}

// TestLongerMaxTTLAfterAnOperatorRepairCountsFromTheRepair: a Client
// started after an operator's repair (repair-fences) that then sees a
// longer max TTL registered keeps the repaired master out that long after
// the repair, not after its own start. It took the repair for one at its
// start (a floor at its epoch): a black-box pass restarted a daemon 70 s
// after a repair-fences run, started a client with max_ttl 60, and the
// restarted daemon refused everything for 51 s (its start + 60 s) while
// the daemons that ran through the repair granted.
func TestLongerMaxTTLAfterAnOperatorRepairCountsFromTheRepair(t *testing.T) {
	c := newClient(t, WithHealthInterval(time.Hour), WithMaxTTL(time.Second))
	warmUp(c)
	m := c.masters[4]
	require.True(t, m.counts())
	operatorRepair := func(ago time.Duration) {
		now := time.Now()
		at := now.Add(-ago)
		v := fmt.Sprintf("repaired %d 0123456789abcdef %d %s operator", at.UnixMilli(), at.Add(time.Second).UnixMilli(), m.runID())
		mk, ok := parseMarker(v)
		require.True(t, ok, v)
		require.True(t, mk.byOperator)
		m.st.excludedUntil.Store(0)
		m.notedOperatorRepair(mk, now)
	}

	operatorRepair(50 * time.Second)
	c.longerMaxTTLSeen(time.Minute)
	left := m.quarantineLeft()
	assert.Greater(t, left, 9*time.Second, "the repair + 60 s: about 10 s from now")
	assert.Less(t, left, 11*time.Second, "the repair + 60 s, not this Client's start + 60 s")

	operatorRepair(70 * time.Second)
	c.longerMaxTTLSeen(time.Minute)
	assert.True(t, m.counts(), "a repair 70 s ago is past 60 s: nothing to wait for")
}

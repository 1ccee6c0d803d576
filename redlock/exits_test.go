package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
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

// until waits, polling, until cond holds, at most d, and fails the test
// with describe's answer at that moment. (require.Eventually's message is
// built before the wait, so it shows the state the wait started from.)
func until(t *testing.T, d time.Duration, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "not within "+d.String(), describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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
	until(t, 10*time.Second, func() bool { return c.FenceRepairs() > before },
		func() string { return fmt.Sprintf("the loss was seen and repaired: %+v", c.Masters()[i]) })
	st := c.Masters()[i]
	assert.LessOrEqual(t, st.QuarantineLeft, bound, "the quarantine after the repair is within the bound: %s", st.QuarantineReason)
	until(t, 4*bound+10*time.Second, func() bool { return c.Masters()[i].Counting },
		func() string { return fmt.Sprintf("counts again after its quarantine: %+v", c.Masters()[i]) })
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
			lock, err := c.Acquire(context.Background(), newKey(t), time.Second, WithWait(10*time.Second))
			require.NoError(t, err)
			assert.EqualValues(t, 1, lock.Fence(), "the first fence of the deployment")
		})
	}
}

// TestLossAfterTrafficCountsAgain: the same losses with a lock granted
// before them: the master counts again once that lock has ended (the
// others' lease horizon), not after max TTL (an hour here).
func TestLossAfterTrafficCountsAgain(t *testing.T) {
	const ttl = 2 * time.Second
	for _, fault := range []string{"restart", "flushall"} {
		t.Run(fault, func(t *testing.T) {
			c, _ := brandNewClient(t, WithMaxTTL(time.Hour), WithHealthInterval(100*time.Millisecond))
			key := newKey(t)
			first, err := c.Acquire(context.Background(), key, ttl, WithWait(10*time.Second))
			require.NoError(t, err)
			before := c.FenceRepairs()
			switch fault {
			case "restart":
				restartEmpty(t, 0)
			case "flushall":
				require.NoError(t, direct(t)[0].FlushAll(context.Background()).Err())
			}
			countsAgainWithin(t, c, 0, before, ttl+time.Second)
			next, err := c.Acquire(context.Background(), key, time.Second, WithWait(10*time.Second))
			require.NoError(t, err)
			assert.Greater(t, next.Fence(), first.Fence())
		})
	}
}

// TestDaemonRestartMidRepair: a Client that saw master 0 lose its data
// stops before it repaired it. What it knew of the loss dies with it, and a
// repair is one script (counter, horizon and marker at once), so the
// master is left as after a loss nobody saw: its marker missing while a
// quorum have theirs. A Client started later repairs it from that quorum
// and counts it once the lock granted before the loss has ended.
func TestDaemonRestartMidRepair(t *testing.T) {
	const ttl = 2 * time.Second
	a, all := brandNewClient(t, WithMaxTTL(time.Hour))
	_, err := a.Acquire(context.Background(), newKey(t), ttl, WithWait(10*time.Second))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	restartEmpty(t, 0)

	b := sameDeployment(t, all...)
	countsAgainWithin(t, b, 0, 0, ttl+time.Second)
	assert.EqualValues(t, 1, b.DataLosses()[LossStateMissing], "found on the master itself: %v", b.DataLosses())
}

// TestDaemonRestartAfterARepair: a Client repaired master 0 (its repair
// marker carries the end of its quarantine) and stops; a Client started
// during that quarantine keeps the master out until that end, then counts
// it.
func TestDaemonRestartAfterARepair(t *testing.T) {
	const ttl = 3 * time.Second
	a, all := brandNewClient(t, WithMaxTTL(time.Hour), WithHealthInterval(100*time.Millisecond))
	lock, err := a.Acquire(context.Background(), newKey(t), ttl, WithWait(10*time.Second))
	require.NoError(t, err)
	restartEmpty(t, 0)
	require.Eventually(t, func() bool { return a.FenceRepairs() > 0 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, a.Close())

	b := sameDeployment(t, all...)
	if st := b.Masters()[0]; time.Now().Before(lock.ValidUntil()) {
		assert.False(t, st.Counting, "kept out while the lock granted before the loss stands: %+v", st)
	}
	st := b.Masters()[0]
	assert.LessOrEqual(t, st.QuarantineLeft, ttl+time.Second, "the repair marker's end, not max TTL: %s", st.QuarantineReason)
	until(t, 4*ttl+10*time.Second, func() bool { return b.Masters()[0].Counting }, func() string { return fmt.Sprintf("%+v", b.Masters()[0]) })
}

// TestTwoDaemonsCreateOneDeployment: two Clients start at once on masters
// that carry no deployment yet; one may find the other's markers half
// written. Both count every master within a few rounds, and keep counting.
func TestTwoDaemonsCreateOneDeployment(t *testing.T) {
	for range 5 {
		marker := "marker:" + newKey(t)
		opts := []Option{WithMarkerKey(marker), WithFenceKey(marker + ":fence"), WithHealthInterval(50 * time.Millisecond), WithPerMasterTimeout(500 * time.Millisecond), WithMaxTTL(time.Hour)}
		var cs [2]*Client
		var wg sync.WaitGroup
		for i := range cs {
			wg.Go(func() {
				c, err := New(masterOptions(), opts...)
				assert.NoError(t, err)
				cs[i] = c
			})
		}
		wg.Wait()
		for _, c := range cs {
			require.NotNil(t, c)
			t.Cleanup(func() { c.Close() })
		}
		// Both count every master, and agree with the masters on every
		// marker: one Client may have found the other's markers half
		// written and repaired the rest, which the other then adopts (with
		// a quarantine of a few milliseconds).
		ctx := context.Background()
		rdbs := direct(t)
		settled := func() bool {
			for i, r := range rdbs {
				v := r.Get(ctx, marker).Val()
				for _, c := range cs {
					if exp := c.masters[i].st.inc.expectedMarker.Load(); exp == nil || *exp != v {
						return false
					}
				}
			}
			return allCounting(cs[0]) && allCounting(cs[1])
		}
		until(t, 10*time.Second+newDeploymentWindow, settled, func() string { return fmt.Sprintf("%v %v", states(cs[0]), states(cs[1])) })
		for _, c := range cs {
			for range 3 {
				c.probeAll()
				c.afterProbes()
				require.True(t, allCounting(c), "keeps counting: %v", states(c))
			}
		}
		lock, err := cs[0].Acquire(ctx, newKey(t), time.Second, WithWait(10*time.Second))
		require.NoError(t, err)
		released, err := cs[1].Release(ctx, lock.Key(), lock.Token())
		require.NoError(t, err)
		assert.GreaterOrEqual(t, released, 3, "released through the other Client on a quorum")
	}
}

// TestNewDeploymentHalfWrittenOnAQuorum: a Client that starts while
// another is creating the deployment finds fresh markers on a quorum of
// the masters (three of five) and none yet on the other two. It waits for
// them (MasterWaiting, no loss, no repair; at most creationGrace, after
// which TestMarkerRule's loss applies) and counts them once their markers
// are written. It took them for masters that lost their data
// while unwatched and repaired them, and the idempotency records then
// left them out for the longest retention (7 days by default): 5 of 20
// starts of two daemons at once in a black-box pass.
func TestNewDeploymentHalfWrittenOnAQuorum(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	fence := marker + ":fence"
	opts := []Option{WithMarkerKey(marker), WithFenceKey(fence), WithHealthInterval(50 * time.Millisecond), WithPerMasterTimeout(500 * time.Millisecond), WithMaxTTL(time.Hour)}
	creator, err := New(masterOptions(), opts...)
	require.NoError(t, err)
	require.NoError(t, creator.Close())
	// Masters 3 and 4 "not written yet": their deployment keys are taken
	// away, to be put back as the creator would write them.
	rdbs := direct(t)
	type saved struct {
		key  string
		dump string
	}
	var kept [5][]saved
	for _, i := range []int{3, 4} {
		keys, err := rdbs[i].Keys(ctx, marker+"*").Result()
		require.NoError(t, err)
		require.Contains(t, keys, marker)
		for _, k := range keys {
			d, err := rdbs[i].Dump(ctx, k).Result()
			require.NoError(t, err)
			kept[i] = append(kept[i], saved{k, d})
			require.NoError(t, rdbs[i].Del(ctx, k).Err())
		}
	}
	// A health timeout of 2 s: it waits up to 5 × 2 s (creationGrace) for
	// the markers, far longer than this test takes to put them back.
	c, err := New(masterOptions(), append(opts, WithHealthTimeout(2*time.Second))...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	for range 3 {
		c.probeAll()
		c.afterProbes()
	}
	for _, i := range []int{3, 4} {
		st := c.Masters()[i]
		assert.Equal(t, MasterWaiting, st.State, "master %d: %s", i, st.QuarantineReason)
		assert.Contains(t, st.QuarantineReason, "a new deployment is being created by another client (3 of 5")
	}
	assert.Zero(t, totalLosses(c), "no loss: %v", c.DataLosses())
	for _, i := range []int{3, 4} {
		assert.Zero(t, rdbs[i].Exists(ctx, marker, fence).Val(), "master %d: nothing of the deployment written while waiting", i)
		for _, k := range kept[i] {
			if rdbs[i].Exists(ctx, k.key).Val() == 1 {
				continue // its own max TTL registration, written every probe
			}
			require.NoError(t, rdbs[i].Restore(ctx, k.key, 0, k.dump).Err())
		}
	}
	until(t, 10*time.Second, func() bool { return allCounting(c) }, func() string { return fmt.Sprintf("%v %+v", states(c), c.Masters()[3]) })
	assert.Zero(t, totalLosses(c), "no loss: %v", c.DataLosses())
	assert.Zero(t, c.FenceRepairs(), "no repair")
}

func allCounting(c *Client) bool {
	for _, st := range c.Masters() {
		if !st.Counting {
			return false
		}
	}
	return true
}

// TestWaitingForAClockReadingCountsAgain: a master whose clock the first
// probe could not read (its TIME dropped) waits, with the reason shown,
// and counts once a probe reads it.
func TestWaitingForAClockReadingCountsAgain(t *testing.T) {
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	p := newTimeDropper(t, servers[0].Addr())
	opts := masterOptions()
	opts[0].Addr = p.addr()
	p.on.Store(true)
	c, err := New(opts, WithMarkerKey(marker), WithHealthInterval(50*time.Millisecond), WithPerMasterTimeout(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	// Under load the first probe may time out altogether (down); once one
	// answers, with its TIME dropped, the master waits.
	until(t, 10*time.Second, func() bool {
		st := c.Masters()[0]
		return st.State == MasterWaiting && strings.Contains(st.QuarantineReason, "clock has not been read")
	}, func() string { return fmt.Sprintf("%+v", c.Masters()[0]) })
	require.NotZero(t, p.hit.Load(), "the probes' TIME was dropped")
	p.on.Store(false)
	until(t, 10*time.Second, func() bool { return c.Masters()[0].Counting }, func() string { return fmt.Sprintf("%+v", c.Masters()[0]) })
}

// fullMemory is a maxmemory below what an empty redis-server uses (about
// 1 MB): with noeviction, every write is refused.
const fullMemory = "100000"

// TestOOMCountsAgain: a master whose memory is full (maxmemory under
// noeviction) refuses writes, says so with the operator's step, and votes
// for writes again once a probe finds memory below the limit.
func TestOOMCountsAgain(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, WithHealthInterval(50*time.Millisecond))
	r := direct(t)[0]
	policy := r.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]
	t.Cleanup(func() {
		r.ConfigSet(ctx, "maxmemory", "0")
		r.ConfigSet(ctx, "maxmemory-policy", policy)
	})
	require.NoError(t, r.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", fullMemory).Err())
	until(t, 10*time.Second, func() bool { return c.Masters()[0].State == MasterOOM }, func() string { return fmt.Sprintf("%+v", c.Masters()[0]) })
	assert.Contains(t, c.Masters()[0].WriteRefusal, "raise maxmemory")
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", "0").Err())
	until(t, 10*time.Second, func() bool { return c.Masters()[0].State == MasterUp }, func() string { return fmt.Sprintf("%+v", c.Masters()[0]) })
	lock, err := c.Acquire(ctx, newKey(t), time.Second, WithWait(10*time.Second))
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
}

// TestClockHoldCountsAgain: master 4's clock jumps 30s ahead of the
// others': it is held out, with the operator's step in the reason. Once
// its clock is right again it counts after the others' lease horizon
// (the locks it may have expired early), not after max TTL (an hour).
func TestClockHoldCountsAgain(t *testing.T) {
	opts, _, clock := skewedMasters(t)
	c := clockClient(t, opts, WithPerMasterTimeout(200*time.Millisecond), WithHealthInterval(50*time.Millisecond), WithMaxTTL(time.Hour))
	_, err := c.Acquire(context.Background(), "clock:"+t.Name(), 2*time.Second, WithWait(10*time.Second))
	require.NoError(t, err)
	require.NoError(t, clock.Jump(30*time.Second))
	until(t, 10*time.Second, func() bool { return c.masters[4].st.conds.has(condClockHold) }, func() string { return fmt.Sprintf("%+v", c.Masters()[4]) })
	st := c.Masters()[4]
	assert.Equal(t, MasterQuarantined, st.State)
	assert.Contains(t, st.QuarantineReason, "fix its clock")
	require.NoError(t, clock.Reset())
	until(t, 10*time.Second, func() bool {
		return !c.masters[4].st.conds.has(condClockHold) && !c.masters[4].st.conds.has(condHorizonPending)
	}, func() string { return fmt.Sprintf("%+v", c.Masters()[4]) })
	st = c.Masters()[4]
	assert.LessOrEqual(t, st.QuarantineLeft, 3*time.Second, "the others' lease horizon, not max TTL: %s", st.QuarantineReason)
	until(t, 30*time.Second, func() bool { return c.Masters()[4].Counting }, func() string { return fmt.Sprintf("%+v", c.Masters()[4]) })
}

// TestWaitingForAClockComparisonCountsAgain: a Client compares each
// master's clock with the others' before it counts it, from readings with
// short round trips. With three masters slow to answer (100 ms each way
// behind a proxy) no round has a quorum of such readings: every master
// waits, and says what for. Once they answer fast again, all count.
func TestWaitingForAClockComparisonCountsAgain(t *testing.T) {
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	opts := masterOptions()
	var slow []*delayProxy
	for i := range 3 {
		p := startDelayProxy(t, servers[i].Addr())
		p.set(100*time.Millisecond, 100*time.Millisecond)
		opts[i].Addr = p.Addr()
		slow = append(slow, p)
	}
	c, err := New(opts, WithMarkerKey(marker), WithPerMasterTimeout(200*time.Millisecond), WithHealthInterval(50*time.Millisecond), WithHealthTimeout(3*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	st := c.Masters()[4]
	assert.Equal(t, MasterWaiting, st.State, "%+v", st)
	assert.Contains(t, st.QuarantineReason, "not been compared")
	assert.False(t, c.QuorumAvailable())
	for _, p := range slow {
		p.set(0, 0)
	}
	until(t, 20*time.Second, func() bool { return allCounting(c) }, func() string { return fmt.Sprintf("%v", states(c)) })
}

// TestRepairRefusedForOOMSaysSo: master 0 loses its marker while its
// memory is full (maxmemory under noeviction): the repair's writes are
// refused, so it stays repairing, and its reason names the operator's
// step. Once memory is raised, the next round repairs it and it counts.
func TestRepairRefusedForOOMSaysSo(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t, WithHealthInterval(50*time.Millisecond), WithMaxTTL(time.Hour))
	r := direct(t)[0]
	policy := r.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]
	t.Cleanup(func() {
		r.ConfigSet(ctx, "maxmemory", "0")
		r.ConfigSet(ctx, "maxmemory-policy", policy)
	})
	require.NoError(t, r.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", fullMemory).Err())
	before := c.FenceRepairs()
	require.NoError(t, r.Del(ctx, c.opts.markerKey).Err())
	until(t, 10*time.Second, func() bool {
		st := c.Masters()[0]
		return st.State == MasterRepairing && strings.Contains(st.QuarantineReason, "maxmemory")
	}, func() string { return fmt.Sprintf("%+v", c.Masters()[0]) })
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", "0").Err())
	countsAgainWithin(t, c, 0, before, 2*time.Second)
	assert.NotContains(t, c.Masters()[0].QuarantineReason, "maxmemory", "the step no longer applies")
}

// TestClockHoldReasonOutlivesLaterQuarantines: master 4's clock runs fast
// (a drift, not one step): it is held out once it disagrees, and each
// probe after that sees its clock jump forward again, a quarantine of its
// own whose reason replaced the hold's. The reason must keep naming the
// hold and the operator's step for as long as the hold lasts: a
// black-box pass saw "wall clock jumped forward by 50ms … counts again
// when every lock it may have held has ended" with 0 s left, on a master
// that never came back until its clock was fixed.
func TestClockHoldReasonOutlivesLaterQuarantines(t *testing.T) {
	opts, _, clock := skewedMasters(t)
	c := clockClient(t, opts, WithPerMasterTimeout(200*time.Millisecond), WithHealthInterval(50*time.Millisecond), WithMaxTTL(time.Hour))
	_, err := c.Acquire(context.Background(), "clock:"+t.Name(), 2*time.Second, WithWait(10*time.Second))
	require.NoError(t, err)
	require.NoError(t, clock.SetRate(3))
	until(t, 10*time.Second, func() bool { return c.masters[4].st.conds.has(condClockHold) }, func() string { return fmt.Sprintf("%+v", c.Masters()[4]) })
	q := c.Quarantines()
	until(t, 10*time.Second, func() bool { return c.Quarantines() > q+1 }, func() string {
		return fmt.Sprintf("later probes quarantine it again (a forward jump each): %+v", c.Masters()[4])
	})
	for range 5 {
		c.probeAll()
		c.afterProbes()
		st := c.Masters()[4]
		require.True(t, c.masters[4].st.conds.has(condClockHold), "still held: %+v", st)
		assert.Equal(t, MasterQuarantined, st.State)
		assert.Contains(t, st.QuarantineReason, "fix its clock (NTP)", "the hold and the operator's step stay named")
	}
	require.NoError(t, clock.Reset())
	until(t, 10*time.Second, func() bool { return !c.masters[4].st.conds.has(condClockHold) }, func() string { return fmt.Sprintf("%+v", c.Masters()[4]) })
	assert.NotContains(t, c.Masters()[4].QuarantineReason, "fix its clock (NTP)", "the hold is over: %+v", c.Masters()[4])
}

package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// TestFencesIncreaseThroughRestarts: 1,000 sequential acquire/release cycles
// of one key while masters are killed and restarted empty, at most two at
// a time: every granted fence is strictly greater than the one before.
func TestFencesIncreaseThroughRestarts(t *testing.T) {
	c := newClient(t, WithMaxTTL(400*time.Millisecond), WithHealthInterval(10*time.Millisecond))
	ctx := context.Background()
	key := newKey(t)

	stop := make(chan struct{})
	var faults sync.WaitGroup
	var mu sync.Mutex
	faulty := map[int]bool{}
	restarts := 0
	for range 2 { // two fault injectors: at most two masters faulty at once
		faults.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(20+rand.IntN(30)) * time.Millisecond):
				}
				mu.Lock()
				i := rand.IntN(5)
				if faulty[i] {
					mu.Unlock()
					continue
				}
				faulty[i] = true
				restarts++
				mu.Unlock()
				assert.NoError(t, servers[i].Kill())
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				assert.NoError(t, servers[i].Restart())
				// A restarted master stays faulty until it counts again
				// (quarantine over, counter repaired): at most two at a time.
				deadline := time.Now().Add(10 * time.Second)
				for !c.Masters()[i].Counting && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				mu.Lock()
				delete(faulty, i)
				mu.Unlock()
			}
		})
	}

	var last int64
	granted := 0
	failures := 0
	enough := func() bool { // 1,000 grants spanning at least 8 restarts
		mu.Lock()
		defer mu.Unlock()
		return granted >= 1000 && restarts >= 8
	}
	for !enough() {
		lock, err := c.Acquire(ctx, key, 300*time.Millisecond, WithWait(5*time.Second))
		if err != nil {
			require.NotErrorIs(t, err, ErrInvalid)
			failures++
			require.Less(t, failures, 200, "with at most two faulty masters, acquires must mostly succeed: %v", err)
			continue
		}
		require.Greater(t, lock.Fence(), last, "fence went backwards after %d grants", granted)
		last = lock.Fence()
		granted++
		_ = lock.Release(ctx)
	}
	close(stop)
	faults.Wait()
	t.Logf("%d grants (%d failed attempts), last fence %d, %d restarts, %d fencing counters repaired", granted, failures, last, restarts, c.FenceRepairs())
	assert.GreaterOrEqual(t, restarts, 8, "the test must actually restart masters")
	assert.Positive(t, c.FenceRepairs(), "restarted masters must have been repaired")
}

// takeFences acquires and releases key n times and returns the last fence.
func takeFences(t *testing.T, c *Client, key string, n int) int64 {
	t.Helper()
	ctx := context.Background()
	var fence int64
	for range n {
		lock, err := c.Acquire(ctx, key, time.Second)
		require.NoError(t, err)
		fence = lock.Fence()
		require.NoError(t, lock.Release(ctx))
	}
	return fence
}

// restartEmpty restarts masters idx one after another (data lost) and
// pauses the masters in pause, all undone at cleanup.
func restartEmpty(t *testing.T, idx ...int) {
	t.Helper()
	for _, i := range idx {
		require.NoError(t, servers[i].Restart())
	}
}

// fenceScenario: a key is locked and released ten times (fence ≥ 10); then
// masters 0, 1, 2 restart empty and 3, 4 pause, so the only masters that
// can vote are the three that lost their counters.
func fenceScenario(t *testing.T, opts ...Option) (*Client, string, int64, error) {
	c := newClient(t, append([]Option{WithHealthInterval(20 * time.Millisecond)}, opts...)...)
	ctx := context.Background()
	key := newKey(t)
	fence := takeFences(t, c, key, 10)
	require.GreaterOrEqual(t, fence, int64(10))
	// 3 and 4 first: while they still count, the health loop would copy
	// their counter to the restarted masters (spreadFence) and hide the
	// negative control's bug.
	withMasters(t, "pause", 3, 4)
	require.Eventually(t, func() bool {
		st := c.Masters()
		return !st[3].Up && !st[4].Up
	}, 10*time.Second, 10*time.Millisecond, "the probes must see 3 and 4 stop answering")
	restartEmpty(t, 0, 1, 2)
	// Until a probe saw them back up, the three would be refused as known
	// down; the probe round also waits out the paused masters' timeout.
	require.Eventually(t, func() bool {
		st := c.Masters()
		return st[0].Up && st[1].Up && st[2].Up
	}, 10*time.Second, 10*time.Millisecond)
	// As another daemon, which did not issue the fences above: this
	// Client would continue above its own (issuedFloor) and hide the bug
	// the negative control shows.
	c.fenceIssued.Store(0)
	lock, err := c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
	if err != nil {
		return c, key, fence, err
	}
	return c, key, lock.Fence(), nil
}

// TestFenceNotResetByDataLoss: with the protection on, a quorum of masters
// that lost their counters cannot grant a lock (they are quarantined and
// cannot be repaired from a quorum); the negative control, with protection
// off, shows the test sees the bug: a fence back at 1.
func TestFenceNotResetByDataLoss(t *testing.T) {
	t.Run("protected", func(t *testing.T) {
		_, _, _, err := fenceScenario(t)
		require.ErrorIs(t, err, ErrQuorumUnavailable)
		require.ErrorIs(t, err, ErrMasterQuarantined)
	})
	t.Run("quarantine off: the vote scripts still refuse the empty masters", func(t *testing.T) {
		_, _, _, err := fenceScenario(t, withGuardOff(guardswitch.Quarantine))
		require.ErrorIs(t, err, ErrMasterDataLost)
	})
	t.Run("negative control: quarantine and data-loss check off", func(t *testing.T) {
		_, _, fence, err := fenceScenario(t, withGuardOff(guardswitch.Quarantine), withGuardOff(guardswitch.DataLossCheck), withGuardOff(guardswitch.GrantedLock))
		require.NoError(t, err, "without protection the empty masters grant the lock")
		assert.Equal(t, int64(1), fence, "and the fence restarts from zero: the bug the protection prevents")
	})
}

// quarantineScenario holds a lock with ttl 60s, restarts three masters empty
// one after another, and tries a second acquire of the same key.
func quarantineScenario(t *testing.T, opts ...Option) error {
	c := newClient(t, append([]Option{WithHealthInterval(20 * time.Millisecond), WithMaxTTL(2 * time.Minute)}, opts...)...)
	ctx := context.Background()
	key := newKey(t)
	first, err := c.Acquire(ctx, key, 60*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = first.Release(context.Background()) })
	for _, i := range []int{0, 1, 2} {
		require.NoError(t, servers[i].Restart())
		time.Sleep(50 * time.Millisecond)
	}
	// Until a probe saw them back, the restarted masters would be refused
	// as known down, which would hide the negative control's bug.
	require.Eventually(t, func() bool {
		st := c.Masters()
		return st[0].Up && st[1].Up && st[2].Up
	}, 10*time.Second, 10*time.Millisecond)
	require.Greater(t, first.Validity(), 50*time.Second, "the first lock is still valid")
	_, err = c.Acquire(ctx, key, 60*time.Second, WithRetry(NoRetry()))
	return err
}

// TestDelayedRestartQuarantine is the Redis page's delayed-restart argument,
// enforced by the Client: three masters restarting empty while a lock is
// held must not let a second client in. The negative control disables the
// quarantine and asserts the double grant happens.
func TestDelayedRestartQuarantine(t *testing.T) {
	t.Run("quarantine on: no double grant", func(t *testing.T) {
		err := quarantineScenario(t)
		require.Error(t, err)
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, err, ErrMasterQuarantined, "refused because the restarted masters do not count")
	})
	t.Run("quarantine off: the vote scripts still refuse the empty masters", func(t *testing.T) {
		err := quarantineScenario(t, withGuardOff(guardswitch.Quarantine))
		require.ErrorIs(t, err, ErrMasterDataLost)
	})
	t.Run("negative control: quarantine and data-loss check off grant twice", func(t *testing.T) {
		err := quarantineScenario(t, withGuardOff(guardswitch.Quarantine), withGuardOff(guardswitch.DataLossCheck), withGuardOff(guardswitch.GrantedLock))
		require.NoError(t, err, "the test must be able to see the double grant")
	})
}

// TestRestartDetectedOnReconnect: a master that restarted is quarantined by
// the run_id check on the new connection, before any health probe runs
// (probes are an hour apart here): its vote never counts.
func TestRestartDetectedOnReconnect(t *testing.T) {
	c := newClient(t, WithHealthInterval(time.Hour))
	ctx := context.Background()
	key := newKey(t)
	lock, err := c.Acquire(ctx, key, time.Second) // every lane connected, run_ids known
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))

	require.NoError(t, servers[0].Restart())
	withMasters(t, "pause", 3, 4)
	// Masters 0, 1, 2 can answer; 0 restarted, so no quorum may count.
	var lastErr error
	via := "new connection"
	for range 3 { // the first try may meet the broken old connection
		if !c.Masters()[0].Up {
			// go-redis redialled the lane while master 0 was down (seen on
			// a loaded machine), so the Client knows it down and sends it
			// nothing until a probe sees it up: with probes an hour apart,
			// run one. The probe then sees the new run_id first.
			via = "health probe"
			c.probeAll()
			c.afterProbes()
		}
		_, lastErr = c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
		require.Error(t, lastErr)
		if errors.Is(lastErr, ErrMasterQuarantined) {
			break
		}
	}
	require.ErrorIs(t, lastErr, ErrMasterQuarantined)
	st := c.Masters()[0]
	assert.Contains(t, []MasterState{MasterQuarantined, MasterRepairing}, st.State)
	assert.Contains(t, st.QuarantineReason, via)
}

// TestMarkerRule: a master that lost its data while no Client watched is
// quarantined by the next Client at startup, because its marker is gone
// while a quorum of the others have theirs; a brand-new deployment (no
// marker anywhere) is not.
func TestMarkerRule(t *testing.T) {
	ctx := context.Background()
	rdbs := direct(t)
	marker := "marker:" + newKey(t)
	first, err := New(masterOptions(), WithHealthInterval(10*time.Millisecond), WithMarkerKey(marker))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, r := range rdbs {
			if r.Exists(ctx, marker).Val() != 1 {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "a new deployment gets markers everywhere")
	for _, st := range first.Masters() {
		assert.Equal(t, MasterUp, st.State, "brand-new deployment: nobody quarantined")
	}
	require.NoError(t, first.Close())

	require.NoError(t, servers[2].Restart()) // lost data while unwatched
	second := newClient(t, WithHealthInterval(10*time.Millisecond), WithMarkerKey(marker))
	require.Eventually(t, func() bool { return second.Masters()[2].State != MasterUp && second.Masters()[2].QuarantineLeft > 0 }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, second.Masters()[2].QuarantineReason, "marker")
	for i, st := range second.Masters() {
		if i != 2 {
			assert.Equal(t, MasterUp, st.State, "master %d", i)
		}
	}
}

// TestSameServerTwiceIsAnError: two addresses that reach the same server
// (same run_id) are refused at startup.
func TestSameServerTwiceIsAnError(t *testing.T) {
	opts := masterOptions()
	opts[4] = &redis.Options{Addr: "localhost:" + portOf(servers[0].Addr())}
	c, err := New(opts)
	require.NoError(t, err)
	defer c.Close()
	err = c.CheckMasters(context.Background())
	require.ErrorIs(t, err, ErrSameServer)
	assert.Contains(t, err.Error(), "masters[0]")
	assert.Contains(t, err.Error(), "masters[4]")
}

// TestSameServerTwiceDoesNotVote: a Client used without CheckMasters (a
// library caller, or a name that came to reach the same server after the
// start) does not count the later address's votes, and says why in its
// status and warnings: two of five addresses on one server would let an
// extend or a fence write-back count that server twice. Found by a
// black-box pass: all five were "up, counting" with no warning. Apart
// again (the name points elsewhere), it votes again.
func TestSameServerTwiceDoesNotVote(t *testing.T) {
	opts := masterOptions()
	opts[3] = &redis.Options{Addr: "localhost:" + portOf(servers[0].Addr())}
	opts[4] = &redis.Options{Addr: "localhost:" + portOf(servers[1].Addr())}
	c, err := New(opts, WithHealthInterval(50*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	require.Eventually(t, func() bool {
		st := c.Masters()
		return st[0].State == MasterUp && st[1].State == MasterUp && st[2].State == MasterUp &&
			st[3].State == MasterWaiting && st[4].State == MasterWaiting
	}, 10*time.Second, 10*time.Millisecond, "%v", states(c))
	for i, j := range map[int]int{3: 0, 4: 1} {
		st := c.Masters()[i]
		assert.False(t, st.Counting)
		assert.Contains(t, st.QuarantineReason, "same server")
		require.Len(t, st.Warnings, 1, "master %d", i)
		assert.Contains(t, st.Warnings[0], fmt.Sprintf("same-server: the same server (run_id %s) as masters[%d]", st.RunID[:8], j))
	}
	assert.True(t, c.QuorumAvailable(), "three servers count")
	ctx := context.Background()
	l, err := c.Acquire(ctx, newKey(t), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return addr
}

// TestEvictionPolicyWarns: an evicting maxmemory-policy is reported.
func TestEvictionPolicyWarns(t *testing.T) {
	ctx := context.Background()
	r := direct(t)[1]
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", "100mb").Err())
	require.NoError(t, r.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	t.Cleanup(func() {
		r.ConfigSet(ctx, "maxmemory", "0")
		r.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	})
	c := newClient(t, WithHealthInterval(10*time.Millisecond))
	require.Eventually(t, func() bool { return len(c.Masters()[1].Warnings) > 0 }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, c.Masters()[1].Warnings[0], "allkeys-lru")
	assert.Empty(t, c.Masters()[0].Warnings)
}

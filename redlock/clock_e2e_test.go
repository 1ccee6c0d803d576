package redlock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/clockshim"
	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// skewedMasters starts five masters of their own for a clock test: four
// plain, the last under the gettimeofday shim (Redis expires keys by
// gettimeofday), controlled by the returned Clock.
func skewedMasters(t *testing.T) ([]*redis.Options, []*redis.Client, *clockshim.Clock) {
	t.Helper()
	so, err := clockshim.Build(t.TempDir())
	if errors.Is(err, clockshim.ErrNoCompiler) {
		t.Skip("clock test needs a C compiler for the gettimeofday shim:", err)
	}
	require.NoError(t, err)
	clock, err := clockshim.NewClock(filepath.Join(t.TempDir(), "clock"))
	require.NoError(t, err)
	plain, err := redisproc.StartN(4, redisproc.Options{})
	require.NoError(t, err)
	skewed, err := redisproc.Start(redisproc.Options{LDPreload: so, Env: clock.Env()})
	if err != nil {
		redisproc.StopAll(plain)
		require.NoError(t, err)
	}
	all := append(plain, skewed)
	t.Cleanup(func() { assert.NoError(t, redisproc.StopAll(all)) })
	var opts []*redis.Options
	var rdbs []*redis.Client
	for _, s := range all {
		opts = append(opts, &redis.Options{Addr: s.Addr()})
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { r.Close() })
		rdbs = append(rdbs, r)
	}
	return opts, rdbs, clock
}

// clockScenario: lock L1 is taken on exactly masters 2, 3, 4 (0 and 1 hold a
// short foreign key), then master 4's wall clock jumps forward 30s, which
// expires L1's key there early. Once 0 and 1 are free, a second acquire can
// reach a quorum {0, 1, 4} unless master 4 is excluded.
func clockScenario(t *testing.T, guard bool) (*Lock, *Client, error) {
	opts, rdbs, clock := skewedMasters(t)
	ctx := context.Background()
	copts := []Option{WithPerMasterTimeout(500 * time.Millisecond), WithHealthInterval(20 * time.Millisecond)}
	if !guard {
		copts = append(copts, withGuardOff(guardswitch.ClockGuard), withGuardOff(guardswitch.GrantedLock))
	}
	c, err := New(opts, copts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.Eventually(t, func() bool { return c.QuorumAvailable() && c.Masters()[4].CheckedAt.After(time.Time{}) }, 5*time.Second, 10*time.Millisecond)

	key := "clock:" + t.Name()
	for _, i := range []int{0, 1} {
		require.NoError(t, rdbs[i].Set(ctx, key, "foreign", 400*time.Millisecond).Err())
	}
	first, err := c.Acquire(ctx, key, 20*time.Second)
	require.NoError(t, err)

	// A key set like Redlock's, to watch it expire early on the skewed master.
	require.NoError(t, rdbs[4].Set(ctx, "probe:"+key, "v", 4*time.Second).Err())
	require.NoError(t, rdbs[3].Set(ctx, "probe:"+key, "v", 4*time.Second).Err())
	require.NoError(t, clock.Jump(30*time.Second))
	require.Eventually(t, func() bool { return rdbs[4].Exists(ctx, "probe:"+key).Val() == 0 }, 2*time.Second, 5*time.Millisecond,
		"SET PX 4000 expires early on the master whose clock jumped")
	assert.EqualValues(t, 1, rdbs[3].Exists(ctx, "probe:"+key).Val(), "and not on the others")
	require.Eventually(t, func() bool { return rdbs[4].Exists(ctx, key).Val() == 0 }, 2*time.Second, 5*time.Millisecond)

	if guard {
		require.Eventually(t, func() bool { return c.Masters()[4].State == MasterQuarantined }, 5*time.Second, 10*time.Millisecond)
		assert.Contains(t, c.Masters()[4].QuarantineReason, "jumped forward")
	} else {
		time.Sleep(200 * time.Millisecond) // ten probe rounds: the jump is in plain sight
		assert.Equal(t, MasterUp, c.Masters()[4].State)
	}
	require.Eventually(t, func() bool { return rdbs[0].Exists(ctx, key).Val()+rdbs[1].Exists(ctx, key).Val() == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, first.Validity(), 10*time.Second, "the first lock is still valid")
	_, err = c.Acquire(ctx, key, 20*time.Second, WithRetry(NoRetry()))
	return first, c, err
}

// TestClockJumpQuarantine: a master whose wall clock jumps forward is
// quarantined, so the lock it dropped early cannot be granted again. The
// negative control turns the guard off and asserts the double grant.
func TestClockJumpQuarantine(t *testing.T) {
	t.Run("guard on: no double grant", func(t *testing.T) {
		_, _, err := clockScenario(t, true)
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, err, ErrMasterQuarantined)
	})
	t.Run("negative control: guard off grants twice", func(t *testing.T) {
		_, _, err := clockScenario(t, false)
		require.NoError(t, err, "without the guard the early-expired key lets a second holder in")
	})
}

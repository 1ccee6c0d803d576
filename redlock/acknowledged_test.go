package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An operation that answered is seen by the next caller, whichever Client
// or daemon it goes through: Release and Extend answer once every master
// answered (or its per-master timeout passed), as Acquire does with the
// granted-lock check.

// proxiedClient returns a Client over the five test masters, each reached
// through a delayProxy (no delay until the test sets one), with the
// marker key marker planted.
func proxiedClient(t *testing.T, marker string) (*Client, []*delayProxy) {
	t.Helper()
	plantMarker(marker)
	opts := masterOptions()
	proxies := make([]*delayProxy, len(opts))
	for i := range opts {
		proxies[i] = startDelayProxy(t, opts[i].Addr)
		opts[i] = &redis.Options{Addr: proxies[i].Addr()}
	}
	c, err := New(opts, WithMarkerKey(marker), WithPerMasterTimeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, proxies
}

// TestReleasedKeyIsFreeForAnotherClient: once Release returns, every
// master has answered it (or its per-master timeout passed), so a
// contender on other connections wins the key at once. The releasing
// Client reaches master 4 through a proxy that delays its requests by
// 50ms, so its delete there lands after the other four. A Release that
// returned at a quorum's answers left master 4 holding the key and its
// fence record for that while, and the contender's granted-lock check
// (granted.go) rightly refused the grant: a release acknowledged, then
// the key refused to the next caller. Found in CI by two daemons over the
// same masters, one releasing and the other acquiring at once. The
// releasing Client reaches every master through a proxy; the one delayed
// holds the lock's fence record, which is what the check reads.
func TestReleasedKeyIsFreeForAnotherClient(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	a, proxies := proxiedClient(t, marker)
	b := newClient(t, WithMarkerKey(marker))
	until(t, 20*time.Second, func() bool { return allCounting(a) && allCounting(b) }, func() string { return fmt.Sprintf("%v %v", states(a), states(b)) })
	rdbs := direct(t)
	for range 3 {
		key := newKey(t)
		l, err := a.Acquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		settle(t, a, key)
		recorded := -1
		for i, r := range rdbs {
			if r.Exists(ctx, a.fenceRecordKey(key)).Val() == 1 {
				recorded = i
			}
		}
		require.GreaterOrEqual(t, recorded, 0, "a quorum holds the fence record")
		proxies[recorded].set(50*time.Millisecond, 0)
		require.NoError(t, l.Release(ctx))
		proxies[recorded].set(0, 0)
		lb, err := b.Acquire(ctx, key, 10*time.Second, WithRetry(NoRetry()))
		require.NoError(t, err, "the key is free once Release returned")
		require.NoError(t, lb.Release(ctx))
	}
}

// TestStatusAfterAnExtendShowsIt: Client a extends a lock from 5s to 60s
// while its path to masters 3 and 4 is 50ms slow; Client b, slow to
// masters 0 and 1, asks the status at once, so the first three holders it
// hears are 2, 3 and 4. An Extend that answered at a quorum (0, 1, 2)
// left 3 and 4 at the old TTL, and b's status (the shortest TTL among the
// first quorum of holders, never later than the truth) showed the lock
// ending 55s early. Found by a black-box review across two daemons.
func TestStatusAfterAnExtendShowsIt(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	a, slowA := proxiedClient(t, marker)
	b, slowB := proxiedClient(t, marker)
	until(t, 20*time.Second, func() bool { return allCounting(a) && allCounting(b) }, func() string { return fmt.Sprintf("%v %v", states(a), states(b)) })
	key := newKey(t)
	l, err := a.Acquire(ctx, key, 5*time.Second)
	require.NoError(t, err)
	settle(t, a, key)
	for _, i := range []int{3, 4} {
		slowA[i].set(50*time.Millisecond, 0)
	}
	for _, i := range []int{0, 1} {
		slowB[i].set(20*time.Millisecond, 0)
	}
	require.NoError(t, l.Extend(ctx, 60*time.Second))
	st, err := b.Status(ctx, key)
	require.NoError(t, err)
	require.True(t, st.Held)
	assert.Greater(t, st.Validity, 50*time.Second, "the status shows the extend that answered")
}

// TestKeepAliveHoldsWithASlowMaster: Extend waits for every master, and
// master 4 answers 1.5s late (within the 2s per-master timeout, past the
// lock's 1s TTL). The keep-alive's extend ends a little before the
// loss time with a quorum's extend made, so the lock is kept. With the
// extend's deadline at the loss time itself, the loss timer won the race
// against that extend and the lock was declared lost (found by a review).
func TestKeepAliveHoldsWithASlowMaster(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	c, proxies := proxiedClient(t, marker)
	until(t, 20*time.Second, func() bool { return allCounting(c) }, func() string { return fmt.Sprintf("%v", states(c)) })
	l, err := c.Acquire(ctx, newKey(t), time.Second)
	require.NoError(t, err)
	proxies[4].set(1500*time.Millisecond, 0)
	l.KeepAlive(ctx)
	select {
	case <-l.Done():
		t.Fatalf("lost: %v", l.Err())
	case <-time.After(3 * time.Second):
	}
	require.NoError(t, l.Err())
	proxies[4].set(0, 0)
	require.NoError(t, l.Release(ctx))
}

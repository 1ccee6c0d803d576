package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

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
	plantMarker(marker)
	opts := masterOptions()
	proxies := make([]*delayProxy, len(opts))
	for i := range opts {
		proxies[i] = startDelayProxy(t, opts[i].Addr)
		opts[i] = &redis.Options{Addr: proxies[i].Addr()}
	}
	rdbs := direct(t)
	a, err := New(opts, WithMarkerKey(marker), WithPerMasterTimeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	b := newClient(t, WithMarkerKey(marker))
	until(t, 20*time.Second, func() bool { return allCounting(a) && allCounting(b) }, func() string { return fmt.Sprintf("%v %v", states(a), states(b)) })
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

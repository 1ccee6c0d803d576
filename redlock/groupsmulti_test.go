package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupsMultiKeyAcrossGroups: a set with keys on two groups is taken
// in both under one token, all or nothing: a set that meets a held key in
// the second group leaves nothing in the first; the fence reported is
// above every earlier holder's of each key in its own group, and later
// single-key locks in either group get a higher one; the set's release
// by token frees both groups. Overlapping cross-group sets in both orders,
// waiting, under contention: every caller finishes and the history has
// one holder per key and increasing fences.
func TestGroupsMultiKeyAcrossGroups(t *testing.T) {
	srvs, groups := groupsOver(t, 3, "a", "b")
	g, err := NewGroups(groups...)
	require.NoError(t, err)
	ctx := context.Background()
	onA := keysOn(g.Placement(), 0, 2, "test:gmulti")
	onB := keysOn(g.Placement(), 1, 2, "test:gmulti")

	// A fence well above group a's in group b: the set's fence must not
	// go below it for the key of b, nor may a later holder of the key of
	// a go below the set's.
	for range 5 {
		lk, err := g.Acquire(ctx, onB[1], time.Second)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
	}
	before, err := g.Acquire(ctx, onB[0], time.Second)
	require.NoError(t, err)
	require.NoError(t, before.Release(ctx))

	held, err := g.Acquire(ctx, onB[1], 10*time.Second)
	require.NoError(t, err)
	_, err = g.AcquireMulti(ctx, []string{onA[0], onB[1]}, 10*time.Second)
	require.ErrorIs(t, err, ErrLockHeld)
	ra := redis.NewClient(&redis.Options{Addr: srvs[0][0].Addr()})
	defer ra.Close()
	require.Zero(t, ra.Exists(ctx, onA[0]).Val(), "refused in group b: nothing left in group a")
	require.NoError(t, held.Release(ctx))

	set := []string{onB[0], onA[0]}
	ml, err := g.AcquireMulti(ctx, set, 10*time.Second)
	require.NoError(t, err)
	assert.Greater(t, ml.Fence(), before.Fence(), "above the earlier holder of %s in group b", onB[0])
	assert.Equal(t, []string{"a", "b"}, ml.Groups(), "groups taken in the order of their names")
	ms, err := g.StatusMulti(ctx, set)
	require.NoError(t, err)
	assert.True(t, ms.Held)
	_, err = g.Acquire(ctx, onA[0], time.Second)
	require.ErrorIs(t, err, ErrLockHeld)
	lk, err := g.ExtendMulti(ctx, set, ml.Token(), 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, set, lk.Keys())
	n, err := g.ReleaseMulti(ctx, set, ml.Token())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 4, "a quorum of each group's three masters")
	after, err := g.Acquire(ctx, onA[0], time.Second)
	require.NoError(t, err)
	assert.Greater(t, after.Fence(), ml.Fence(), "the set's fence was written back to group a: later fences there are higher")
	require.NoError(t, after.Release(ctx))

	// Contention across groups, both orders.
	sets := [][]string{{onA[0], onB[0]}, {onB[0], onA[0]}, {onA[1], onB[0]}, {onA[0], onA[1], onB[1]}}
	h := &history{}
	var wg sync.WaitGroup
	for i := range 12 {
		s := sets[i%len(sets)]
		wg.Go(func() {
			for range 4 {
				ml, err := g.AcquireMulti(ctx, s, 2*time.Second, WithWait(30*time.Second))
				if !assert.NoError(t, err, "%v", s) {
					return
				}
				start := time.Now()
				time.Sleep(time.Millisecond)
				end := time.Now()
				if v := ml.ValidUntil(); v.Before(end) {
					end = v
				}
				for _, k := range s {
					h.add(hold{key: k, fence: ml.Fence(), start: start, end: end, phase: "set"})
				}
				assert.NoError(t, ml.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.Empty(t, h.violations())
	assert.Len(t, h.holds, 4*(2+2+2+3)*12/4)
}

package redlock

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stickLane pauses master i and leaves key's lane on it stuck on a status
// read past the per-master timeout: what the lane is sent next it answers
// at once (ErrMasterBusy, or ErrMasterDown once the health loop counts the
// pause) without sending it. The returned func resumes the master (once).
func stickLane(t *testing.T, c *Client, i int, key string) (resume func()) {
	t.Helper()
	require.NoError(t, servers[i].Pause())
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			assert.NoError(t, servers[i].Resume())
		}
	}
	t.Cleanup(resume)
	_, _ = c.Status(context.Background(), key)
	lane := c.masters[i].lanes[c.laneOf(key)]
	require.Eventually(t, func() bool {
		bs := lane.busySince.Load()
		return bs != 0 && time.Now().UnixNano()-bs > int64(c.opts.perMasterTimeout)
	}, 5*time.Second, 5*time.Millisecond, "master %d's lane is stuck on the paused master", i)
	return resume
}

// queuedRelease reports whether master i's lane for key holds a queued
// release of key by token.
func queuedRelease(c *Client, i int, key, token string) bool {
	lane := c.masters[i].lanes[c.laneOf(key)]
	lane.mu.Lock()
	defer lane.mu.Unlock()
	return slices.ContainsFunc(lane.queue, func(q *call) bool {
		return q.script == releaseScript && len(q.keys) > 0 && q.keys[0] == key &&
			(q.compact && q.keys[1] == token || len(q.args) > 0 && q.args[0] == token)
	})
}

// unreleased reports whether master i keeps key's release by token for the
// health loop (releaseLater).
func unreleased(c *Client, i int, key, token string) bool {
	u := &c.masters[i].unreleased
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.m[[2]string{key, token}]
	return ok
}

// TestReleaseDoesNotQueueWhereTheVotesNeverWent: a lock granted while a
// master's lane was stuck never sent that master its vote; its release is
// not queued behind the stuck pipeline (one queued release per lock for as
// long as a paused master stays paused: the daemon's memory), but kept for
// the health loop. The control — the same lock with its record forgotten,
// as before the change — queues it.
func TestReleaseDoesNotQueueWhereTheVotesNeverWent(t *testing.T) {
	c := newClient(t, WithPerMasterTimeout(100*time.Millisecond))
	ctx := context.Background()
	key := newKey(t)
	resume := stickLane(t, c, 0, key)

	l, err := c.Acquire(ctx, key, 10*time.Second)
	require.NoError(t, err, "four masters grant")
	require.EqualValues(t, 1, c.unreached.n.Load(), "the grant records the master its vote never reached")
	require.NoError(t, l.Release(ctx))
	assert.EqualValues(t, 0, c.unreached.n.Load(), "the release takes the record")
	assert.False(t, queuedRelease(c, 0, key, l.token), "the release waits on no stuck lane")
	assert.True(t, unreleased(c, 0, key, l.token), "it is kept for the health loop instead")

	// Control: the record forgotten, the release must be sent (mustSend)
	// and is queued behind the stuck pipeline, as every release was.
	key2 := sameLaneKey(c, key)
	l2, err := c.Acquire(ctx, key2, 10*time.Second)
	require.NoError(t, err)
	c.unreached.forget(l2.token)
	require.NoError(t, l2.Release(ctx))
	assert.True(t, queuedRelease(c, 0, key2, l2.token), "without the record the release is queued behind the stuck pipeline")

	resume()
	rdbs := direct(t)
	for i, r := range rdbs {
		require.Eventually(t, func() bool {
			n, err := r.Exists(ctx, key, key2, c.fenceRecordKey(key), c.fenceRecordKey(key2)).Result()
			return err == nil && n == 0
		}, 15*time.Second, 20*time.Millisecond, "master %d keeps no key or record of either lock", i)
	}
	require.Eventually(t, func() bool { return !unreleased(c, 0, key, l.token) }, 15*time.Second, 20*time.Millisecond,
		"the health loop sends the kept release once the master answers, and forgets it")
}

// sameLaneKey returns a key other than key whose calls take key's lane.
func sameLaneKey(c *Client, key string) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s:%d", key, i)
		if c.laneOf(k) == c.laneOf(key) {
			return k
		}
	}
}

// TestFailedAcquireCleansUpOnlyWhereItsVotesWent: a refused acquire
// releases its key where its vote may have set it; a master whose vote the
// lane never sent gets nothing (nothing queued behind its stuck pipeline,
// nothing kept for the health loop). The control: a vote that was sent to
// a paused master — it waits in the master's socket and may run when it
// resumes — gets its clean-up release queued behind it.
func TestFailedAcquireCleansUpOnlyWhereItsVotesWent(t *testing.T) {
	c := newClient(t, WithPerMasterTimeout(100*time.Millisecond))
	ctx := context.Background()
	rdbs := direct(t)
	key := newKey(t)
	resume0 := stickLane(t, c, 0, key)
	resume1 := stickLane(t, c, 1, key)
	// Another holder on masters 2 and 3: with 0 and 1 unreached, only
	// master 4 votes yes.
	for _, i := range []int{2, 3} {
		require.NoError(t, rdbs[i].Set(ctx, key, "someone-else", 10*time.Second).Err())
	}
	_, err := c.Acquire(ctx, key, 10*time.Second, WithRetry(NoRetry()))
	require.Error(t, err)
	var oe *OutcomeError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, 1, oe.Votes, "master 4 voted yes: %v", err)
	n, err := rdbs[4].Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the clean-up released master 4's key")
	for _, i := range []int{0, 1} {
		lane := c.masters[i].lanes[c.laneOf(key)]
		lane.mu.Lock()
		queued := slices.ContainsFunc(lane.queue, func(q *call) bool { return q.script == releaseScript && q.keys[0] == key })
		lane.mu.Unlock()
		assert.False(t, queued, "no clean-up waits on master %d, which never received the vote", i)
		u := &c.masters[i].unreleased
		u.mu.Lock()
		kept := len(u.m)
		u.mu.Unlock()
		assert.Zero(t, kept, "nothing kept for master %d's health loop", i)
	}
	assert.EqualValues(t, 0, c.unreached.n.Load(), "a refused acquire records nothing")
	resume0()
	resume1()

	// Control: master 0 paused with its lane idle, so the vote is written
	// to its socket and stays there; the clean-up must follow it.
	c2 := newClient(t, WithPerMasterTimeout(100*time.Millisecond))
	key2 := newKey(t)
	for _, i := range []int{2, 3} {
		require.NoError(t, rdbs[i].Set(ctx, key2, "someone-else", 10*time.Second).Err())
	}
	require.NoError(t, servers[0].Pause())
	_, err = c2.Acquire(ctx, key2, 10*time.Second, WithRetry(NoRetry()))
	require.Error(t, err)
	sent := false
	for i := range c2.masters[0].lanes {
		lane := c2.masters[0].lanes[i]
		lane.mu.Lock()
		sent = sent || slices.ContainsFunc(lane.queue, func(q *call) bool { return q.script == releaseScript && q.keys[0] == key2 })
		lane.mu.Unlock()
	}
	assert.True(t, sent, "the clean-up of a vote that went out waits behind it on master 0's lane")
	require.NoError(t, servers[0].Resume())
	require.Eventually(t, func() bool {
		n, err := rdbs[0].Exists(ctx, key2).Result()
		return err == nil && n == 0
	}, 15*time.Second, 20*time.Millisecond, "the vote ran when master 0 resumed, and the queued clean-up after it")
}

// TestReleaseReachesACopyAnotherClientRestored: a lock granted by Client A
// while master 0 was unreachable, then extended through Client B (a
// second daemon over the same masters) after master 0 came back — B's
// extend restores the key there — is released through A by key and token,
// as the daemon does: the copy B restored is deleted by that release.
func TestReleaseReachesACopyAnotherClientRestored(t *testing.T) {
	a, rdbs, keys, l := restoredByAnotherClient(t, 1)
	ctx := context.Background()
	key := keys[0]

	n, err := a.Release(ctx, key, l.Token())
	require.NoError(t, err)
	assert.Equal(t, 5, n, "every master, master 0 included, deleted the key")
	e, err := rdbs[0].Exists(ctx, key, a.fenceRecordKey(key)).Result()
	require.NoError(t, err)
	assert.Zero(t, e, "the restored copy and its record are gone from master 0")
}

// TestExtendForgetsTheUnreachedMasters: once a lock is extended, its
// restore may have written the key where the votes never reached, so the
// release goes to every master as a release that must be sent; and a token
// handed over from another Client (withSameToken) records nothing.
func TestExtendForgetsTheUnreachedMasters(t *testing.T) {
	c := newClient(t, WithPerMasterTimeout(100*time.Millisecond))
	ctx := context.Background()
	key := newKey(t)
	resume := stickLane(t, c, 0, key)
	l, err := c.Acquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 1, c.unreached.n.Load())
	_ = l.Extend(ctx, 10*time.Second) // master 0 still paused: four extend
	assert.EqualValues(t, 0, c.unreached.n.Load(), "the extend forgot the record")
	require.NoError(t, l.Release(ctx))
	assert.True(t, queuedRelease(c, 0, key, l.token), "the release after an extend is queued on master 0's lane")

	key2 := sameLaneKey(c, key)
	l2, err := c.Acquire(withSameToken(ctx, "handed-over-token"), key2, 10*time.Second)
	require.NoError(t, err)
	assert.EqualValues(t, 0, c.unreached.n.Load(), "a handed-over token records nothing")
	require.NoError(t, l2.Release(ctx))
	resume()
}

// TestUnreachedSetSweepsWhenFull: a set filled with live entries is swept
// again once they expire, and records new grants then (a sweep point past
// maxUnreached stopped it for good: found in review).
func TestUnreachedSetSweepsWhenFull(t *testing.T) {
	var u unreachedSet
	live := 10 * sweepFull
	for i := range maxUnreached + 1 {
		u.add(fmt.Sprintf("t%d", i), 1, live, 0)
	}
	require.Len(t, u.m, maxUnreached, "bounded")
	// Full of live entries: a sweep finds nothing to remove, and the grant
	// is not recorded.
	u.add("early", 1, live, sweepFull)
	assert.Zero(t, u.take("early", sweepFull), "full of live entries: not recorded")
	require.Len(t, u.m, maxUnreached)
	// Once they expired, the next grant sweeps them and is recorded.
	later := live + sweepFull
	u.add("fresh", 1, later+1000, later)
	assert.Equal(t, uint64(1), u.take("fresh", later), "the expired entries were swept and the grant recorded (next sweep at %d)", u.nextSweep)
	assert.Empty(t, u.m)
}

// TestReleaseQueuedWhenTheRetrySetIsFull: Client B restored the key on a
// master that A's votes never reached; A's lane there is stuck again when
// A releases, and that master's retry set is full (as after a long pause
// under load). The release is queued behind the stuck pipeline, as every
// release was before, and deletes the copy once the master resumes; kept
// only for the retry set, it was dropped (found in review).
func TestReleaseQueuedWhenTheRetrySetIsFull(t *testing.T) {
	a, rdbs, keys, l := restoredByAnotherClient(t, 1)
	ctx := context.Background()
	key := keys[0]

	resume2 := stickLane(t, a, 0, key)
	u := &a.masters[0].unreleased
	u.mu.Lock()
	if u.m == nil {
		u.m = map[[2]string]int64{}
	}
	for i := 0; len(u.m) < maxUnreleased; i++ {
		u.m[[2]string{fmt.Sprintf("filler:%d", i), "t"}] = a.sinceEpoch() + int64(time.Hour)
	}
	u.mu.Unlock()
	_, _ = a.Release(ctx, key, l.Token())
	assert.True(t, queuedRelease(a, 0, key, l.token), "the release waits on master 0's stuck lane")
	resume2()
	assert.Eventually(t, func() bool {
		n, err := rdbs[0].Exists(ctx, key, a.fenceRecordKey(key)).Result()
		return err == nil && n == 0
	}, 5*time.Second, 20*time.Millisecond, "the restored copy and its fence record are deleted once master 0 resumes")
}

// restoredByAnotherClient returns Client A (100ms per-master timeout) and
// a lock of A's on n keys (one key: an ordinary Acquire) granted while A's
// lane to master 0 was stuck (its vote never sent there), then extended
// through a second Client B over the same masters after master 0 resumed:
// B's extend restored the keys on master 0. A counts master 0 again, its
// lane idle.
func restoredByAnotherClient(t *testing.T, n int) (a *Client, rdbs []*redis.Client, keys []string, l *Lock) {
	t.Helper()
	a = newClient(t, WithPerMasterTimeout(100*time.Millisecond), WithHealthInterval(20*time.Millisecond))
	b, err := New(masterOptions(), WithPerMasterTimeout(500*time.Millisecond), WithMarkerKey(a.opts.markerKey))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	rdbs = direct(t)
	key := newKey(t)
	keys = []string{key}
	for i := 1; i < n; i++ {
		keys = append(keys, fmt.Sprintf("%s:%d", key, i))
	}
	resume := stickLane(t, a, 0, key)
	l, err = a.AcquireMulti(ctx, keys, 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 1, a.unreached.n.Load(), "A recorded master 0 as never reached")
	resume()
	countsAgain(t, a, key)
	_, err = b.ExtendMulti(ctx, keys, l.Token(), 10*time.Second)
	require.NoError(t, err)
	for _, k := range keys {
		require.Equal(t, l.Token(), rdbs[0].Get(ctx, k).Val(), "B's extend restored %s on master 0", k)
	}
	return a, rdbs, keys, l
}

// countsAgain waits until c counts master 0 again (after stickLane's
// resume) and key's lane to it is idle.
func countsAgain(t *testing.T, c *Client, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return c.masters[0].up.Load() && c.masters[0].lanes[c.laneOf(key)].busySince.Load() == 0
	}, 10*time.Second, 10*time.Millisecond, "the Client counts master 0 again")
}

// queuedMultiRelease reports whether master i's lane for key holds a
// queued release of a multi-key lock whose first key is key, by token.
func queuedMultiRelease(c *Client, i int, key, token string) bool {
	lane := c.masters[i].lanes[c.laneOf(key)]
	lane.mu.Lock()
	defer lane.mu.Unlock()
	return slices.ContainsFunc(lane.queue, func(q *call) bool {
		return q.script == releaseMultiScript && len(q.keys) > 0 && q.keys[0] == key && len(q.args) > 0 && q.args[0] == token
	})
}

// TestMultiKeyReleaseDoesNotQueueWhereTheVotesNeverWent: a multi-key lock
// granted while a master's lane was stuck records that master as a
// single key's lock does; its release, listing the keys in another order,
// finds the record, is not queued behind the stuck pipeline and is kept
// for the health loop key by key. The control — the record forgotten —
// queues it; and an extend of the set, in any order, forgets the record.
func TestMultiKeyReleaseDoesNotQueueWhereTheVotesNeverWent(t *testing.T) {
	c := newClient(t, WithPerMasterTimeout(100*time.Millisecond))
	ctx := context.Background()
	key := newKey(t)
	keys := []string{key, key + ":b", key + ":c"}
	resume := stickLane(t, c, 0, key)

	l, err := c.AcquireMulti(ctx, keys, 10*time.Second)
	require.NoError(t, err, "four masters grant")
	require.EqualValues(t, 1, c.unreached.n.Load(), "the grant records the master its vote never reached")
	reversed := slices.Clone(keys)
	slices.Reverse(reversed)
	_, err = c.ReleaseMulti(ctx, reversed, l.Token())
	require.NoError(t, err)
	assert.EqualValues(t, 0, c.unreached.n.Load(), "the release, keys in another order, takes the record")
	assert.False(t, queuedMultiRelease(c, 0, reversed[0], l.token), "the release waits on no stuck lane")
	for _, k := range keys {
		assert.True(t, unreleased(c, 0, k, l.token), "%s's release is kept for the health loop", k)
	}

	// Control: the record forgotten, the release is queued behind the
	// stuck pipeline, as every release was.
	key2 := sameLaneKey(c, key)
	keys2 := []string{key2, key2 + ":b"}
	l2, err := c.AcquireMulti(ctx, keys2, 10*time.Second)
	require.NoError(t, err)
	c.unreached.forget(l2.token)
	require.NoError(t, l2.Release(ctx))
	assert.True(t, queuedMultiRelease(c, 0, key2, l2.token), "without the record the release is queued behind the stuck pipeline")

	// An extend of the set, keys in another order, forgets the record: the
	// release after it is queued on master 0's lane.
	key3 := sameLaneKey(c, key2)
	keys3 := []string{key3, key3 + ":b"}
	l3, err := c.AcquireMulti(ctx, keys3, 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 1, c.unreached.n.Load())
	_, _ = c.ExtendMulti(ctx, []string{keys3[1], keys3[0]}, l3.token, 10*time.Second) // master 0 still paused: four extend
	assert.EqualValues(t, 0, c.unreached.n.Load(), "the extend forgot the record")
	require.NoError(t, l3.Release(ctx))
	assert.True(t, queuedMultiRelease(c, 0, key3, l3.token), "the release after an extend is queued on master 0's lane")

	resume()
	all := slices.Concat(keys, keys2, keys3)
	for i, r := range direct(t) {
		require.Eventually(t, func() bool {
			n, err := r.Exists(ctx, all...).Result()
			return err == nil && n == 0
		}, 15*time.Second, 20*time.Millisecond, "master %d keeps no key of the three sets", i)
	}
}

// TestMultiKeyReleaseReachesACopyAnotherClientRestored: as
// TestReleaseReachesACopyAnotherClientRestored, for a multi-key lock: the
// set that A's votes never took to master 0, restored there by B's
// extend, is deleted there by A's release.
func TestMultiKeyReleaseReachesACopyAnotherClientRestored(t *testing.T) {
	a, rdbs, keys, l := restoredByAnotherClient(t, 2)
	ctx := context.Background()

	n, err := a.ReleaseMulti(ctx, keys, l.Token())
	require.NoError(t, err)
	assert.Equal(t, 5, n, "every master, master 0 included, deleted the set")
	e, err := rdbs[0].Exists(ctx, keys[0], keys[1], a.fenceRecordKey(keys[0]), a.fenceRecordKey(keys[1])).Result()
	require.NoError(t, err)
	assert.Zero(t, e, "the restored copy and its records are gone from master 0")
}

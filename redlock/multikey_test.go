package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// multiKeys returns n fresh keys of one test.
func multiKeys(t *testing.T, n int) []string {
	base := newKey(t)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", base, i)
	}
	return keys
}

// anyLeft returns, per running master, the keys of keys that exist there.
func anyLeft(t *testing.T, rdbs []*redis.Client, keys []string) map[int][]string {
	t.Helper()
	left := map[int][]string{}
	for i, r := range rdbs {
		if !servers[i].Running() {
			continue
		}
		for _, k := range keys {
			n, err := r.Exists(context.Background(), k).Result()
			require.NoError(t, err, "master %d", i)
			if n > 0 {
				left[i] = append(left[i], k)
			}
		}
	}
	return left
}

// TestMultiKeyAllOrNothing: a set is taken with one token on every master,
// with one fence in every key's record; a set that overlaps a held key is
// refused and leaves none of its keys anywhere; a single-key acquire of a
// key of the set is refused; release frees every key.
func TestMultiKeyAllOrNothing(t *testing.T) {
	rdbs := direct(t)
	c := newClient(t)
	ctx := context.Background()
	keys := multiKeys(t, 3)
	before, err := c.Acquire(ctx, keys[1], time.Second)
	require.NoError(t, err)
	require.NoError(t, before.Release(ctx))

	lock, err := c.AcquireMulti(ctx, keys[:2], 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, keys[:2], lock.Keys())
	assert.Equal(t, keys[0], lock.Key())
	assert.Greater(t, lock.Fence(), before.Fence(), "above every earlier holder of each key")
	require.Eventually(t, func() bool {
		return len(holders(t, rdbs, keys[0], lock.Token())) == 5 && len(holders(t, rdbs, keys[1], lock.Token())) == 5
	}, time.Second, 5*time.Millisecond)
	for _, k := range keys[:2] {
		st, err := c.Status(ctx, k)
		require.NoError(t, err)
		assert.True(t, st.Held, k)
		assert.Equal(t, lock.Fence(), st.Fence, "the fence record of %s", k)
	}

	_, err = c.Acquire(ctx, keys[1], time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld)
	_, err = c.AcquireMulti(ctx, []string{keys[2], keys[1]}, time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld)
	var oe *OutcomeError
	require.ErrorAs(t, err, &oe)
	assert.Positive(t, oe.RetryAfter, "when the held key ends")
	assert.Empty(t, anyLeft(t, rdbs, keys[2:]), "a refused set leaves none of its keys")

	ms, err := c.StatusMulti(ctx, keys[:2])
	require.NoError(t, err)
	assert.True(t, ms.Held)
	assert.Equal(t, lock.Fence(), ms.Fence)
	assert.Positive(t, ms.Validity)
	ms, err = c.StatusMulti(ctx, keys)
	require.NoError(t, err)
	assert.False(t, ms.Held, "keys[2] is free: the set of three is not held")
	assert.True(t, ms.Keys[0].Held)
	assert.False(t, ms.Keys[2].Held)

	require.NoError(t, lock.Extend(ctx, 20*time.Second))
	settle(t, c, keys[:2]...) // Extend answers at quorum: master 0's may be on its way
	for _, k := range keys[:2] {
		left, err := rdbs[0].PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Greater(t, left, 15*time.Second, k)
	}
	require.NoError(t, lock.Release(ctx))
	// Release answers at quorum and leaves the slower masters' deletes on
	// their way (CI once found master 0's still coming): wait for them.
	settle(t, c, keys...)
	assert.Empty(t, anyLeft(t, rdbs, keys), "released: no key stays")
	for _, k := range keys[:2] {
		n, err := rdbs[0].Exists(ctx, c.fenceRecordKey(k)).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the fence record of %s goes with its key", k)
	}
	_, err = c.ExtendMulti(ctx, keys[:2], lock.Token(), time.Second)
	require.ErrorIs(t, err, ErrNotHeld)
	_, err = c.ReleaseMulti(ctx, keys[:2], lock.Token())
	require.ErrorIs(t, err, ErrNotHeld)
}

// TestMultiKeyPartialMaster: a master that holds only part of a set (a key
// of it lost there) does not vote for the set's extend, and a set whose key
// another holder has on a master gets no vote there: the script writes
// nothing on such a master.
func TestMultiKeyPartialMaster(t *testing.T) {
	rdbs := direct(t)
	c := newClient(t)
	ctx := context.Background()
	keys := multiKeys(t, 2)
	// Another token holds keys[1] on masters 0 and 1 only (a contender's
	// leftover votes): the set gets three votes, from masters 2 to 4.
	for _, i := range []int{0, 1} {
		require.NoError(t, rdbs[i].Set(ctx, keys[1], "someone-else", 5*time.Second).Err())
	}
	lock, err := c.AcquireMulti(ctx, keys, 5*time.Second)
	require.NoError(t, err)
	for _, i := range []int{0, 1} {
		n, err := rdbs[i].Exists(ctx, keys[0]).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "master %d holds keys[1] for another token: the set wrote nothing there", i)
	}
	// Master 2 loses keys[0]: it holds part of the set and does not vote
	// for its extend; masters 3 and 4 are not a quorum.
	require.NoError(t, rdbs[2].Del(ctx, keys[0]).Err())
	_, err = c.ExtendMulti(ctx, keys, lock.Token(), 10*time.Second)
	require.ErrorIs(t, err, ErrNotHeld)
	left, err := rdbs[2].PTTL(ctx, keys[1]).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, left, 5*time.Second, "master 2 holds part of the set: its keys[1] was not extended")
	require.NoError(t, lock.Release(ctx))
}

// TestMultiKeyDownSubsets: as TestDownSubsets, for a set of three keys —
// with up to two masters down the set is taken, extended, read and
// released; with three or more the acquire fails at once and no key of the
// set stays on any running master.
func TestMultiKeyDownSubsets(t *testing.T) {
	rdbs := direct(t)
	ctx := context.Background()
	for mask := range 32 {
		down := bits(mask)
		t.Run(fmt.Sprintf("down=%v", down), func(t *testing.T) {
			keys := multiKeys(t, 3)
			withMasters(t, "kill", down...)
			c := newClient(t, WithPerMasterTimeout(5*time.Second))
			lock, err := c.AcquireMulti(ctx, keys, 10*time.Second, WithRetry(NoRetry()))
			if len(down) <= 2 {
				require.NoError(t, err)
				require.Eventually(t, func() bool {
					for _, k := range keys {
						if len(holders(t, rdbs, k, lock.Token())) != 5-len(down) {
							return false
						}
					}
					return true
				}, time.Second, 5*time.Millisecond)
				require.NoError(t, lock.Extend(ctx, 20*time.Second))
				ms, err := c.StatusMulti(ctx, keys)
				require.NoError(t, err)
				assert.True(t, ms.Held)
				_, err = c.ExtendMulti(ctx, keys, "ffffffffffffffffffffffffffffffff", 20*time.Second)
				require.ErrorIs(t, err, ErrNotHeld)
				_, err = c.AcquireMulti(ctx, keys[1:], time.Second, WithRetry(NoRetry()))
				require.ErrorIs(t, err, ErrLockHeld)
				require.NoError(t, lock.Release(ctx))
				settle(t, c, keys...) // Release answers at quorum
				assert.Empty(t, anyLeft(t, rdbs, keys))
				return
			}
			require.ErrorIs(t, err, ErrQuorumUnavailable)
			require.NotErrorIs(t, err, ErrMasterTimeout, "must not wait for dead masters")
			assert.Empty(t, anyLeft(t, rdbs, keys), "no key of the set may stay behind")
		})
	}
}

// TestMultiKeyTimedOutMasterCleanedUp: a master paused during the acquire
// (its SETs queued, answered after the decision) gets the clean-up too:
// once it resumes, no key of a refused set stays there.
func TestMultiKeyTimedOutMasterCleanedUp(t *testing.T) {
	rdbs := direct(t)
	c := newClient(t, WithPerMasterTimeout(200*time.Millisecond))
	ctx := context.Background()
	keys := multiKeys(t, 2)
	other, err := c.Acquire(ctx, keys[1], 10*time.Second)
	require.NoError(t, err)
	// Master 4 lost the other's key and is paused: the set's script is
	// queued there and may land after the decision.
	require.Eventually(t, func() bool { return len(holders(t, rdbs, keys[1], other.Token())) == 5 }, time.Second, 5*time.Millisecond)
	require.NoError(t, rdbs[4].Del(ctx, keys[1], c.fenceRecordKey(keys[1])).Err())
	require.NoError(t, servers[4].Pause())
	_, err = c.AcquireMulti(ctx, keys, 10*time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld)
	require.NoError(t, servers[4].Resume())
	require.Eventually(t, func() bool {
		n, err := rdbs[4].Exists(ctx, keys[0], keys[1]).Result()
		return err == nil && n == 0
	}, 3*time.Second, 10*time.Millisecond, "the paused master's keys of the refused set are cleaned up")
	assert.Empty(t, anyLeft(t, rdbs, keys[:1]))
	require.NoError(t, other.Release(ctx))
}

// TestMultiKeyOverlappingOrders: callers ask for overlapping sets in
// different orders ({a,b}, {b,a}, {b,c}, {c,a}, {a,b,c}) through five
// Clients, waiting: every caller finishes (no deadlock), and the history
// of holds shows at most one holder of each key at any time.
func TestMultiKeyOverlappingOrders(t *testing.T) {
	keys := multiKeys(t, 3)
	a, b, cc := keys[0], keys[1], keys[2]
	sets := [][]string{{a, b}, {b, a}, {b, cc}, {cc, a}, {a, b, cc}}
	clients := make([]*Client, 5)
	for i := range clients {
		clients[i] = newClient(t)
	}
	ctx := context.Background()
	const callers, rounds = 20, 5
	var mu sync.Mutex
	history := map[string][]holdInterval{}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i := range callers {
		c, set := clients[i%len(clients)], sets[i%len(sets)]
		wg.Go(func() {
			for range rounds {
				lock, err := c.AcquireMulti(ctx, set, 2*time.Second, WithWait(30*time.Second))
				if !assert.NoError(t, err, "set %v", set) {
					return
				}
				from := time.Now()
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				to := time.Now()
				if v := lock.ValidUntil(); v.Before(to) {
					to = v
				}
				mu.Lock()
				for _, k := range set {
					history[k] = append(history[k], holdInterval{from, to, 0})
				}
				mu.Unlock()
				assert.NoError(t, lock.Release(ctx))
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("callers of overlapping sets still waiting after 2 minutes: a deadlock")
	}
	total := 0
	for _, k := range keys {
		n, at := maxOverlap(history[k])
		assert.LessOrEqual(t, n, 1, "key %s: %d holders at %v", k, n, at)
		total += len(history[k])
	}
	assert.Equal(t, callers*rounds*(2*4+3)/5, total, "every hold recorded")
}

// TestMultiKeyWaitWakesOnAnyKey: a set waits while two of its keys are
// held by others, and is granted by the notification of the last release
// (polling off), whichever key it is.
func TestMultiKeyWaitWakesOnAnyKey(t *testing.T) {
	defer func(d time.Duration) { pollFallback = d }(pollFallback)
	pollFallback = time.Hour
	// One Client holds and waits: the release channel is per marker, and
	// newClient gives each Client a marker of its own.
	c := newClient(t)
	other := c
	ctx := context.Background()
	keys := multiKeys(t, 3)
	h1, err := other.Acquire(ctx, keys[2], time.Minute)
	require.NoError(t, err)
	h2, err := other.AcquireMulti(ctx, keys[:2], time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	var granted time.Time
	var wg sync.WaitGroup
	defer wg.Wait() // before pollFallback is restored
	wg.Go(func() {
		lock, err := c.AcquireMulti(ctx, []string{keys[1], keys[2]}, time.Second, WithWait(15*time.Second))
		granted = time.Now()
		if err == nil {
			err = lock.Release(ctx)
		}
		got <- err
	})
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, h1.Release(ctx))
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("granted while keys[1] is still held: %v", err)
	default:
	}
	released := time.Now()
	require.NoError(t, h2.Release(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
		assert.Less(t, granted.Sub(released), 2*time.Second, "woken by the release, not by a poll")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting set was not woken by the release of its keys")
	}
}

// TestMultiKeyLockDelay: a set that expires without a release keeps each of
// its keys for the delay; a release clears it.
func TestMultiKeyLockDelay(t *testing.T) {
	c := newClient(t, WithMaxLockDelay(10*time.Second))
	ctx := context.Background()
	keys := multiKeys(t, 2)
	const ttl, delay = 300 * time.Millisecond, 2 * time.Second
	first, err := c.AcquireMulti(ctx, keys, ttl, WithLockDelay(delay))
	require.NoError(t, err)
	granted := time.Now()
	time.Sleep(ttl + 100*time.Millisecond) // the holder stalls past its TTL
	_, err = c.Acquire(ctx, keys[1], ttl, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld)
	var oe *OutcomeError
	require.ErrorAs(t, err, &oe)
	assert.Positive(t, oe.Delayed, "refused by the delay: %v", err)
	_, err = c.AcquireMulti(ctx, keys, ttl, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld)
	require.ErrorAs(t, err, &oe)
	assert.Positive(t, oe.Delayed, "the set refused by the delay: %v", err)
	assert.Positive(t, oe.RetryAfter)
	assert.Less(t, time.Since(granted), ttl+delay)
	// The late release ends the delay at once.
	_, err = c.ReleaseMulti(ctx, keys, first.Token())
	require.ErrorIs(t, err, ErrNotHeld, "expired")
	second, err := c.AcquireMulti(ctx, keys, time.Second, WithRetry(NoRetry()))
	require.NoError(t, err, "the holder's late release cleared the delay")
	assert.Greater(t, second.Fence(), first.Fence())
	require.NoError(t, second.Release(ctx))
}

// TestMultiKeyGrantedCheck: two masters silently lose one key of a held
// set (a rollback, an eviction): a contender for that key gets three
// votes, but the other masters show the set's granted lock, and the
// contender is refused.
func TestMultiKeyGrantedCheck(t *testing.T) {
	rdbs := direct(t)
	c := newClient(t)
	ctx := context.Background()
	keys := multiKeys(t, 2)
	lock, err := c.AcquireMulti(ctx, keys, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(holders(t, rdbs, keys[1], lock.Token())) == 5 }, time.Second, 5*time.Millisecond)
	for _, i := range []int{0, 1} {
		require.NoError(t, rdbs[i].Del(ctx, keys[1]).Err())
	}
	contender := newClient(t)
	_, err = contender.AcquireMulti(ctx, []string{keys[1], keys[0] + ":other"}, time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld, "a granted lock on a master that still has the key refuses the grant")
	_, err = contender.Acquire(ctx, keys[1], time.Second, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld)
	require.NoError(t, lock.Release(ctx))
}

// TestMultiKeyInvalid: the keys are checked before anything is sent.
func TestMultiKeyInvalid(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	tooMany := make([]string, MaxMultiKeys+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint("k", i)
	}
	for name, keys := range map[string][]string{
		"none":      nil,
		"too many":  tooMany,
		"empty key": {"a", ""},
		"duplicate": {"a", "b", "a"},
		"reserved":  {"a", c.opts.fenceKey + ":a"},
	} {
		_, err := c.AcquireMulti(ctx, keys, time.Second)
		assert.ErrorIs(t, err, ErrInvalid, name)
		_, err = c.ReleaseMulti(ctx, keys, "t")
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
	_, err := c.AcquireMulti(ctx, []string{"a", "b"}, time.Microsecond)
	assert.ErrorIs(t, err, ErrInvalid, "ttl below the minimum")
	nofence := newClient(t, WithFenceKey(""))
	_, err = nofence.AcquireMulti(ctx, []string{"a", "b"}, time.Second)
	assert.ErrorIs(t, err, ErrInvalid, "no fencing")
}

// TestMultiKeyOneByOneControl is the negative control of
// TestMultiKeyOverlappingOrders: taking the keys one at a time, each with
// a wait, in the order each caller gives, deadlocks two callers asking for
// {a,b} and {b,a} — each holds one key and waits for the other's — until
// their waits run out. AcquireMulti never holds part of a set, so the
// same two callers both finish.
func TestMultiKeyOneByOneControl(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	keys := multiKeys(t, 2)
	start := make(chan struct{})
	var wg sync.WaitGroup
	// Neither releases its first key before both have given up on their
	// second: otherwise the caller whose wait ends first lets the other
	// in before its own wait ends (a CI run saw it).
	var attempted sync.WaitGroup
	attempted.Add(2)
	errs := make([]error, 2)
	for i, order := range [][]string{{keys[0], keys[1]}, {keys[1], keys[0]}} {
		wg.Go(func() {
			first, err := c.Acquire(ctx, order[0], 5*time.Second)
			if err != nil {
				errs[i] = err
				attempted.Done()
				return
			}
			defer first.Release(ctx)
			<-start // both hold their first key
			second, err := c.Acquire(ctx, order[1], 5*time.Second, WithWait(time.Second))
			if err == nil {
				second.Release(ctx)
			}
			errs[i] = err
			attempted.Done()
			attempted.Wait()
		})
	}
	time.Sleep(200 * time.Millisecond)
	close(start)
	wg.Wait()
	assert.ErrorIs(t, errs[0], ErrLockHeld, "one by one: caller 0 waits for caller 1's key while holding its own")
	assert.ErrorIs(t, errs[1], ErrLockHeld, "one by one: caller 1 waits for caller 0's key while holding its own")

	for i, order := range [][]string{{keys[0], keys[1]}, {keys[1], keys[0]}} {
		wg.Go(func() {
			lock, err := c.AcquireMulti(ctx, order, 5*time.Second, WithWait(5*time.Second))
			if err == nil {
				time.Sleep(50 * time.Millisecond)
				err = lock.Release(ctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	assert.NoError(t, errs[0])
	assert.NoError(t, errs[1])
}

package redlock

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitingFor waits until c has n waiters.
func waitingFor(t *testing.T, c *Client, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Waiting() == n }, 10*time.Second, time.Millisecond)
}

// heldAcrossClients holds a new key for a minute through one Client (a)
// and returns another Client of the same deployment (b), as two daemon
// replicas; the fallback poll is lengthened beyond any wait, so that only
// a wake-up (or Close) ends b's waits early.
func heldAcrossClients(t *testing.T) (b *Client, key string, held *Lock) {
	t.Helper()
	saved := pollFallback
	pollFallback = time.Hour
	t.Cleanup(func() { pollFallback = saved })
	a, opts := brandNewClient(t)
	b = sameDeployment(t, opts...)
	key = newKey(t)
	held, err := a.Acquire(context.Background(), key, time.Minute)
	require.NoError(t, err)
	return b, key, held
}

// TestHandOffAcrossClients: a release through one Client (daemon replica
// a) wakes the waiter of another (replica b): it wins although neither the
// holder's TTL nor a fallback poll (lengthened beyond the wait) would have
// let it try again before its caller gives up.
func TestHandOffAcrossClients(t *testing.T) {
	ctx := context.Background()
	b, key, held := heldAcrossClients(t)
	got := make(chan *Lock, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := b.Acquire(wctx, key, time.Second, WithWait(time.Minute))
		assert.NoError(t, err)
		got <- l
	}()
	waitingFor(t, b, 1)
	require.NoError(t, held.Release(ctx))
	l := <-got
	require.NotNil(t, l)
	assert.Greater(t, l.Fence(), held.Fence())
}

// TestWaitersServedInArrivalOrder: five waiters queued one after another
// on a held key get it in the order they arrived.
func TestWaitersServedInArrivalOrder(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t)
	key := newKey(t)
	held, err := c.Acquire(ctx, key, time.Minute)
	require.NoError(t, err)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			l, err := c.Acquire(ctx, key, 10*time.Second, WithWait(30*time.Second))
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			assert.NoError(t, l.Release(ctx))
		})
		waitingFor(t, c, i+1)
	}
	require.NoError(t, held.Release(ctx))
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

// TestWaitThroughAStoppedMaster: a master dies while the waiter waits; the
// release still reaches it and it wins.
func TestWaitThroughAStoppedMaster(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t)
	key := newKey(t)
	held, err := c.Acquire(ctx, key, time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, key, time.Second, WithWait(20*time.Second))
		got <- err
	}()
	waitingFor(t, c, 1)
	withMasters(t, "kill", 4)
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-got)
}

// TestCancelledWaiterLeavesNothing: a waiter whose caller goes away leaves
// the queue, and no key of its own on any master.
func TestCancelledWaiterLeavesNothing(t *testing.T) {
	c, _ := brandNewClient(t)
	key := newKey(t)
	held, err := c.Acquire(context.Background(), key, time.Minute)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, key, time.Second, WithWait(20*time.Second))
		got <- err
	}()
	waitingFor(t, c, 1)
	cancel()
	err = <-got
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, c.Waiting())
	assert.Len(t, holders(t, direct(t), key, held.Token()), 5, "the holder's key is untouched")
	for i, r := range direct(t) {
		v, _ := r.Get(context.Background(), key).Result()
		assert.Equal(t, held.Token(), v, "master %d holds only the holder's token", i)
	}
}

// TestLostNotificationFallsBackToPolling: the pub/sub connections are
// killed (the Client subscribes again on every master), then the lock
// disappears without any notification (its keys deleted behind the
// Client's back): the waiter still gets the lock, by its fallback poll.
func TestLostNotificationFallsBackToPolling(t *testing.T) {
	ctx := context.Background()
	c, _ := brandNewClient(t)
	key := newKey(t)
	held, err := c.Acquire(ctx, key, time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, key, time.Second, WithWait(20*time.Second))
		got <- err
	}()
	waitingFor(t, c, 1)
	rdbs := direct(t)
	subscribed := subscribedEverywhere(rdbs, c)
	require.Eventually(t, subscribed, 10*time.Second, 10*time.Millisecond)
	for _, r := range rdbs {
		require.NoError(t, r.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	}
	require.Eventually(t, subscribed, 10*time.Second, 10*time.Millisecond, "subscribed again on every master")
	for _, r := range rdbs {
		require.NoError(t, r.Del(ctx, held.Key()).Err())
	}
	require.NoError(t, <-got)
}

// subscribedEverywhere reports whether c (its only subscriber) is
// subscribed to its release channel on every master of rdbs.
func subscribedEverywhere(rdbs []*redis.Client, c *Client) func() bool {
	return func() bool {
		for _, r := range rdbs {
			m, err := r.PubSubNumSub(context.Background(), c.releaseChannel()).Result()
			if err != nil || m[c.releaseChannel()] != 1 {
				return false
			}
		}
		return true
	}
}

// TestReleaseBetweenFirstAttemptAndQueue: the lock is released after the
// waiter's first attempt was refused but before it joined its key's queue,
// so the release's notification finds no waiter. The waiter must still get
// the lock, without a fallback poll (lengthened here beyond its wait).
// Master 4 holds the first attempt open: CLIENT PAUSE WRITE delays its
// vote, and the attempt waits for its clean-up there after the other four
// have refused; the release comes in that window.
func TestReleaseBetweenFirstAttemptAndQueue(t *testing.T) {
	defer func(d time.Duration) { pollFallback = d }(pollFallback)
	pollFallback = time.Hour
	ctx := context.Background()
	c, _ := brandNewClient(t) // per-master timeout 500 ms
	key := newKey(t)
	held, err := c.Acquire(ctx, key, time.Minute)
	require.NoError(t, err)
	require.NoError(t, direct(t)[4].Do(ctx, "CLIENT", "PAUSE", "400", "WRITE").Err())
	before := c.attempts.Load()
	got := make(chan error, 1)
	go func() {
		// Without a notification, nothing would wake the waiter before
		// its caller gives up (a last attempt ends a wait that runs out,
		// not a cancelled one).
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := c.Acquire(wctx, key, time.Second, WithWait(time.Minute))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return c.attempts.Load() > before }, 10*time.Second, time.Millisecond)
	// The four unpaused masters refuse within milliseconds; master 4
	// answers when its pause ends, 400 ms after it began.
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, c.Waiting(), "the release must come before the waiter queues")
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-got, "the waiter missed the release")
}

// TestFirstWaiterQueuesWhileMastersArePaused: the first waiter of a
// Client starts the release subscriptions; with three masters paused
// (connecting to them waits out dial and read timeouts) it still queues at
// once and keeps waiting for a quorum, instead of waiting for those
// connections first.
func TestFirstWaiterQueuesWhileMastersArePaused(t *testing.T) {
	c, _ := brandNewClient(t)
	withMasters(t, "pause", 2, 3, 4)
	require.Eventually(t, func() bool {
		down := 0
		for _, st := range c.Masters() {
			if !st.Up {
				down++
			}
		}
		return down == 3
	}, 10*time.Second, 10*time.Millisecond, "the paused masters are seen down: %v", states(c))
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, newKey(t), time.Second, WithWait(time.Minute))
		got <- err
	}()
	waitingFor(t, c, 1)
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)
}

// truthEnd is the latest a lock on key with token can be held: a quorum of
// masters hold it at most until the quorum-th longest PTTL, read after
// now. A validity end after it would be later than the truth.
func truthEnd(t *testing.T, rdbs []*redis.Client, key, token string, quorum int) time.Time {
	t.Helper()
	ctx := context.Background()
	var pttls []time.Duration
	for i, r := range rdbs {
		if !servers[i].Running() {
			continue
		}
		v, err := r.Get(ctx, key).Result()
		if err != nil || v != token {
			continue
		}
		p, err := r.PTTL(ctx, key).Result()
		require.NoError(t, err)
		pttls = append(pttls, p)
	}
	after := time.Now()
	require.GreaterOrEqual(t, len(pttls), quorum, "the lock is on fewer than a quorum of masters")
	slices.Sort(pttls)
	return after.Add(pttls[len(pttls)-quorum])
}

// TestValidityAfterAWait: a lock won after waiting reports the validity of
// the attempt that won it, never one shortened by the wait, and never later
// than the truth; kept alive, it is not lost. Waits end just before the
// waiter's TTL, just after it, and at three times it.
func TestValidityAfterAWait(t *testing.T) {
	const ttl = 2 * time.Second
	for _, wait := range []time.Duration{ttl * 9 / 10, ttl * 11 / 10, 3 * ttl} {
		t.Run(wait.String(), func(t *testing.T) {
			ctx := context.Background()
			c, _ := brandNewClient(t)
			rdbs := direct(t)
			key := newKey(t)
			held, err := c.Acquire(ctx, key, time.Minute)
			require.NoError(t, err)
			time.AfterFunc(wait, func() { _ = held.Release(ctx) })
			start := time.Now()
			l, err := c.Acquire(ctx, key, ttl, WithWait(wait+10*time.Second))
			require.NoError(t, err)
			now := time.Now()
			require.GreaterOrEqual(t, now.Sub(start), wait, "the acquire did not wait for the release")
			require.NoError(t, l.Err(), "lost at once after a %v wait", wait)
			assert.Greater(t, l.ValidUntil().Sub(now), ttl/2, "validity was charged with the wait")
			assert.False(t, l.ValidUntil().After(truthEnd(t, rdbs, key, l.Token(), 3)), "validity ends after the lock does")
			l.KeepAlive(ctx)
			select {
			case <-l.Done():
				t.Fatalf("kept-alive lock lost: %v", l.Err())
			case <-time.After(2 * ttl):
			}
			require.NoError(t, l.Release(ctx))
		})
	}
}

// TestCloseEndsTheWaits: Close ends every Acquire waiting on its Client at
// once, with ErrClosed, rather than at the waiter's next attempt (here the
// holder's TTL and a fallback poll lengthened beyond the wait: before,
// the waiters returned only when their 20 s wait ran out).
func TestCloseEndsTheWaits(t *testing.T) {
	ctx := context.Background()
	b, key, held := heldAcrossClients(t)
	defer held.Release(ctx) //nolint:errcheck // the test's own lock
	const waiters = 3
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := b.Acquire(ctx, key, time.Second, WithWait(20*time.Second))
			errs <- err
		}()
	}
	waitingFor(t, b, waiters)
	start := time.Now()
	require.NoError(t, b.Close())
	for range waiters {
		err := <-errs
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, err, ErrNotObtained)
		require.NotErrorIs(t, err, ErrLockHeld, "a closed Client is not contention")
	}
	assert.Less(t, time.Since(start), 10*time.Second, "the waits ended with Close, not when they ran out (20 s)")
}

// TestCloseWithAPausedMaster: Close does not wait for a release
// subscription connecting to a paused master. The kernel of a paused
// master accepts the connection and go-redis then waits for the answer to
// HELLO, its read timeout (5 s), under the PubSub's lock, which
// PubSub.Close takes: Close took about 5 s, with a waiter waiting and
// after its wait had ended (the subscription outlives it). Here Close
// waits for nothing else but the releases on their way, at most the
// per-master timeout: no health round runs (its interval is an hour), and
// a round under way, which Close also waits for, is not what this test is
// about. The subscriptions are gone from the masters after Close, and so
// are their goroutines.
func TestCloseWithAPausedMaster(t *testing.T) {
	for _, waiting := range []bool{true, false} {
		name := map[bool]string{true: "waiting", false: "waited"}[waiting]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rdbs := direct(t)
			before := pubsubGoroutines()
			c := newClient(t, WithHealthInterval(time.Hour))
			key := newKey(t)
			_, err := c.Acquire(ctx, key, 10*time.Second)
			require.NoError(t, err)
			withMasters(t, "pause", 0)
			wait := 20 * time.Second
			if !waiting {
				// Beyond the first attempt, which waits for the paused
				// master up to twice the per-master timeout: the waiter
				// queues and subscribes, then gives up.
				wait = 3 * c.opts.perMasterTimeout
			}
			got := make(chan error, 1)
			go func() {
				_, err := c.Acquire(ctx, key, time.Second, WithWait(wait))
				got <- err
			}()
			waitingFor(t, c, 1)
			// Subscribed on the four running masters: the paused one's
			// connection is made, its HELLO unanswered.
			require.Eventually(t, subscribedEverywhere(rdbs[1:], c), 10*time.Second, 10*time.Millisecond)
			if !waiting {
				require.ErrorIs(t, <-got, ErrNotObtained)
			}
			start := time.Now()
			require.NoError(t, c.Close())
			took := time.Since(start)
			t.Logf("Close took %v", took)
			bound := c.opts.perMasterTimeout + time.Second
			assert.Less(t, took, bound, "Close waited for the subscription to the paused master")
			if waiting {
				require.ErrorIs(t, <-got, ErrClosed)
			}
			require.Eventually(t, func() bool {
				for _, r := range rdbs[1:] {
					m, err := r.PubSubNumSub(ctx, c.releaseChannel()).Result()
					if err != nil || m[c.releaseChannel()] != 0 {
						return false
					}
				}
				return true
			}, 10*time.Second, 10*time.Millisecond, "the subscriptions are gone from the running masters")
			require.Eventually(t, func() bool { return pubsubGoroutines() <= before }, 10*time.Second, 10*time.Millisecond,
				"goroutines of go-redis's PubSubs left after Close: %d, %d before", pubsubGoroutines(), before)
		})
	}
}

// pubsubGoroutines counts the goroutines of go-redis's PubSubs and of the
// Clients' subscriptions (wait.go subscribe).
func pubsubGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "go-redis/v9.(*PubSub)") || strings.Contains(g, "go-redis/v9.(*channel)") ||
			strings.Contains(g, "redlock.(*Client).subscribe") || strings.Contains(g, "redlock.(*Client).subDialer") {
			count++
		}
	}
	return count
}

// TestWaitIsBoundedByItsBudgetNotTheStrategy: a held lock is waited for
// until WithWait's budget ends, whatever a limited strategy says (it
// paces only attempts with no quorum); a strategy that makes no retry at
// all means no wait. A black-box pass read WithWait's doc ("retry, with
// the Client's jittered retry strategy") as LimitRetry bounding the wait.
func TestWaitIsBoundedByItsBudgetNotTheStrategy(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	key := newKey(t)
	held, err := c.Acquire(ctx, key, time.Minute)
	require.NoError(t, err)
	defer held.Release(ctx) //nolint:errcheck

	const budget = 700 * time.Millisecond
	start := time.Now()
	_, err = c.Acquire(ctx, key, time.Minute, WithWait(budget), WithRetry(LimitRetry(LinearBackoff(10*time.Millisecond), 3)))
	require.ErrorIs(t, err, ErrLockHeld)
	assert.GreaterOrEqual(t, time.Since(start), budget, "LimitRetry ended the wait")

	start = time.Now()
	_, err = c.Acquire(ctx, key, time.Minute, WithWait(10*time.Second), WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld)
	assert.Less(t, time.Since(start), 5*time.Second, "NoRetry waited")
}

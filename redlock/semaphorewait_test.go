package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// settledAttempts waits until c has made no acquire attempt for a while
// (its waiters asleep until a notification) and returns the count.
func settledAttempts(t *testing.T, c *Client) int64 {
	t.Helper()
	last := c.attempts.Load()
	for stable := 0; stable < 5; {
		time.Sleep(40 * time.Millisecond)
		if n := c.attempts.Load(); n == last {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	return last
}

// permitWaitSetup turns the poll fallback off for the test (a waiter gets
// a permit by a notification or not at all) and returns the Client of the
// holders and the one of the waiters (the same Client: its releases
// notify its own waiters; one of another marker key has another channel)
// and a semaphore name.
func permitWaitSetup(t *testing.T) (holders, waiters *Client, name string) {
	saved := pollFallback
	pollFallback = time.Hour
	t.Cleanup(func() { pollFallback = saved })
	c := newClient(t)
	return c, c, newKey(t)
}

// waitingIs waits until n of c's callers wait in its queues.
func waitingIs(t *testing.T, c *Client, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Waiting() == n }, 10*time.Second, time.Millisecond)
}

// waitersOn starts n callers of wait, each sending the lock it gets on
// the returned channel (a failure fails t), and waits until all n wait
// in c's queues.
func waitersOn(t *testing.T, c *Client, n int, wait func() (*Lock, error)) <-chan *Lock {
	t.Helper()
	got := make(chan *Lock, n)
	for range n {
		go func() {
			l, err := wait()
			if assert.NoError(t, err) {
				got <- l
			}
		}()
	}
	waitingIs(t, c, n)
	return got
}

// holdAllPermits takes every permit of name (N = permits) on c.
func holdAllPermits(t *testing.T, c *Client, name string, permits int) []*Permit {
	t.Helper()
	var held []*Permit
	for range permits {
		p, err := c.AcquirePermit(context.Background(), name, permits, time.Minute)
		require.NoError(t, err)
		held = append(held, p)
	}
	return held
}

// permitWaiters starts n AcquirePermit calls on c that wait for a permit
// of name (N = permits); each sends what it got on the channel.
func permitWaiters(t *testing.T, c *Client, name string, permits, n int) (chan *Permit, *sync.WaitGroup) {
	got := make(chan *Permit, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			p, err := c.AcquirePermit(context.Background(), name, permits, time.Minute, WithWait(50*time.Second))
			if assert.NoError(t, err) {
				got <- p
			}
		})
	}
	return got, &wg
}

// A waiting AcquirePermit woken by the release of a slot tries that slot
// first, so each hand-off costs one attempt. Without it (a random first
// slot, as before) four hand-offs with the other three slots held cost
// 2.5 attempts each on average: all four at one attempt would happen by
// chance once in 256 runs.
func TestSemaphoreWaiterTriesTheReleasedSlotFirst(t *testing.T) {
	c1, c2, name := permitWaitSetup(t)
	ctx := context.Background()
	held := holdAllPermits(t, c1, name, 4)
	got, wg := permitWaiters(t, c2, name, 4, 4)
	waitingIs(t, c2, 4)
	before := settledAttempts(t, c2)
	for i, h := range held {
		require.NoError(t, h.Release(ctx))
		waitingIs(t, c2, 3-i)
	}
	wg.Wait()
	close(got)
	slots := map[int]bool{}
	for p := range got {
		slots[p.Slot] = true
		require.NoError(t, p.Release(ctx))
	}
	assert.Len(t, slots, 4)
	assert.Equal(t, int64(4), c2.attempts.Load()-before, "each hand-off should take one attempt, on the released slot")
}

// A new AcquirePermit with WithWait joins the queue when this Client's
// waiters already wait for that semaphore, instead of trying every slot
// first (up to permits refused fan-outs, and a permit taken ahead of
// waiters that came earlier). Before, the third caller here made two
// attempts before it queued.
func TestSemaphoreNewWaiterJoinsBehindTheQueue(t *testing.T) {
	c1, c2, name := permitWaitSetup(t)
	ctx := context.Background()
	held := holdAllPermits(t, c1, name, 2)
	first, wg := permitWaiters(t, c2, name, 2, 2)
	waitingIs(t, c2, 2)
	before := settledAttempts(t, c2)
	late, lateWG := permitWaiters(t, c2, name, 2, 1)
	waitingIs(t, c2, 3)
	assert.Equal(t, before, settledAttempts(t, c2), "the late waiter attempted instead of queueing")
	// The two earlier waiters get the two permits; the late one waits.
	for _, h := range held {
		require.NoError(t, h.Release(ctx))
	}
	wg.Wait()
	assert.Len(t, first, 2)
	assert.Len(t, late, 0)
	require.Equal(t, 1, c2.Waiting())
	p := <-first
	require.NoError(t, p.Release(ctx))
	lateWG.Wait()
	require.NoError(t, (<-late).Release(ctx))
	require.NoError(t, (<-first).Release(ctx))
}

// woken reports whether w has a wake-up pending, and takes it.
func woken(w *waiter) bool {
	select {
	case <-w.wake:
		return true
	default:
		return false
	}
}

// twoWaitersOnSemaphore returns the queue of a semaphore of 4 permits
// whose slot keys start with base, its waitQueues (no Client, no masters)
// and two waiters joined to it, w1 first.
func twoWaitersOnSemaphore(base string) (q string, qs *waitQueues, w1, w2 *waiter) {
	q = permitWaitQueue(base, 4)
	qs = &waitQueues{}
	sem := &permitWait{base: base, permits: 4}
	return q, qs, qs.join(q, sem), qs.join(q, sem)
}

// The bookkeeping of a semaphore queue, without masters: one release
// arrives once per master; it wakes one idle head once; copies during the
// head's attempt are noted again only if the attempt did not get the
// slot; an attempt that ended without an answer for the slot (its caller
// left, no quorum) hands it to another head.
func TestSemaphoreQueueNotesEachReleaseOnce(t *testing.T) {
	const base, slot = "s#permit:", "s#permit:2"
	q, qs, w1, w2 := twoWaitersOnSemaphore(base)
	for range 5 { // every master publishes the release
		qs.releasedSlot(base, slot)
	}
	assert.True(t, woken(w1))
	assert.False(t, woken(w2), "one release wakes one head")
	require.True(t, qs.startAttempt(q, w1))
	require.Equal(t, slot, qs.takeFreed(q))
	assert.Equal(t, "", qs.takeFreed(q), "noted once")
	qs.releasedSlot(base, slot) // a late copy, during w1's attempt
	assert.False(t, woken(w2), "a copy during the attempt wakes nobody")

	t.Run("got it: the copies were of its own release", func(t *testing.T) {
		qs.triedFreed(q, slot, true, false)
		qs.endAttempt(q, w1)
		assert.False(t, woken(w1) || woken(w2))
		assert.Equal(t, "", qs.takeFreed(q))
	})
	t.Run("refused, with a copy during the attempt: noted again", func(t *testing.T) {
		qs.releasedSlot(base, slot)
		require.True(t, woken(w1))
		require.True(t, qs.startAttempt(q, w1))
		require.Equal(t, slot, qs.takeFreed(q))
		qs.releasedSlot(base, slot)
		qs.triedFreed(q, slot, false, false)
		assert.True(t, woken(w2), "the idle head is woken for it")
		qs.endAttempt(q, w1)
		assert.Equal(t, slot, qs.takeFreed(q))
	})
	t.Run("untried: handed to another head", func(t *testing.T) {
		qs.releasedSlot(base, "s#permit:3")
		require.True(t, woken(w1))
		require.True(t, qs.startAttempt(q, w1))
		require.Equal(t, "s#permit:3", qs.takeFreed(q))
		qs.triedFreed(q, "s#permit:3", false, true)
		assert.True(t, woken(w2))
		qs.endAttempt(q, w1)
		assert.Equal(t, "s#permit:3", qs.takeFreed(q))
	})
	qs.leave(q, w1, time.Time{})
	qs.leave(q, w2, time.Time{})
	assert.Empty(t, qs.sems, "nothing kept once the queue is empty")
	assert.Empty(t, qs.semsOf)
}

// A copy of a slot's release that arrives once the head that took the slot
// ended its attempt with it, but before its attempt returned (the Client's
// won), is dropped: it used to be noted freed again and to wake another
// head for the slot the winner holds (a refused attempt, then the slots
// read and every other slot: seen as 7 attempts for 4 hand-offs in
// TestSemaphoreWaiterTriesTheReleasedSlotFirst on a loaded machine).
func TestSemaphoreQueueDropsACopyAfterTheWin(t *testing.T) {
	const base, slot = "s#permit:", "s#permit:1"
	q, qs, w1, w2 := twoWaitersOnSemaphore(base)
	require.True(t, qs.heard(slot, "release-1"), "the first copy of a release is heard")
	qs.releasedSlot(base, slot)
	require.True(t, woken(w1))
	require.True(t, qs.startAttempt(q, w1))
	require.Equal(t, slot, qs.takeFreed(q))
	qs.triedFreed(q, slot, true, false) // w1 got the slot
	// A late copy of the same release, before w1's attempt returned.
	if qs.heard(slot, "release-1") {
		qs.releasedSlot(base, slot)
	}
	assert.False(t, woken(w2), "a copy of the release w1 won wakes nobody")
	assert.Equal(t, "", qs.takeFreed(q), "and notes nothing")
	qs.endAttempt(q, w1)
	qs.leave(q, w1, time.Time{})
	qs.leave(q, w2, time.Time{})
}

// A failed attempt's clean-up publishes the keys it deleted, as a release
// does: attempts that split the votes (or a winner refused by the
// granted-lock check while a release was on its way) leave keys that
// refused other waiters, and the clean-up that deletes them must wake
// those waiters, or they sleep until the holder's end or the poll
// fallback with the lock free (found by a stress run of 6 Clients × 3
// waiters on a semaphore of 1: 2 s gaps). Before, the clean-up published
// nothing.
func TestCleanupOfAFailedAttemptNotifiesWaiters(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	rdbs := direct(t)
	key := newKey(t)
	// Another owner holds the key on masters 0–2: this attempt gets the
	// votes of 3 and 4 only, and cleans them up.
	for _, r := range rdbs[:3] {
		require.NoError(t, r.Set(ctx, key, "other", time.Minute).Err())
	}
	ps := rdbs[4].Subscribe(ctx, c.releaseChannel())
	defer ps.Close()
	_, err := ps.Receive(ctx) // subscribed
	require.NoError(t, err)
	_, err = c.Acquire(ctx, key, time.Minute)
	require.ErrorIs(t, err, ErrLockHeld)
	select {
	case msg := <-ps.Channel():
		_, got, ok := releaseMessage(msg.Payload)
		assert.True(t, ok, msg.Payload)
		assert.Equal(t, key, got)
	case <-time.After(5 * time.Second):
		t.Fatal("the clean-up deleted its key on master 4 and published nothing")
	}
	n, err := rdbs[4].Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "cleaned up")
}

// Callers of one semaphore that ask for different permits wait apart: a
// caller asking for 3 behind waiters asking for 1 (which only take slot
// 0, held) gets slot 1 or 2 at once. Before, it joined their queue
// without an attempt, behind heads that never left, and waited out its
// whole wait with two slots free (found by a break-it run: 8 of 8).
func TestSemaphoreCallerWithMorePermitsIsNotStuckBehindFewer(t *testing.T) {
	c, _, name := permitWaitSetup(t)
	ctx := context.Background()
	held := holdAllPermits(t, c, name, 1)
	few, fewWG := permitWaiters(t, c, name, 1, 3)
	waitingIs(t, c, 3)
	p, err := c.AcquirePermit(ctx, name, 3, time.Minute, WithWait(5*time.Second))
	require.NoError(t, err, "slots 1 and 2 were free all along")
	assert.Contains(t, []int{1, 2}, p.Slot)
	require.NoError(t, p.Release(ctx))

	// A release of a slot wakes the callers that can take it: slot 2
	// freed, the caller asking for 3 gets it, not one asking for 1.
	var more []*Permit
	for range 2 {
		p, err := c.AcquirePermit(ctx, name, 3, time.Minute)
		require.NoError(t, err)
		more = append(more, p)
	}
	many, manyWG := permitWaiters(t, c, name, 3, 1)
	waitingIs(t, c, 4)
	for _, p := range more {
		if p.Slot == 2 {
			require.NoError(t, p.Release(ctx))
		}
	}
	manyWG.Wait()
	got := <-many
	assert.Equal(t, 2, got.Slot)
	for _, p := range append(more, got) {
		if p.Slot != 2 || p == got {
			require.NoError(t, p.Release(ctx))
		}
	}
	require.NoError(t, held[0].Release(ctx))
	for range 3 { // the waiters asking for 1 take slot 0 in turn
		require.NoError(t, (<-few).Release(ctx))
	}
	fewWG.Wait()
}

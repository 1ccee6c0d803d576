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
	defer func(d time.Duration) { pollFallback = d }(pollFallback)
	pollFallback = time.Hour
	c := newClient(t) // its releases notify its own waiters (a Client of another marker key has another channel)
	c1, c2 := c, c
	ctx := context.Background()
	name := newKey(t)
	var held []*Permit
	for range 4 {
		p, err := c1.AcquirePermit(ctx, name, 4, time.Minute)
		require.NoError(t, err)
		held = append(held, p)
	}
	got, wg := permitWaiters(t, c2, name, 4, 4)
	require.Eventually(t, func() bool { return c2.Waiting() == 4 }, 10*time.Second, time.Millisecond)
	before := settledAttempts(t, c2)
	for i, h := range held {
		require.NoError(t, h.Release(ctx))
		require.Eventually(t, func() bool { return c2.Waiting() == 3-i }, 10*time.Second, time.Millisecond)
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
	defer func(d time.Duration) { pollFallback = d }(pollFallback)
	pollFallback = time.Hour
	c := newClient(t) // its releases notify its own waiters (a Client of another marker key has another channel)
	c1, c2 := c, c
	ctx := context.Background()
	name := newKey(t)
	var held []*Permit
	for range 2 {
		p, err := c1.AcquirePermit(ctx, name, 2, time.Minute)
		require.NoError(t, err)
		held = append(held, p)
	}
	first, wg := permitWaiters(t, c2, name, 2, 2)
	require.Eventually(t, func() bool { return c2.Waiting() == 2 }, 10*time.Second, time.Millisecond)
	before := settledAttempts(t, c2)
	late, lateWG := permitWaiters(t, c2, name, 2, 1)
	require.Eventually(t, func() bool { return c2.Waiting() == 3 }, 10*time.Second, time.Millisecond)
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

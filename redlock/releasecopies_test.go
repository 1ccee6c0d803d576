package redlock

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every master that deletes a lock publishes the release; each copy used
// to wake a waiter, and a copy that arrived after a waiter took the lock
// woke the next waiter for an attempt the new holder refused (the cause
// of TestSemaphoreWaiterTriesTheReleasedSlotFirst failing in CI, 3 runs
// in 40 on a loaded machine: 6 or 7 attempts for 4 hand-offs). Here the
// copies of a real release are published again after the hand-off, on
// every master: they wake nobody, since a waiter here won the key after
// hearing that release. A message of another release of the key (another
// id), the negative control, still wakes the head.
func TestLateCopiesOfAReleaseWakeNobody(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hold takes what the waiters wait for; wait waits for it.
		hold func(c *Client, key string) (*Lock, error)
		wait func(c *Client, key string) (*Lock, error)
	}{
		{"lock",
			func(c *Client, key string) (*Lock, error) { return c.Acquire(context.Background(), key, time.Minute) },
			func(c *Client, key string) (*Lock, error) {
				return c.Acquire(context.Background(), key, time.Minute, WithWait(50*time.Second))
			}},
		{"semaphore",
			func(c *Client, key string) (*Lock, error) {
				p, err := c.AcquirePermit(context.Background(), key, 1, time.Minute)
				if err != nil {
					return nil, err
				}
				return p.Lock, nil
			},
			func(c *Client, key string) (*Lock, error) {
				p, err := c.AcquirePermit(context.Background(), key, 1, time.Minute, WithWait(50*time.Second))
				if err != nil {
					return nil, err
				}
				return p.Lock, nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, key := permitWaitSetup(t) // no poll fallback
			ctx := context.Background()
			rdbs := direct(t)
			held, err := tc.hold(c, key)
			require.NoError(t, err)
			got := waitersOn(t, c, 2, func() (*Lock, error) { return tc.wait(c, key) })
			// Every copy of the release reaches c: heard on one master
			// only, the copies published below would be its first.
			require.Eventually(t, subscribedEverywhere(rdbs, c), 10*time.Second, 10*time.Millisecond)
			ps := rdbs[0].Subscribe(ctx, c.releaseChannel())
			defer ps.Close()
			_, err = ps.Receive(ctx) // subscribed
			require.NoError(t, err)
			require.NoError(t, held.Release(ctx))
			var payload string
			select {
			case msg := <-ps.Channel():
				payload = msg.Payload
			case <-time.After(5 * time.Second):
				t.Fatal("the release published nothing on master 0")
			}
			assert.Equal(t, releaseID(held.Token()), payload[:releaseIDLen], "the message starts with the release's id")
			first := <-got
			waitingIs(t, c, 1)
			before := settledAttempts(t, c)

			for _, r := range rdbs {
				require.NoError(t, r.Publish(ctx, c.releaseChannel(), payload).Err())
			}
			assert.Equal(t, before, settledAttempts(t, c), "a late copy of the release woke the waiter")

			// The negative control: another release of the key (another
			// id, not won here) wakes the head.
			other := "ffffffffffffffff" + payload[releaseIDLen:]
			require.NotEqual(t, payload, other)
			require.NoError(t, rdbs[0].Publish(ctx, c.releaseChannel(), other).Err())
			assert.Equal(t, before+1, settledAttempts(t, c), "another release of the key wakes the head for one attempt")

			require.NoError(t, first.Release(ctx))
			require.NoError(t, (<-got).Release(ctx))
			require.Eventually(t, func() bool {
				c.waits.mu.Lock()
				defer c.waits.mu.Unlock()
				return len(c.waits.recent) == 0
			}, 5*time.Second, time.Millisecond, "no release id kept once no waiter is left")
		})
	}
}

// heard drops the copies of a release heard before a waiter here won the
// key, and only those: a copy after a failed attempt still wakes (the
// attempt may have come before the release reached a majority). It
// remembers only keys a waiter waits for (a lock's queue, a multi-key
// queue watching it, a semaphore queue that can take the slot).
func TestHeardDropsCopiesOfReleasesBeforeAWin(t *testing.T) {
	var q waitQueues
	assert.True(t, q.heard("k", "a"))
	q.won([]string{"k"})
	assert.True(t, q.heard("k", "a"), "nobody waits for k: not remembered")
	assert.Empty(t, q.recent)

	w := q.join("k", nil)
	assert.True(t, q.heard("k", "a"))
	assert.True(t, q.heard("k", "a"), "a copy after a failed attempt wakes")
	q.won([]string{"k"})
	assert.False(t, q.heard("k", "a"), "a copy after the win")
	for _, id := range []string{"b", "c", "d"} {
		assert.True(t, q.heard("k", id))
		q.won([]string{"k"})
	}
	assert.False(t, q.heard("k", "a"), "still among the last 4 won")
	assert.True(t, q.heard("k", "e"))
	q.won([]string{"k"})
	assert.True(t, q.heard("k", "a"), "pushed out by e")
	assert.Len(t, q.recent["k"].taken, recentReleases)
	q.leave("k", w, time.Time{})
	assert.Empty(t, q.recent, "forgotten with the queue")

	q.watch("multi", []string{"k", "l"})
	assert.True(t, q.heard("k", "a"))
	assert.True(t, q.heard("l", "a"))
	q.won([]string{"k", "l"})
	assert.False(t, q.heard("k", "a"))
	assert.False(t, q.heard("l", "a"))
	q.unwatch("multi", []string{"k", "l"})
	assert.Empty(t, q.recent)

	base := "s" + permitSep
	queue := permitWaitQueue(base, 2)
	w = q.join(queue, &permitWait{base: base, permits: 2})
	assert.True(t, q.heard(PermitKey("s", 1), "a"))
	q.won([]string{PermitKey("s", 1)})
	assert.False(t, q.heard(PermitKey("s", 1), "a"))
	assert.True(t, q.heard(PermitKey("s", 2), "a"))
	q.won([]string{PermitKey("s", 2)})
	assert.True(t, q.heard(PermitKey("s", 2), "a"), "slot 2 is not one these callers take")
	q.leave(queue, w, time.Time{})
	assert.Empty(t, q.recent)
}

func TestReleaseMessage(t *testing.T) {
	id, key, ok := releaseMessage("0123456789abcdef" + "lock:k")
	assert.True(t, ok)
	assert.Equal(t, "0123456789abcdef", id)
	assert.Equal(t, "lock:k", key)
	_, _, ok = releaseMessage("0123456789abcdef")
	assert.False(t, ok, "no key")
	_, _, ok = releaseMessage("lock:k")
	assert.False(t, ok, "too short for an id and a key")
}

// A head that leaves with the lock wakes the waiter made a head in its
// place to wait for the winner's end (due), not to attempt: the key is
// held by the one that left, and for a semaphore, an attempt at once took
// slots whose release was on its way to a head that came earlier
// (TestSemaphoreNewWaiterJoinsBehindTheQueue failed 5 times in 140 runs
// on a loaded machine). One that leaves without it (its wait ran out)
// wakes it to attempt. A release noted after the win clears the due: the
// head attempts at once.
func TestHeadLeavingWithTheLockHandsOnItsEnd(t *testing.T) {
	end := time.Now().Add(time.Minute)
	for _, until := range []time.Time{end, {}} {
		var q waitQueues
		base := "s" + permitSep
		queue := permitWaitQueue(base, 2)
		ws := make([]*waiter, 3)
		for i := range ws {
			ws[i] = q.join(queue, &permitWait{base: base, permits: 2})
		}
		q.leave(queue, ws[0], until)
		assert.True(t, woken(ws[2]), "the new head is woken")
		assert.Equal(t, until, q.takeDue(ws[2]), "and waits for the winner's end")

		lock := q.join("k", nil)
		next := q.join("k", nil)
		q.leave("k", lock, until)
		q.released("k")
		assert.True(t, woken(next))
		assert.True(t, q.takeDue(next).IsZero(), "a release since: attempt at once")
	}
	// The timer came first: takeDue takes the wake that carried the due.
	var q waitQueues
	lock := q.join("k", nil)
	next := q.join("k", nil)
	q.leave("k", lock, end)
	assert.Equal(t, end, q.takeDue(next))
	assert.False(t, woken(next), "the due's wake is taken with it")

	// Made a head by a winner between its own takeDue (a poll, before it
	// was a head) and its attempt: it does not attempt, the next round
	// takes the due and waits for the winner's end.
	var p waitQueues
	lock = p.join("k", nil)
	next = p.join("k", nil)
	assert.True(t, p.takeDue(next).IsZero())
	p.leave("k", lock, end)
	assert.False(t, p.startAttempt("k", next), "a due set since its wake")
	assert.Equal(t, end, p.takeDue(next))
	assert.True(t, p.startAttempt("k", next), "at its due")
	p.endAttempt("k", next)
}

// A waiter made a head by one that won the lock gets it when the winner
// ends without a release (its caller died): it attempts when the winner's
// key ends on the masters, with no notification and no poll
// (pollFallback is an hour here), and that one attempt gets it. At the
// winner's ValidUntil (drift earlier, at least 12 ms for a 1 s TTL) the
// key is still on every master: refused, and a second attempt. A round
// may take two on a loaded machine too (the winner's SET reached a
// master more than a millisecond after it started), so one of three
// rounds must take one.
func TestPromotedHeadGetsTheLockAtTheWinnersEnd(t *testing.T) {
	c, _, _ := permitWaitSetup(t) // no poll fallback
	ctx := context.Background()
	var attempts []int64
	for round := range 3 {
		key := fmt.Sprintf("%s:%d", newKey(t), round)
		held, err := c.Acquire(ctx, key, time.Minute)
		require.NoError(t, err)
		got := waitersOn(t, c, 2, func() (*Lock, error) {
			return c.Acquire(ctx, key, time.Second, WithWait(20*time.Second))
		})
		require.NoError(t, held.Release(ctx))
		first := <-got // never released: it ends by its TTL
		before := settledAttempts(t, c)
		select {
		case second := <-got:
			assert.False(t, second.ValidUntil().Before(first.ValidUntil()))
			assert.Greater(t, second.Fence(), first.Fence())
			attempts = append(attempts, c.attempts.Load()-before)
			require.NoError(t, second.Release(ctx))
		case <-time.After(15 * time.Second):
			t.Fatal("the next waiter did not get the lock after the winner's 1 s TTL")
		}
		if attempts[len(attempts)-1] == 1 {
			return
		}
	}
	t.Fatalf("attempts of the promoted head per round: %v; want one round with 1", attempts)
}

// A hand-off of a lock costs one attempt: the waiter that gets it. The
// next waiter, made the head, waits for the release instead of making an
// attempt the new holder refuses (before: two attempts). The lock is
// deleted on every master before one message says so: the first attempt
// cannot come before the release reached a majority (as it can with a
// real release on a loaded machine, and then takes two).
func TestHandOffCostsOneAttempt(t *testing.T) {
	c, _, key := permitWaitSetup(t) // no poll fallback
	ctx := context.Background()
	rdbs := direct(t)
	_, err := c.Acquire(ctx, key, time.Minute)
	require.NoError(t, err)
	got := waitersOn(t, c, 2, func() (*Lock, error) {
		return c.Acquire(ctx, key, time.Minute, WithWait(50*time.Second))
	})
	// Subscribed everywhere: a subscription made later wakes the head.
	require.Eventually(t, subscribedEverywhere(rdbs, c), 10*time.Second, 10*time.Millisecond)
	before := settledAttempts(t, c)
	for _, r := range rdbs {
		require.NoError(t, r.Del(ctx, key).Err())
	}
	require.NoError(t, rdbs[0].Publish(ctx, c.releaseChannel(), "0123456789abcdef"+key).Err())
	first := <-got
	assert.Equal(t, before+1, settledAttempts(t, c), "attempts for one hand-off")
	require.NoError(t, first.Release(ctx))
	require.NoError(t, (<-got).Release(ctx))
}

// releaseID is FNV-1a (hash/fnv) of the token, in 16 hex digits.
func TestReleaseID(t *testing.T) {
	for _, token := range []string{"", "a", "0123456789abcdef0123456789abcdef"} {
		h := fnv.New64a()
		h.Write([]byte(token))
		assert.Equal(t, fmt.Sprintf("%016x", h.Sum64()), releaseID(token))
	}
	assert.Len(t, releaseID("x"), releaseIDLen)
}

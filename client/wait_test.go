package client_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
)

// truthEnd is the latest the lock key (the caller's key, with token) can
// be held: a quorum of the masters hold it at most until the quorum-th
// longest PTTL, read after now. A validity that ends after it is later
// than the truth.
func truthEnd(t *testing.T, key, token string) time.Time {
	t.Helper()
	ctx := context.Background()
	var pttls []time.Duration
	for _, s := range servers {
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		// The daemon's Redis key ends with the caller's key, length-prefixed.
		keys, err := r.Keys(ctx, "*:"+strconv.Itoa(len(key))+":"+key).Result()
		require.NoError(t, err)
		for _, k := range keys {
			if v, err := r.Get(ctx, k).Result(); err == nil && v == token {
				p, err := r.PTTL(ctx, k).Result()
				require.NoError(t, err)
				pttls = append(pttls, p)
			}
		}
		r.Close()
	}
	after := time.Now()
	require.GreaterOrEqual(t, len(pttls), 3, "the lock is on fewer than a quorum of masters")
	slices.Sort(pttls)
	return after.Add(pttls[len(pttls)-3])
}

// TestValidityAfterAWait: a lease won after a wait_ms wait counts its
// validity from the daemon's answer (sent + elapsed_ms + validity_ms), not
// from the moment the request was sent: it is not lost at once, its
// validity is never later than the masters' expiry, and kept alive it
// holds. Waits end just before the waiter's TTL, just after it, and at
// three times it. Before elapsed_ms, a wait longer than the TTL made the
// lease lost on arrival.
func TestValidityAfterAWait(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	const ttl = 2 * time.Second
	for _, wait := range []time.Duration{ttl * 9 / 10, ttl * 11 / 10, 3 * ttl} {
		t.Run(wait.String(), func(t *testing.T) {
			ctx := context.Background()
			key := "wait:" + wait.String()
			held, err := c.Acquire(ctx, key, time.Minute)
			require.NoError(t, err)
			time.AfterFunc(wait, func() { _ = held.Release(ctx) })
			start := time.Now()
			l, err := c.Acquire(ctx, key, ttl, client.WithWait(wait+10*time.Second))
			require.NoError(t, err)
			now := time.Now()
			require.GreaterOrEqual(t, now.Sub(start), wait, "the acquire did not wait for the release")
			require.NoError(t, l.Err(), "lost on arrival after a %v wait", wait)
			assert.Greater(t, l.ValidUntil().Sub(now), ttl/2, "the wait was charged against the validity")
			assert.False(t, l.ValidUntil().After(truthEnd(t, key, l.Token())), "validity ends after the lock does")

			st, err := c.Status(ctx, key)
			require.NoError(t, err)
			require.True(t, st.Held)
			assert.False(t, st.ValidUntil.After(truthEnd(t, key, l.Token())), "status validity ends after the lock does")

			l.KeepAlive(ctx)
			select {
			case <-l.Done():
				t.Fatalf("kept-alive lease lost: %v", l.Err())
			case <-time.After(2 * ttl):
			}
			require.NoError(t, l.Release(ctx))
		})
	}
}

// TestStopWaitingNeverStrandsALock: stopping a wait (WithStopWaiting) as
// the lock is handed over, at moments spread around the holder's release,
// gives the caller either the lock (which it then releases) or an error,
// and in both cases leaves the key free: never a lock held on the masters
// whose token nobody has. A stop during the wait answers at once.
func TestStopWaitingNeverStrandsALock(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()

	held, err := c.Acquire(ctx, "stop:early", time.Minute)
	require.NoError(t, err)
	stop := make(chan struct{})
	time.AfterFunc(100*time.Millisecond, func() { close(stop) })
	start := time.Now()
	_, err = c.Acquire(ctx, "stop:early", 30*time.Second, client.WithWait(10*time.Second), client.WithStopWaiting(stop))
	require.ErrorIs(t, err, client.ErrLockHeld, "a stopped wait did not obtain the lock: %v", err)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "cancelled", ce.Code)
	assert.Less(t, time.Since(start), 5*time.Second, "the daemon stopped the wait when the caller left")
	require.NoError(t, held.Release(ctx))

	won, lost := 0, 0
	for i := range 30 {
		key := "stop:race:" + strconv.Itoa(i)
		held, err := c.Acquire(ctx, key, time.Minute)
		require.NoError(t, err)
		stop := make(chan struct{})
		done := make(chan struct{})
		var l *client.Lease
		var werr error
		go func() {
			defer close(done)
			l, werr = c.Acquire(ctx, key, 30*time.Second, client.WithWait(10*time.Second), client.WithStopWaiting(stop))
		}()
		time.Sleep(20 * time.Millisecond) // the waiter is waiting
		// The stop lands from 1.5 ms before to 1.5 ms after the release
		// is sent: around the grant.
		offset := time.Duration(i%7-3) * 500 * time.Microsecond
		if offset < 0 {
			time.AfterFunc(-offset, func() { close(stop) })
			require.NoError(t, held.Release(ctx))
		} else {
			require.NoError(t, held.Release(ctx))
			time.AfterFunc(offset, func() { close(stop) })
		}
		<-done
		if werr == nil {
			won++
			require.NoError(t, l.Release(ctx))
		} else {
			lost++
		}
		st, err := c.Status(ctx, key)
		require.NoError(t, err)
		assert.False(t, st.Held, "round %d (stop %v from the release): the key is still held; acquire said %v", i, offset, werr)
	}
	t.Logf("30 stops around a hand-over: %d got the lock (and released it), %d did not", won, lost)
}

package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeepAliveHoldsForThreeTTL: a lock kept alive for 3× its TTL stays
// held by the same token and fence, and nobody else gets it meanwhile.
func TestKeepAliveHoldsForThreeTTL(t *testing.T) {
	c := newClient(t)
	key := newKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = 2 * time.Second

	l, err := c.Acquire(ctx, key, ttl)
	require.NoError(t, err)
	l.KeepAlive(ctx)
	first := l.ValidUntil()
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		_, err := c.Acquire(ctx, key, ttl)
		require.ErrorIs(t, err, ErrLockHeld)
		select {
		case <-l.Done():
			t.Fatalf("lost while kept alive: %v", l.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.NoError(t, l.Err())
	assert.True(t, l.ValidUntil().After(first.Add(2*ttl)), "validity moved with the extends")
	st, err := c.Status(ctx, key)
	require.NoError(t, err)
	assert.True(t, st.Held)
	require.NoError(t, l.Release(ctx))
	<-l.Done()
	require.ErrorIs(t, l.Err(), ErrReleased)
	// No other acquisition took a fence meanwhile: the next one follows.
	next, err := c.Acquire(ctx, key, ttl)
	require.NoError(t, err)
	assert.Equal(t, l.Fence()+1, next.Fence())
	require.NoError(t, next.Release(ctx))
}

func TestDoneBeforeValidityWhenMastersPause(t *testing.T) {
	c := newClient(t)
	key := newKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	l, err := c.Acquire(ctx, key, 3*time.Second)
	require.NoError(t, err)
	l.KeepAlive(ctx)
	withMasters(t, "pause", 2, 3, 4)
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed")
	}
	lostAt := time.Now()
	assert.True(t, lostAt.Before(l.ValidUntil()), "Done closed at %v, validity ends %v", lostAt, l.ValidUntil())
	require.ErrorIs(t, l.Err(), ErrLost)
	require.ErrorIs(t, l.Err(), ErrQuorumUnavailable, "the last extend's error: %v", l.Err())
}

func TestDoneWhenExtendRefused(t *testing.T) {
	c := newClient(t)
	key := newKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	l, err := c.Acquire(ctx, key, 600*time.Millisecond)
	require.NoError(t, err)
	done := l.Done()
	// A stale copy of the token releases it behind the holder's back.
	_, err = c.Release(ctx, key, l.Token())
	require.NoError(t, err)
	l.KeepAlive(ctx)
	<-done
	require.ErrorIs(t, l.Err(), ErrLost)
	require.ErrorIs(t, l.Err(), ErrNotHeld, "refused, not timed out: %v", l.Err())
}

// TestDoneWhenAnExtendOfItsOwnIsRefused: the holder's own Extend (no
// KeepAlive) refused ends the lock as lost at once, as ErrLost says: Err
// returns it with ErrNotHeld joined and Done is closed, long before the
// validity ends; a later Extend sends nothing. A black-box pass found Err
// nil and Done open until the end of the validity.
func TestDoneWhenAnExtendOfItsOwnIsRefused(t *testing.T) {
	c := newClient(t)
	key := newKey(t)
	ctx := context.Background()
	l, err := c.Acquire(ctx, key, 30*time.Second)
	require.NoError(t, err)
	done := l.Done()
	_, err = c.Release(ctx, key, l.Token()) // behind the holder's back
	require.NoError(t, err)
	require.ErrorIs(t, l.Extend(ctx, 30*time.Second), ErrNotHeld)
	select {
	case <-done:
	default:
		t.Fatal("Done is open after a refused extend")
	}
	require.ErrorIs(t, l.Err(), ErrLost)
	require.ErrorIs(t, l.Err(), ErrNotHeld)
	err = l.Extend(ctx, 30*time.Second)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.ErrorContains(t, err, "extend not sent")

	// An extend that fails without a refusal (no quorum answered) is not
	// a loss: the lock stays held until its validity says otherwise.
	l2, err := c.Acquire(ctx, newKey(t), 30*time.Second)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, l2.Extend(cctx, 30*time.Second))
	require.NoError(t, l2.Err(), "a cancelled extend says nothing of the lock")
	require.NoError(t, l2.Release(ctx))
}

func TestDoneWithoutKeepAlive(t *testing.T) {
	c := newClient(t)
	l, err := c.Acquire(context.Background(), newKey(t), 3*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Err())
	<-l.Done()
	assert.True(t, time.Now().Before(l.ValidUntil()))
	require.ErrorIs(t, l.Err(), ErrLost)

	// Err alone notices the end of validity too.
	l2, err := c.Acquire(context.Background(), newKey(t), 300*time.Millisecond)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return l2.Err() != nil }, 5*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, l2.Err(), ErrLost)
}

func TestKeepAliveStopsWithContext(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := c.Acquire(ctx, newKey(t), 600*time.Millisecond)
	require.NoError(t, err)
	l.KeepAlive(ctx)
	cancel()
	// Extending stopped; the loss signal still comes when validity ends.
	<-l.Done()
	require.ErrorIs(t, l.Err(), ErrLost)
}

package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The extends, acquires and releases that must send nothing, found by a
// black-box pass of the library: an extend whose caller's context had
// already ended, an extend of a lock its holder was told is lost, and any
// call after Close; and a keep-alive that outlived Close.

// longestPTTL is the longest remaining TTL of key over the test masters.
func longestPTTL(t *testing.T, key string) time.Duration {
	t.Helper()
	var longest time.Duration
	for _, r := range direct(t) {
		longest = max(longest, r.PTTL(context.Background(), key).Val())
	}
	return longest
}

// onAnyMaster reports whether key exists on a test master.
func onAnyMaster(t *testing.T, key string) bool {
	t.Helper()
	for _, r := range direct(t) {
		if r.Exists(context.Background(), key).Val() != 0 {
			return true
		}
	}
	return false
}

// TestExtendWithAnEndedContextSendsNothing: the extend reported failure
// (every master "failed" with the context's error) while it lengthened
// the key on every master to the new TTL.
func TestExtendWithAnEndedContextSendsNothing(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	key := newKey(t)
	l, err := c.Acquire(ctx, key, 5*time.Second)
	require.NoError(t, err)
	validUntil := l.ValidUntil()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	err = l.Extend(ended, 50*time.Second)
	require.ErrorIs(t, err, context.Canceled)
	_, err = c.Extend(ended, key, l.Token(), 50*time.Second)
	require.ErrorIs(t, err, context.Canceled)
	past, stop := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer stop()
	_, err = c.ExtendMulti(past, []string{key}, l.Token(), 50*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.LessOrEqual(t, longestPTTL(t, key), 5*time.Second, "no master lengthened the key")
	assert.Equal(t, validUntil, l.ValidUntil())
	require.NoError(t, l.Extend(ctx, 50*time.Second), "a live context extends")
	assert.Greater(t, longestPTTL(t, key), 45*time.Second)
	require.NoError(t, l.Release(ctx))
}

// TestExtendOfAnEndedLockSendsNothing: once Done is closed (the lock lost
// by time) or the lock released, Lock.Extend does not bring the validity
// back: before, it succeeded while the keys were still there and left the
// Lock lost (Done closed, Err ErrLost) and valid at once.
func TestExtendOfAnEndedLockSendsNothing(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	key := newKey(t)
	l, err := c.Acquire(ctx, key, time.Second)
	require.NoError(t, err)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the loss time")
	}
	before, validUntil := longestPTTL(t, key), l.ValidUntil()
	err = l.Extend(ctx, time.Second)
	require.ErrorIs(t, err, ErrLost)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.LessOrEqual(t, longestPTTL(t, key), before, "not lengthened")
	assert.Equal(t, validUntil, l.ValidUntil(), "the validity is not moved")
	require.ErrorIs(t, l.Err(), ErrLost)

	r, err := c.Acquire(ctx, newKey(t), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, r.Release(ctx))
	err = r.Extend(ctx, 10*time.Second)
	require.ErrorIs(t, err, ErrReleased)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.False(t, onAnyMaster(t, r.Key()), "nothing set again")
}

// TestNothingIsSentAfterClose: an acquire, an extend and a release after
// Close answer ErrClosed alone, not a quorum failure of five masters that
// "failed" with it.
func TestNothingIsSentAfterClose(t *testing.T) {
	ctx := context.Background()
	c, err := New(masterOptions())
	require.NoError(t, err)
	held, err := c.Acquire(ctx, newKey(t), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	key := newKey(t)
	_, err = c.Acquire(ctx, key, time.Second)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.NotErrorIs(t, err, ErrQuorumUnavailable)
	assert.False(t, onAnyMaster(t, key), "nothing set")
	err = held.Extend(ctx, 10*time.Second)
	require.ErrorIs(t, err, ErrClosed)
	assert.NotErrorIs(t, err, ErrQuorumUnavailable)
	_, err = c.Release(ctx, held.Key(), held.Token())
	require.ErrorIs(t, err, ErrClosed)
	assert.NotErrorIs(t, err, ErrQuorumUnavailable)
	assert.Greater(t, longestPTTL(t, held.Key()), 5*time.Second, "the held lock stays (Close releases nothing)")
	// The reads too (a black-box pass saw status, semaphore status and
	// the listing answer a quorum failure as well, which a caller retries).
	_, err = c.Status(ctx, held.Key())
	require.ErrorIs(t, err, ErrClosed)
	assert.NotErrorIs(t, err, ErrQuorumUnavailable)
	_, err = c.StatusMulti(ctx, []string{held.Key(), key})
	require.ErrorIs(t, err, ErrClosed)
	assert.NotErrorIs(t, err, ErrQuorumUnavailable)
	_, err = c.SemaphoreStatus(ctx, "sem:"+t.Name(), 2)
	require.ErrorIs(t, err, ErrClosed)
	assert.NotErrorIs(t, err, ErrQuorumUnavailable)
	_, err = c.List(ctx, "", "", 10)
	require.ErrorIs(t, err, ErrClosed)
	assert.NotErrorIs(t, err, ErrQuorumUnavailable)
}

// TestKeepAliveStopsAtClose: a keep-alive's goroutine returns when its
// Client is closed (before, it tried an extend every tenth of the TTL until
// the loss time, each failing with ErrClosed); Done still closes at the loss
// time, with ErrClosed in Err.
func TestKeepAliveStopsAtClose(t *testing.T) {
	ctx := context.Background()
	c, err := New(masterOptions())
	require.NoError(t, err)
	l, err := c.Acquire(ctx, newKey(t), 2*time.Second)
	require.NoError(t, err)
	l.KeepAlive(ctx)
	require.NoError(t, c.Close())
	l.keep.mu.Lock()
	exited := l.keep.exited
	l.keep.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(time.Second):
		t.Fatal("the keep-alive goroutine still runs after Close")
	}
	assert.NoError(t, l.Err(), "still valid: the loss signal waits for the loss time")
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the loss time")
	}
	require.ErrorIs(t, l.Err(), ErrLost)
	require.ErrorIs(t, l.Err(), ErrClosed)
}

// TestReleaseWithAnEndedContext: a release deferred with a context that has
// ended is sent and awaited (at most the per-master timeout), and says
// what the masters did: before, it was sent and answered "quorum
// unavailable, 5 master(s) failed" while every master deleted the key.
func TestReleaseWithAnEndedContext(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	l, err := c.Acquire(ctx, newKey(t), 10*time.Second)
	require.NoError(t, err)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, l.Release(ended))
	assert.False(t, onAnyMaster(t, l.Key()), "released everywhere")
	_, err = c.Release(ended, l.Key(), l.Token())
	require.ErrorIs(t, err, ErrNotHeld, "the second release finds it gone")
}

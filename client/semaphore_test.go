package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
)

// TestSemaphoreLeases: through the real daemon, a semaphore of two
// permits grants two leases on different slots and refuses a third; a
// lease's extend and release act on its own slot; status counts them.
func TestSemaphoreLeases(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()
	perm := client.WithPermits(2)

	l1, err := c.Acquire(ctx, "export:m5", 30*time.Second, perm, client.WithNamespace("ns"))
	require.NoError(t, err)
	l2, err := c.Acquire(ctx, "export:m5", 30*time.Second, perm, client.WithNamespace("ns"))
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{0, 1}, []int{l1.Slot(), l2.Slot()})
	assert.NotEqual(t, l1.Token(), l2.Token())
	_, err = c.Acquire(ctx, "export:m5", 30*time.Second, perm, client.WithNamespace("ns"))
	require.ErrorIs(t, err, client.ErrLockHeld)

	st, err := l1.Status(ctx)
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.Equal(t, 2, st.Permits)
	assert.Equal(t, 2, st.Taken)
	assert.Greater(t, st.NextFree, 20*time.Second)

	require.NoError(t, l1.Extend(ctx, 60*time.Second))
	assert.Equal(t, 60*time.Second, l1.TTL())
	require.NoError(t, l1.Release(ctx))
	st, err = c.Status(ctx, "export:m5", perm, client.WithNamespace("ns"))
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.Equal(t, 1, st.Taken)

	// The token and slot are all a caller needs to release later.
	require.ErrorIs(t, c.Release(ctx, "export:m5", l2.Token(), client.WithNamespace("ns")), client.ErrNotHeld, "without the slot: the plain lock")
	require.NoError(t, c.Release(ctx, "export:m5", l2.Token(), client.WithNamespace("ns"), client.WithSlot(l2.Slot())))
	l, err := c.Acquire(ctx, "plain", 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, -1, l.Slot())
	require.NoError(t, l.Release(ctx))
}

// TestSemaphoreWithLock: ten callers of WithLock on a semaphore of three
// permits; never more than three run fn at once.
func TestSemaphoreWithLock(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	var mu sync.Mutex
	in, most := 0, 0
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			err := c.WithLock(context.Background(), "exports", 10*time.Second, func(ctx context.Context, l *client.Lease) error {
				mu.Lock()
				in++
				most = max(most, in)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				in--
				mu.Unlock()
				return nil
			}, client.WithPermits(3), client.WithWait(1900*time.Millisecond))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most, 3)
	assert.Equal(t, 3, most, "ten callers never filled the three permits")
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
)

// TestMultiKeyLease: through the real daemon, a lease over a set of keys
// holds every key (a single-key acquire of any of them is refused, as is
// an overlapping set), its extend, status and release act on the whole
// set, and afterwards each key is free again.
func TestMultiKeyLease(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()
	set := client.WithKeys("acct:a", "acct:b", "acct:c")

	l, err := c.Acquire(ctx, "", 30*time.Second, set, client.WithNamespace("ns"))
	require.NoError(t, err)
	assert.Equal(t, "acct:a", l.Key())
	assert.Equal(t, []string{"acct:a", "acct:b", "acct:c"}, l.Keys())
	assert.Positive(t, l.Fence())
	assert.Equal(t, -1, l.Slot())

	for _, k := range []string{"acct:a", "acct:b", "acct:c"} {
		_, err := c.Acquire(ctx, k, 30*time.Second, client.WithNamespace("ns"))
		require.ErrorIs(t, err, client.ErrLockHeld, "key %s of a held set", k)
		st, err := c.Status(ctx, k, client.WithNamespace("ns"))
		require.NoError(t, err)
		assert.True(t, st.Held, k)
		assert.Equal(t, l.Fence(), st.Fence, "every key carries the set's fence")
	}
	_, err = c.Acquire(ctx, "", 30*time.Second, client.WithKeys("acct:z", "acct:c"), client.WithNamespace("ns"))
	require.ErrorIs(t, err, client.ErrLockHeld, "an overlapping set")
	st, err := c.Status(ctx, "acct:z", client.WithNamespace("ns"))
	require.NoError(t, err)
	assert.False(t, st.Held, "a refused set leaves none of its keys")

	st, err = l.Status(ctx)
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.Equal(t, l.Fence(), st.Fence)
	st, err = c.Status(ctx, "", client.WithKeys("acct:c", "acct:a", "acct:b"), client.WithNamespace("ns"))
	require.NoError(t, err)
	assert.True(t, st.Held, "the same set in another order")

	require.NoError(t, l.Extend(ctx, 60*time.Second))
	assert.Equal(t, 60*time.Second, l.TTL())
	assert.Greater(t, time.Until(l.ValidUntil()), 50*time.Second)
	require.NoError(t, l.Release(ctx))
	for _, k := range []string{"acct:a", "acct:b", "acct:c"} {
		st, err := c.Status(ctx, k, client.WithNamespace("ns"))
		require.NoError(t, err)
		assert.False(t, st.Held, "key %s after the release", k)
	}
	require.ErrorIs(t, c.Release(ctx, "", l.Token(), set, client.WithNamespace("ns")), client.ErrNotHeld)

	// The token and keys are all a caller needs to extend and release
	// later, in any order of the keys.
	l2, err := c.Acquire(ctx, "", 30*time.Second, client.WithKeys("x", "y"))
	require.NoError(t, err)
	e, err := c.Extend(ctx, "", l2.Token(), 40*time.Second, client.WithKeys("y", "x"))
	require.NoError(t, err)
	assert.Equal(t, []string{"y", "x"}, e.Keys())
	assert.Equal(t, l2.Fence(), e.Fence())
	require.NoError(t, c.Release(ctx, "", l2.Token(), client.WithKeys("y", "x")))
}

// TestMultiKeyBadInput: what the wire cannot carry fails without a
// request; what the daemon refuses comes back as ErrInvalid with its
// message naming the field and the limit.
func TestMultiKeyBadInput(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()

	_, err := c.Acquire(ctx, "", 30*time.Second, client.WithKeys())
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.ErrorContains(t, err, "keys: WithKeys needs 1 to 64 keys, got none")
	var ce *client.Error
	assert.False(t, errors.As(err, &ce), "refused before any request")

	_, err = c.Acquire(ctx, "a", 30*time.Second, client.WithKeys("a", "b"))
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.ErrorContains(t, err, `key, keys: with WithKeys the key argument must be "", got "a"`)

	_, err = c.Acquire(ctx, "", 30*time.Second, client.WithKeys("a", "b", "a"))
	require.ErrorIs(t, err, client.ErrInvalid)
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, 400, ce.Status)
	assert.Contains(t, ce.Msg, `keys[2]: "a" is keys[0] again`)

	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("k%d", i)
	}
	_, err = c.Acquire(ctx, "", 30*time.Second, client.WithKeys(many...))
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.ErrorContains(t, err, "keys: 65 keys is above the maximum of 64")

	_, err = c.Acquire(ctx, "", 30*time.Second, client.WithKeys("a", "b"), client.WithPermits(2))
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.ErrorContains(t, err, "permits, keys")

	for _, k := range []string{"a", "b", "k0"} {
		st, err := c.Status(ctx, k)
		require.NoError(t, err)
		assert.False(t, st.Held, "a refused request took %s", k)
	}
}

// TestMultiKeyWithLock: six callers of WithLock, each on two of three keys
// in a different order (a,b / b,c / c,a, twice each): two sets that share
// a key never run fn at once, and each caller runs.
func TestMultiKeyWithLock(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	sets := [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"b", "a"}, {"c", "b"}, {"a", "c"}}
	var mu sync.Mutex
	in := map[string]bool{}
	clash, ran := 0, 0
	var wg sync.WaitGroup
	for _, keys := range sets {
		wg.Go(func() {
			err := c.WithLock(context.Background(), "", 10*time.Second, func(ctx context.Context, l *client.Lease) error {
				mu.Lock()
				for _, k := range keys {
					if in[k] {
						clash++
					}
					in[k] = true
				}
				ran++
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				for _, k := range keys {
					in[k] = false
				}
				mu.Unlock()
				return nil
			}, client.WithKeys(keys...), client.WithWait(5*time.Second))
			assert.NoError(t, err, "set %v", keys)
		})
	}
	wg.Wait()
	assert.Equal(t, 0, clash, "two holders of one key at once")
	assert.Equal(t, len(sets), ran)
}

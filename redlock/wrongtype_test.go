package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyOfAnotherTypeIsHeld: a key of another type (a hash the user keeps
// under the name) is held by another owner for every action, one key or a
// set, with fencing or without: not a failure of every master (a release
// answered so was kept and sent again every health round, an extend read
// as no quorum; found by a black-box pass), and the key is left as it was.
func TestKeyOfAnotherTypeIsHeld(t *testing.T) {
	for _, fencing := range []bool{true, false} {
		t.Run(map[bool]string{true: "fencing", false: "no fencing"}[fencing], func(t *testing.T) {
			ctx := context.Background()
			var opts []Option
			if !fencing {
				opts = append(opts, WithFenceKey(""))
			}
			c := newClient(t, opts...)
			key := newKey(t)
			rdbs := direct(t)
			for _, r := range rdbs {
				require.NoError(t, r.HSet(ctx, key, "f", "v").Err())
			}
			token := "0123456789abcdef0123456789abcdef"
			_, err := c.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
			require.ErrorIs(t, err, ErrLockHeld)
			_, err = c.Release(ctx, key, token)
			require.ErrorIs(t, err, ErrNotHeld)
			var oe *OutcomeError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, 5, oe.Foreign, "held by another on every master")
			_, err = c.Extend(ctx, key, token, time.Second)
			require.ErrorIs(t, err, ErrNotHeld)
			st, err := c.Status(ctx, key)
			require.NoError(t, err)
			assert.False(t, st.Held)
			if fencing {
				other := newKey(t)
				_, err = c.ReleaseMulti(ctx, []string{other, key}, token)
				require.ErrorIs(t, err, ErrNotHeld)
				_, err = c.ExtendMulti(ctx, []string{other, key}, token, time.Second)
				require.ErrorIs(t, err, ErrNotHeld)
			}
			assertNoReleaseKept(t, c)
			for _, m := range c.masters {
				assert.True(t, m.counts(), "master %d still counts", m.idx)
			}
			for i, r := range rdbs {
				assert.Equal(t, "hash", r.Type(ctx, key).Val(), "master %d: the user's key untouched", i)
			}
		})
	}
}

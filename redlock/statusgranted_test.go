package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// TestStatusHeldOnFewerThanAQuorum: a lock granted on masters 0–2 whose
// key two of them then lose silently (an operator's DEL) lives on one
// master only. Every acquire is refused (that master's fence record: the
// granted-lock check), so status must not call it free, whether the
// master that keeps it is intact or lost its own bookkeeping, and
// whichever Client reads (the holder's or another daemon's). Found by a
// black-box pass: status answered held:false while acquires answered
// "held by another owner". Without the fix each read below says free.
func TestStatusHeldOnFewerThanAQuorum(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// lose takes the lock's key off masters 0 and 1 (and may touch
		// master 2, the one that keeps it).
		lose func(t *testing.T, f *lossFixture, key string)
	}{
		{"key deleted on two masters", func(t *testing.T, f *lossFixture, key string) {
			f.do(t, 0, "DEL", key)
			f.do(t, 1, "DEL", key)
		}},
		{"key deleted on one, FLUSHALL on another", func(t *testing.T, f *lossFixture, key string) {
			f.do(t, 0, "DEL", key)
			f.do(t, 1, "FLUSHALL")
		}},
		{"the keeper lost its marker too", func(t *testing.T, f *lossFixture, key string) {
			f.do(t, 0, "DEL", key)
			f.do(t, 1, "DEL", key)
			f.do(t, 2, "DEL", f.c.opts.markerKey)
		}},
		{"the keeper's record written by an extend that did not know the fence", func(t *testing.T, f *lossFixture, key string) {
			// "0 <token>": what extend.lua writes where it puts a lost copy
			// back for a Client that did not grant the lock (a second
			// black-box pass: status ignored it while acquires refused).
			f.do(t, 0, "DEL", key)
			f.do(t, 1, "DEL", key)
			tok := f.rdbs[2].Get(context.Background(), key).Val()
			f.do(t, 2, "SET", f.c.fenceRecordKey(key), "0 "+tok, "KEEPTTL")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLossFixture(t, false)
			other := f.other(t)
			key := "status-granted"
			l := f.grantOnThree(t, f.c, key, 30*time.Second)
			tc.lose(t, f, key)

			_, err := other.Acquire(ctx, key, 30*time.Second)
			require.ErrorIs(t, err, ErrLockHeld, "the contender is refused: the check this status must agree with")
			for name, c := range map[string]*Client{"holder's client": f.c, "another client": other} {
				st, err := c.Status(ctx, key)
				require.NoError(t, err, name)
				assert.True(t, st.Held, "%s: status of a lock every acquire refuses", name)
				if strings.HasPrefix(tc.name, "the keeper's record written") {
					assert.Zero(t, st.Fence, "%s: a record without the fence", name)
				} else {
					assert.Equal(t, l.Fence(), st.Fence, "%s: the holder's fence", name)
				}
				assert.Greater(t, st.Validity, 20*time.Second, "%s: the copy's time left", name)
				assert.LessOrEqual(t, st.Validity, 30*time.Second, name)
			}
			ms, err := other.StatusMulti(ctx, []string{key, key + "-free"})
			require.NoError(t, err)
			assert.True(t, ms.Keys[0].Held, "StatusMulti reads each key as Status does")
			assert.False(t, ms.Keys[1].Held)

			// Released: free again, on every reading.
			require.NoError(t, l.Release(ctx))
			st, err := other.Status(ctx, key)
			require.NoError(t, err)
			assert.False(t, st.Held, "released")
		})
	}
}

// TestStatusFreeWithoutTheCheck: with the granted-lock check off (the
// guard switch the chaos controls use) acquires do not read records, and
// status keeps its quorum rule: the same lock on one master reads free, as
// an acquire would then grant it. The other side of the test above: the
// record changes the answer only where acquires honour it.
func TestStatusFreeWithoutTheCheck(t *testing.T) {
	ctx := context.Background()
	f := newLossFixture(t, false, withGuardOff(guardswitch.GrantedLock))
	key := "status-nocheck"
	f.grantOnThree(t, f.c, key, 30*time.Second)
	f.do(t, 0, "DEL", key)
	f.do(t, 1, "DEL", key)
	st, err := f.c.Status(ctx, key)
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.LessOrEqual(t, st.Holders, 1, "free is decided at the third absent answer: master 2 may not be heard")
}

package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// TestFenceAboveEveryCounterHeard: lock L1 granted on masters 0–2 with
// fence f1 and released; the victim (master 2) is then rolled back to a
// dump from before L1 (DEBUG RELOAD NOSAVE), and a Client that never read
// it before (a daemon restarted meanwhile) acquires the key while masters
// 0 and 1 are paused. Its first three answers, the votes needed, come
// from the victim and the two masters L1 never wrote: their counters are
// all below f1, and the early write-back starts with f1. Masters 0 and 1
// answer later, with counters at f1: the grant's fence must be above
// them (fence.go, "Counters of every master heard"). Negative control:
// with the guard FenceAboveEveryAnswer off, the fence is f1 again (the
// fuzz finding docs/findings/fuzz-seed-1452374815532617200).
func TestFenceAboveEveryCounterHeard(t *testing.T) {
	for _, control := range []bool{false, true} {
		name := "protected"
		if control {
			name = "negative control: fence from the votes needed"
		}
		t.Run(name, func(t *testing.T) {
			var opts []Option
			if control {
				opts = append(opts, withGuardOff(guardswitch.FenceAboveEveryAnswer))
			}
			f := newLossFixture(t, false, opts...)
			ctx := context.Background()
			key := "L:" + t.Name()
			f.do(t, victim, "SAVE") // the copy the victim goes back to: no L1, its counter below f1

			first := f.grantOnThree(t, f.c, key, 2*time.Second)
			f1 := first.Fence()
			require.NoError(t, first.Release(ctx))
			for i := range 3 {
				n, err := f.rdbs[i].Get(ctx, f.c.opts.fenceKey).Int64()
				require.NoError(t, err)
				require.GreaterOrEqual(t, n, f1, "L1's write-back reached master %d", i)
			}
			f.do(t, victim, "DEBUG", "RELOAD", "NOSAVE")
			for _, i := range []int{victim, 3, 4} {
				n, err := f.rdbs[i].Get(ctx, f.c.opts.fenceKey).Int64()
				require.NoError(t, err)
				require.Less(t, n, f1, "master %d's counter is below f1", i)
			}

			b := f.other(t) // first reads the victim after its rollback: nothing to compare
			for _, i := range []int{0, 1} {
				require.NoError(t, f.servers[i].Pause())
			}
			type result struct {
				l   *Lock
				err error
			}
			done := make(chan result, 1)
			go func() {
				l, err := b.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
				done <- result{l, err}
			}()
			// Well inside the 500 ms per-master timeout: masters 0 and 1
			// answer, after the three others.
			time.Sleep(150 * time.Millisecond)
			for _, i := range []int{0, 1} {
				require.NoError(t, f.servers[i].Resume())
			}
			res := <-done
			require.NoError(t, res.err)
			t.Logf("L1 fence %d, L2 fence %d, rewrites %d", f1, res.l.Fence(), b.FenceRewrites())
			if control {
				assert.Equal(t, f1, res.l.Fence(), "negative control: L2 is issued L1's fence again")
				return
			}
			assert.Greater(t, res.l.Fence(), f1, "L2's fence is above L1's")
			assert.Equal(t, int64(1), b.FenceRewrites(), "the early write-back's fence was written again")
			written := 0
			for i := range 5 {
				n, err := f.rdbs[i].Get(ctx, b.opts.fenceKey).Int64()
				require.NoError(t, err)
				if n >= res.l.Fence() {
					written++
				}
			}
			assert.GreaterOrEqual(t, written, b.quorum, "L2's fence written back to a quorum")
			st, err := b.Status(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, res.l.Fence(), st.Fence, "the fence record holds L2's final fence")
		})
	}
}

package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// TestRepairReadsSeeARollbackOfTheOthers: masters 0–2, a majority, go back
// to an older copy of their data one after another, and the Client has
// seen only master 0's rollback (its probe) when it repairs master 0. The
// repair reads the lease horizons and counters of the other counting
// masters; masters 1 and 2, rolled back too, must be taken for losses
// there (their horizon and counter fell below what the Client read from
// them), so master 0 finds no quorum to repair from and the deployment
// stays closed until `redlockd repair-fences` — a loss beyond N − quorum.
// Each way of going back that keeps the bookkeeping keys is a member:
// DEBUG RELOAD of an older dump, SWAPDB with a database copied earlier.
// Negative control: with the guard RepairJudgesReads off, master 0 is
// repaired from masters 1–4 and the two rolled back still count (the
// black-box finding: 3 of 4 such rollbacks reopened by themselves).
func TestRepairReadsSeeARollbackOfTheOthers(t *testing.T) {
	ctx := context.Background()
	ways := []struct {
		name   string
		before func(t *testing.T, f *lossFixture, i int)
		back   func(t *testing.T, f *lossFixture, i int)
	}{
		{
			name:   "DEBUG RELOAD NOSAVE of an older dump",
			before: func(t *testing.T, f *lossFixture, i int) { f.do(t, i, "SAVE") },
			back:   func(t *testing.T, f *lossFixture, i int) { f.do(t, i, "DEBUG", "RELOAD", "NOSAVE") },
		},
		{
			name: "SWAPDB with a copy taken earlier",
			before: func(t *testing.T, f *lossFixture, i int) {
				r := f.rdbs[i]
				keys, err := r.Keys(ctx, "*").Result()
				require.NoError(t, err)
				for _, k := range keys {
					require.NoError(t, r.Copy(ctx, k, k, 1, true).Err())
				}
			},
			back: func(t *testing.T, f *lossFixture, i int) { f.do(t, i, "SWAPDB", 0, 1) },
		},
	}
	for _, way := range ways {
		for _, control := range []bool{false, true} {
			name := way.name
			if control {
				name += "/negative control: reads not judged"
			}
			t.Run(name, func(t *testing.T) {
				var opts []Option
				if control {
					opts = append(opts, withGuardOff(guardswitch.RepairJudgesReads))
				}
				f := newLossFixture(t, false, opts...)
				for i := range 3 {
					way.before(t, f, i)
				}
				// Raises every master's lease horizon and fencing
				// counter above the older copy, read by this Client
				// (its votes and its write-back's acknowledgements).
				l, err := f.c.Acquire(ctx, "L:"+t.Name(), 2*time.Second)
				require.NoError(t, err)
				settle(t, f.c, "L:"+t.Name())
				require.NoError(t, l.Release(ctx))
				for i := range 3 {
					way.back(t, f, i)
				}

				// The probe round the loss kicks waits for probeMu: the
				// repair below runs before any probe of masters 1 and 2
				// (as when they go back just after the round's probes).
				f.c.probeMu.Lock()
				defer f.c.probeMu.Unlock()
				m0 := f.c.masters[0]
				m0.probeOnce() // sees master 0's rollback
				require.Equal(t, MasterRepairing, m0.state(), "master 0's rollback seen by its probe")
				for i := 1; i < 5; i++ {
					require.True(t, f.c.masters[i].counts(), "master %d counts before the repair", i)
				}
				f.c.repairMaster(m0)

				if control {
					assert.NotEqual(t, MasterRepairing, m0.state(), "negative control: master 0 repaired from a quorum holding two rolled-back masters")
					assert.True(t, f.c.masters[1].counts() && f.c.masters[2].counts(), "negative control: the two rolled back still count")
					return
				}
				assert.Equal(t, MasterRepairing, m0.state(), "no quorum of intact masters to repair master 0 from")
				for _, i := range []int{1, 2} {
					assert.Equal(t, MasterRepairing, f.c.masters[i].state(), "master %d's rollback seen by the repair's read", i)
					assert.Contains(t, f.c.Masters()[i].QuarantineReason, "went back in time", "master %d", i)
				}
				assert.False(t, f.c.QuorumAvailable(), "three of five masters lost: closed until repair-fences")
				_, err = f.c.Acquire(ctx, "L2:"+t.Name(), time.Second, WithRetry(NoRetry()))
				assert.ErrorIs(t, err, ErrNotObtained)
			})
		}
	}
}

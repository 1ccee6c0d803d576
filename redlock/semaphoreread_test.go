package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// takeAllPermits takes every permit of the semaphore name with c, released
// at cleanup.
func takeAllPermits(t *testing.T, c *Client, name string, permits int) []*Permit {
	t.Helper()
	ctx := context.Background()
	held := make([]*Permit, 0, permits)
	for range permits {
		p, err := c.AcquirePermit(ctx, name, permits, time.Minute)
		require.NoError(t, err)
		held = append(held, p)
	}
	t.Cleanup(func() {
		for _, p := range held {
			_ = p.Release(context.Background())
		}
	})
	return held
}

// TestFullSemaphoreRefusedInOneRead: with every one of 20 permits granted,
// an attempt is refused as held after one Acquire (its first slot) and one
// read of the slots (grantedSlots), which shows every other slot granted on
// all five masters; RetryAfter is the earliest holder's end. Once one
// permit is released, an attempt that starts at another slot goes from
// that slot's refusal straight to the free one: two Acquires. Negative
// control: without the read, the full semaphore costs 20 Acquires.
func TestFullSemaphoreRefusedInOneRead(t *testing.T) {
	const permits = 20
	ctx := context.Background()
	name := newKey(t)
	held := takeAllPermits(t, newClient(t), name, permits)

	c := newClient(t)
	before := c.attempts.Load()
	_, err := c.AcquirePermit(ctx, name, permits, time.Minute, WithRetry(NoRetry()))
	require.ErrorIs(t, err, ErrLockHeld)
	var oe *OutcomeError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, int64(1), c.attempts.Load()-before, "Acquires made for a full semaphore")
	assert.GreaterOrEqual(t, oe.Refused, (permits-1)*len(servers), "every master's refusal of every slot read")
	assert.False(t, oe.Contended)
	assert.Greater(t, oe.RetryAfter, 50*time.Second)
	assert.LessOrEqual(t, oe.RetryAfter, time.Minute)

	freed := held[7]
	require.NoError(t, freed.Release(ctx))
	before = c.attempts.Load()
	lock, slot, err := c.acquireAnyPermit(ctx, name, permits, (freed.Slot+1)%permits, time.Minute, 0)
	require.NoError(t, err)
	assert.Equal(t, freed.Slot, slot)
	assert.Equal(t, int64(2), c.attempts.Load()-before, "Acquires made with one slot free, starting at another")
	require.NoError(t, lock.Release(ctx))
}

// TestSemaphoreReadSkipsOnlyUnwinnableGrants: the slots read skips a slot
// only when an Acquire of it could not be granted and would be refused on
// the granted-lock check's evidence. Of four slots, the attempt starts at
// a granted one (tried: the read comes after the first refusal); a slot
// held on three masters by callers that split the votes (no fence record:
// nobody was granted) is tried, and its refusal is contended, so that a
// one-shot attempt retries as Acquire does; a granted slot left on only
// two masters that hold its fence record (the others lost the key) is
// tried too (three votes are
// possible; the granted-lock check then refuses); the fourth, granted
// everywhere, is skipped: three Acquires for four slots.
func TestSemaphoreReadSkipsOnlyUnwinnableGrants(t *testing.T) {
	const permits = 4
	ctx := context.Background()
	name := newKey(t)
	owner := newClient(t)
	held := takeAllPermits(t, owner, name, permits)
	rdbs := direct(t)
	bySlot := make([]*Permit, permits)
	for _, p := range held {
		bySlot[p.Slot] = p
	}

	// Slot 1: released, then held on masters 0–2 by a caller whose votes
	// never made a quorum (its key and no fence record).
	split := PermitKey(name, 1)
	require.NoError(t, bySlot[1].Release(ctx))
	for _, i := range []int{0, 1, 2} {
		require.NoError(t, rdbs[i].Set(ctx, split, "0123456789abcdef0123456789abcdef", time.Minute).Err())
	}
	t.Cleanup(func() {
		for _, r := range rdbs {
			r.Del(context.Background(), split)
		}
	})
	// Slot 2: granted, but its key lost on three masters, kept on two that
	// hold its fence record. The write-back goes to the masters that voted
	// or had not answered when the quorum was reached
	// (acquireTally.startEarlyWriteBack), so a master whose vote failed
	// first and landed later holds the key without a record; which masters
	// those are is up to the scheduler. Keeping the key on two record-less masters only would be a
	// loss of the record on N − quorum + 1 masters, past what the check
	// claims (granted.go), and the grant would be right to go through.
	half := PermitKey(name, 2)
	var keep []int
	for i, r := range rdbs {
		rec, err := r.Get(ctx, owner.fenceRecordKey(half)).Result()
		if err == nil && strings.HasSuffix(rec, " "+bySlot[2].Token()) && len(keep) < 2 {
			keep = append(keep, i)
		}
	}
	require.Len(t, keep, 2, "masters holding slot 2's fence record")
	for i, r := range rdbs {
		if !slices.Contains(keep, i) {
			require.NoError(t, r.Del(ctx, half).Err())
		}
	}

	c := newClient(t)
	before := c.attempts.Load()
	_, _, err := c.acquireAnyPermit(ctx, name, permits, 0, time.Minute, 0)
	require.ErrorIs(t, err, ErrLockHeld)
	var oe *OutcomeError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, int64(3), c.attempts.Load()-before, "Acquires: slot 0 (first), the split slot and the half-lost one, not slot 3")
	assert.True(t, oe.Contended, "the split slot's refusal is contended")
}

// TestSemaphoreReadsShared: attempts at a full semaphore that need the
// slots read at the same moment share one read (grantedSlots) instead of
// each sending its own, which costs every master work in proportion to
// the permits. Negative control: without the sharing, eight attempts sent
// eight reads.
func TestSemaphoreReadsShared(t *testing.T) {
	const permits, callers = 200, 8
	name := newKey(t)
	c := newClient(t)
	takeAllPermits(t, c, name, permits)
	before := c.slotsReadsMade.Load()
	start := make(chan struct{})
	skips := make([][]slotSkip, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			skips[i] = c.grantedSlots(context.Background(), name, permits)
		})
	}
	close(start)
	wg.Wait()
	for i, skip := range skips {
		for slot, s := range skip {
			require.Equal(t, len(servers), s.holders, "caller %d, slot %d: granted on every master, skipped", i, slot)
		}
	}
	assert.Less(t, c.slotsReadsMade.Load()-before, int64(callers), "reads sent for %d attempts at once", callers)
}

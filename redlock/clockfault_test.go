package redlock

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// clockClient starts a Client over the skewed masters (master 4 runs under
// the gettimeofday shim) and waits until every master counts.
func clockClient(t *testing.T, opts []*redis.Options, copts ...Option) *Client {
	t.Helper()
	c, err := New(opts, copts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.Eventually(t, func() bool {
		for _, st := range c.Masters() {
			if !st.Counting {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	return c
}

// placeOnly places a lock on exactly the masters in on, the case in which
// one faulty master decides: while it is acquired, the other masters hold
// a foreign key, so the lock is granted by the votes of on alone (every one
// of them checked), as if its SET had been lost on the way to the others;
// the foreign keys are then removed, once the SETs refused there have run
// (settle): Acquire decides at quorum, and a SET still on its way to a
// foreign master would otherwise land after the foreign key is gone.
func placeOnly(t *testing.T, c *Client, rdbs []*redis.Client, key string, ttl time.Duration, on ...int) *Lock {
	t.Helper()
	ctx := context.Background()
	for i, r := range rdbs {
		if !slices.Contains(on, i) {
			require.NoError(t, r.Set(ctx, key, "foreign", time.Minute).Err())
		}
	}
	// A wait only against a loaded machine: the key is new.
	lock, err := c.Acquire(ctx, key, ttl, WithWait(5*time.Second))
	require.NoError(t, err)
	settle(t, c, key)
	for i, r := range rdbs {
		if !slices.Contains(on, i) {
			require.NoError(t, r.Del(ctx, key).Err())
		}
	}
	return lock
}

// settle returns once every master has run every command c sent for keys
// before the call. Acquire (like extend and status) decides at quorum and
// leaves the slower masters' SETs on their way; a test that then changes
// key or flushes a master behind the Client's back must wait for them, or
// a late SET lands after the change. The barrier is the Client's lane
// order (a lane carries its keys' commands to its master in order, and
// every command for a key goes through the key's lane): a
// compare-and-delete for a token nobody holds, answered by every master,
// one per lane that keys use. A master that misses the per-master timeout
// still gets that release, queued behind the SETs, so settle asks again
// until all have answered one. A test master whose process is gone
// (killed, not yet restarted) is not waited for: nothing sent to it can
// land any more.
func settle(t *testing.T, c *Client, keys ...string) {
	t.Helper()
	byLane := map[int]string{}
	for _, k := range keys {
		byLane[c.laneOf(k)] = k
	}
	for _, key := range byLane {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			tok, err := RandomToken()
			require.NoError(ct, err)
			_, err = c.Release(context.Background(), key, tok)
			var oe *OutcomeError
			require.ErrorAs(ct, err, &oe)
			require.ErrorIs(ct, err, ErrNotHeld)
			require.Equal(ct, len(c.masters)-gone(c), oe.Absent+oe.Foreign, "every master answers a release for %s: %v", key, err)
		}, 10*time.Second, time.Millisecond)
	}
}

// gone counts c's masters that are test servers whose process has exited.
func gone(c *Client) int {
	n := 0
	for _, m := range c.masters {
		for _, s := range servers {
			if s.Addr() == m.addr && !s.Running() {
				n++
			}
		}
	}
	return n
}

// TestClockJumpSeenByTheVote: lock A (ttl 20s) on exactly masters 2, 3, 4;
// master 4's clock jumps 30s forward (A's key expires there) and 30ms later
// B asks. Health probes are an hour apart, so only the vote's own clock
// reading can catch it. The negative control turns that check off.
func TestClockJumpSeenByTheVote(t *testing.T) {
	scenario := func(t *testing.T, extra ...Option) (*Lock, error) {
		opts, rdbs, clock := skewedMasters(t)
		c := clockClient(t, opts, append([]Option{WithHealthInterval(time.Hour), WithPerMasterTimeout(200 * time.Millisecond)}, extra...)...)
		key := "clock:" + t.Name()
		first := placeOnly(t, c, rdbs, key, 20*time.Second, 2, 3, 4)
		require.NoError(t, clock.Jump(30*time.Second))
		require.Eventually(t, func() bool { return rdbs[4].Exists(context.Background(), key).Val() == 0 }, 10*time.Second, time.Millisecond)
		time.Sleep(30 * time.Millisecond)
		_, err := c.Acquire(context.Background(), key, 20*time.Second, WithRetry(NoRetry()))
		require.Greater(t, first.Validity(), 15*time.Second)
		return first, err
	}
	t.Run("protected", func(t *testing.T) {
		_, err := scenario(t)
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, err, ErrMasterClockJump)
	})
	t.Run("negative control: vote clock check off", func(t *testing.T) {
		_, err := scenario(t, withGuardOff(guardswitch.VoteClock), withGuardOff(guardswitch.GrantedLock))
		require.NoError(t, err, "the jumped master's vote counts: a second holder")
	})
}

// TestClockJumpWhileNoDaemonWatched: the jump happens while no Client runs;
// a Client started afterwards has no earlier reading of master 4, but its
// clock disagrees with the other masters', so it does not vote. The
// negative control turns the comparison with the other masters off.
func TestClockJumpWhileNoDaemonWatched(t *testing.T) {
	scenario := func(t *testing.T, extra ...Option) (*Client, error) {
		opts, rdbs, clock := skewedMasters(t)
		copts := append([]Option{WithPerMasterTimeout(200 * time.Millisecond)}, extra...)
		c := clockClient(t, opts, copts...)
		key := "clock:" + t.Name()
		first := placeOnly(t, c, rdbs, key, 20*time.Second, 2, 3, 4)
		require.NoError(t, c.Close())
		require.NoError(t, clock.Jump(30*time.Second))
		require.Eventually(t, func() bool { return rdbs[4].Exists(context.Background(), key).Val() == 0 }, 10*time.Second, time.Millisecond)
		later, err := New(opts, copts...)
		require.NoError(t, err)
		t.Cleanup(func() { later.Close() })
		_, err = later.Acquire(context.Background(), key, 20*time.Second, WithRetry(NoRetry()))
		require.Greater(t, first.Validity(), 15*time.Second)
		return later, err
	}
	t.Run("protected", func(t *testing.T) {
		later, err := scenario(t)
		require.ErrorIs(t, err, ErrNotObtained)
		st := later.Masters()[4]
		assert.Equal(t, MasterQuarantined, st.State)
		assert.Contains(t, st.QuarantineReason, "median of the masters")
		assert.False(t, st.Counting)
	})
	t.Run("negative control: clock reference off", func(t *testing.T) {
		_, err := scenario(t, withGuardOff(guardswitch.ClockReference), withGuardOff(guardswitch.GrantedLock))
		require.NoError(t, err, "the jumped master counts for a daemon that did not see the jump")
	})
}

// TestSmallJumpIsCoveredByTheAllowance: a jump below what the probes' guard
// flags (about the per-master timeout) on a lock of ttl 1s: 45ms at a 50ms
// timeout (the reproduction), 300ms at 400ms. B retries until it wins; it
// must not win before A's validity has ended. With the clock checks and
// the clock allowance off, B wins while A is still valid; the control uses
// the larger jump so that the window it opens (the jump minus the drift
// allowance) is wide enough to hit on a loaded machine. (With only the
// per-vote check, the comparison with the other masters and the allowance
// off, the probes' drift-rate guard still catches a 300ms jump once its
// window spans 3s, which is what makes this control turn all of them off.)
func TestSmallJumpIsCoveredByTheAllowance(t *testing.T) {
	scenario := func(t *testing.T, jump, pmt time.Duration, extra ...Option) (*Lock, time.Time) {
		opts, rdbs, clock := skewedMasters(t)
		c := clockClient(t, opts, append([]Option{WithPerMasterTimeout(pmt), WithHealthInterval(100 * time.Millisecond)}, extra...)...)
		time.Sleep(time.Second) // a window of clock readings
		key := "clock:" + t.Name()
		first := placeOnly(t, c, rdbs, key, time.Second, 2, 3, 4)
		require.NoError(t, clock.Jump(jump))
		// The shim re-reads its control file at most every 10ms: wait
		// until master 4 runs on the jumped clock before B's first try.
		// B waits (WithWait) for the expiry its first refusal reports; a
		// first try that saw master 4's old clock waited for the keys'
		// natural expiry, and the negative control then missed (B won just
		// after A's validity, not before) about half the time.
		require.Eventually(t, func() bool {
			now, err := rdbs[4].Time(context.Background()).Result()
			return err == nil && time.Until(now) > jump/2
		}, 5*time.Second, time.Millisecond, "master 4's clock jumped %v", jump)
		_, err := c.Acquire(context.Background(), key, time.Second, WithWait(10*time.Second), WithRetry(LinearBackoff(time.Millisecond)))
		require.NoError(t, err)
		return first, time.Now()
	}
	t.Run("protected: 45ms at 50ms", func(t *testing.T) {
		first, won := scenario(t, 45*time.Millisecond, 50*time.Millisecond)
		assert.False(t, won.Before(first.ValidUntil()), "B won %v before A's validity ended", first.ValidUntil().Sub(won))
	})
	t.Run("protected: 300ms at 400ms", func(t *testing.T) {
		first, won := scenario(t, 300*time.Millisecond, 400*time.Millisecond)
		assert.False(t, won.Before(first.ValidUntil()), "B won %v before A's validity ended", first.ValidUntil().Sub(won))
	})
	t.Run("negative control: clock checks and clock allowance off", func(t *testing.T) {
		first, won := scenario(t, 300*time.Millisecond, 400*time.Millisecond, withGuardOff(guardswitch.ClockGuard), withGuardOff(guardswitch.ClockAllowance), withGuardOff(guardswitch.GrantedLock))
		assert.True(t, won.Before(first.ValidUntil()), "B wins while A is valid")
	})
}

// TestFailedExtendNeverShortens: A (ttl 20s) on masters 0–3; masters 2 and
// 3 die; extend with ttl 1s fails (no quorum). 1.3s later B must still be
// refused: the failed extend did not cut A's keys on 0 and 1. The negative
// control lets extend shorten.
func TestFailedExtendNeverShortens(t *testing.T) {
	scenario := func(t *testing.T, extra ...Option) (*Lock, error) {
		ctx := context.Background()
		c, _ := brandNewClient(t, extra...)
		key := newKey(t)
		first := placeOn(t, c, key, 20*time.Second, 0, 1, 2, 3)
		withMasters(t, "kill", 2, 3)
		err := first.Extend(ctx, time.Second)
		require.ErrorIs(t, err, ErrQuorumUnavailable)
		time.Sleep(1300 * time.Millisecond)
		_, err = c.Acquire(ctx, key, 20*time.Second, WithRetry(NoRetry()))
		require.Greater(t, first.Validity(), 15*time.Second, "the validity A was last told")
		return first, err
	}
	t.Run("protected", func(t *testing.T) {
		_, err := scenario(t)
		require.ErrorIs(t, err, ErrLockHeld)
	})
	t.Run("negative control: extend may shorten", func(t *testing.T) {
		_, err := scenario(t, withGuardOff(guardswitch.ExtendNeverShortens))
		require.NoError(t, err, "the failed extend shortened A on 0 and 1: B gets in")
	})
}

// TestExtendWithShorterTTLKeepsTheLonger: a successful extend with a
// shorter ttl leaves every key's TTL as it was and the validity too.
func TestExtendWithShorterTTLKeepsTheLonger(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	key := newKey(t)
	lock, err := c.Acquire(ctx, key, 20*time.Second)
	require.NoError(t, err)
	before := lock.ValidUntil()
	require.NoError(t, lock.Extend(ctx, time.Second))
	assert.False(t, lock.ValidUntil().Before(before))
	// Acquire and extend answer at quorum: every master has run both
	// before its PTTL says anything about them.
	settle(t, c, key)
	for i, r := range direct(t) {
		assert.Greater(t, r.PTTL(ctx, key).Val(), 15*time.Second, "master %d", i)
	}
	require.NoError(t, lock.Extend(ctx, 30*time.Second))
	assert.Greater(t, lock.Validity(), 25*time.Second, "a longer ttl extends")
}

// TestStatusNeverCallsAHeldLockFree: A on exactly masters 0, 1, 2; master 2
// pauses. Two holders and one unknown answer could still be a quorum, so
// status cannot say "free": it reports the quorum unavailable. Once 2 is
// back it says held; with the lock gone on a quorum it says free. The
// negative control (old rule) answers "not held".
func TestStatusNeverCallsAHeldLockFree(t *testing.T) {
	ctx := context.Background()
	t.Run("protected", func(t *testing.T) {
		c, _ := brandNewClient(t)
		key := newKey(t)
		first := placeOn(t, c, key, 20*time.Second, 0, 1, 2)
		withMasters(t, "pause", 2)
		st, err := c.Status(ctx, key)
		require.ErrorIs(t, err, ErrQuorumUnavailable, "%+v", st)
		assert.False(t, st.Held)
		assert.Equal(t, 2, st.Holders)
		require.NoError(t, servers[2].Resume())
		require.Eventually(t, func() bool { s, err := c.Status(ctx, key); return err == nil && s.Held }, 10*time.Second, 20*time.Millisecond)
		require.NoError(t, first.Release(ctx))
		st, err = c.Status(ctx, key)
		require.NoError(t, err)
		assert.False(t, st.Held)
	})
	t.Run("negative control: status without a quorum either way", func(t *testing.T) {
		// The granted-lock check off too: the holders' fence records alone
		// would now keep status from calling the lock free
		// (TestStatusHeldOnFewerThanAQuorum); this control shows the
		// quorum rule's part.
		c, _ := brandNewClient(t, withGuardOff(guardswitch.StatusQuorum), withGuardOff(guardswitch.GrantedLock))
		key := newKey(t)
		placeOn(t, c, key, 20*time.Second, 0, 1, 2)
		withMasters(t, "pause", 2)
		st, err := c.Status(ctx, key)
		require.NoError(t, err)
		assert.False(t, st.Held, "the old rule calls the held lock free")
	})
}

// TestClockBackThenForward: master 4's clock steps back 30s, lock A is
// voted in meanwhile (its key on 4 set by the stepped-back clock), then the
// clock steps forward to where it was: A's key on 4 expires 30s early,
// while the offset is back where the last probe saw it. The vote that saw
// the clock go back became the reference, so the step forward is seen by
// the next vote (probes are an hour apart here). The negative control
// turns the clock checks off.
func TestClockBackThenForward(t *testing.T) {
	scenario := func(t *testing.T, extra ...Option) error {
		ctx := context.Background()
		opts, rdbs, clock := skewedMasters(t)
		c := clockClient(t, opts, append([]Option{WithHealthInterval(time.Hour), WithPerMasterTimeout(200 * time.Millisecond)}, extra...)...)
		key := "clock:" + t.Name()
		// The shim applies a jump shortly after the control file changes:
		// wait until master 4 answers with the stepped clock.
		offsetNear := func(want time.Duration) func() bool {
			return func() bool {
				d := time.Until(rdbs[4].Time(ctx).Val()) + want
				return d > -time.Second && d < time.Second
			}
		}
		require.NoError(t, clock.Jump(-30*time.Second))
		require.Eventually(t, offsetNear(30*time.Second), 10*time.Second, time.Millisecond)
		first := placeOnly(t, c, rdbs, key, 20*time.Second, 2, 3, 4)
		require.NoError(t, clock.Jump(30*time.Second))
		require.Eventually(t, offsetNear(0), 10*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return rdbs[4].Exists(ctx, key).Val() == 0 }, 10*time.Second, time.Millisecond)
		_, err := c.Acquire(ctx, key, 20*time.Second, WithRetry(NoRetry()))
		require.Greater(t, first.Validity(), 15*time.Second)
		return err
	}
	t.Run("protected", func(t *testing.T) {
		err := scenario(t)
		require.ErrorIs(t, err, ErrNotObtained)
		require.ErrorIs(t, err, ErrMasterClockJump)
	})
	t.Run("negative control: clock checks off", func(t *testing.T) {
		require.NoError(t, scenario(t, withGuardOff(guardswitch.ClockGuard), withGuardOff(guardswitch.GrantedLock)), "a second holder")
	})
}

// TestStaleClockRenewedWithTwoMastersDown: masters 1 and 3 are down (no
// recent clock reference), and master 0's reference is older than
// maxRefAge, as when its probes were too slow. A precise vote of master 0
// that agrees with both other recent references (masters 2 and 4: with m,
// a quorum) renews its reference and counts: the deployment survives the
// loss of two masters without losing a third to a stale reading. The
// negative controls: a vote whose clock jumped forward, and a sane vote
// next to an other whose clock jumped (beyond N − quorum faults: fail
// closed), are both refused and renew nothing; and with only one recent
// other there is nothing to judge by. The references are set by hand (the
// health loop is held off) so that every case is exactly this one.
func TestStaleClockRenewedWithTwoMastersDown(t *testing.T) {
	c := newClient(t, WithHealthInterval(time.Hour))
	c.probeMu.Lock() // no probe round replaces the references below
	t.Cleanup(c.probeMu.Unlock)
	const pmt = 500 * time.Millisecond // newClient's per-master timeout
	ms := int64(time.Millisecond)
	jump := int64(30 * time.Second)
	at := func() int64 { return c.sinceEpoch() }
	ref := func(offset int64) *clockRef { return &clockRef{at: at(), offset: offset, uncert: ms} }
	stale := func() *clockRef { return &clockRef{at: at() - int64(c.maxRefAge()) - int64(time.Second), uncert: ms} }
	m := c.masters[0]
	// vote returns what checkVoteClock says of a vote of m whose master
	// clock reads offset ahead of ours, in a 2ms round trip just now.
	vote := func(offset int64) error {
		sent := time.Now()
		received := sent.Add(2 * time.Millisecond)
		mid := sent.Add(time.Millisecond)
		remote := time.Unix(0, c.epochWall+int64(mid.Sub(c.epoch))+offset)
		return m.checkVoteClock(remote, sent, received)
	}
	setup := func(other2, other4 *clockRef) *clockRef {
		old := stale()
		m.st.ref.Store(old)
		c.masters[1].st.ref.Store(stale())
		c.masters[3].st.ref.Store(stale())
		c.masters[2].st.ref.Store(other2)
		c.masters[4].st.ref.Store(other4)
		return old
	}
	require.Less(t, 2*ms, int64(pmt/8), "the votes below are precise")

	t.Run("a sane clock is renewed", func(t *testing.T) {
		old := setup(ref(0), ref(0))
		require.NoError(t, vote(0))
		assert.NotSame(t, old, m.st.ref.Load(), "the vote became the reference")
		require.NoError(t, vote(0), "and the next vote is checked against it")
	})
	t.Run("negative control: a jumped clock is refused", func(t *testing.T) {
		old := setup(ref(0), ref(0))
		require.ErrorIs(t, vote(jump), ErrMasterClockUnknown)
		assert.Same(t, old, m.st.ref.Load())
	})
	t.Run("negative control: a jumped other fails closed", func(t *testing.T) {
		old := setup(ref(0), ref(jump))
		require.ErrorIs(t, vote(0), ErrMasterClockUnknown)
		assert.Same(t, old, m.st.ref.Load())
	})
	t.Run("negative control: one recent other judges nothing", func(t *testing.T) {
		old := setup(ref(0), stale())
		require.ErrorIs(t, vote(0), ErrMasterClockUnknown)
		assert.Same(t, old, m.st.ref.Load())
	})
}

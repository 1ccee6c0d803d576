package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plantContender sets key on masters with a token of another caller, as
// an attempt does with its votes: with granted, also the fence record its
// write-back stores once a quorum voted (a granted lock, granted.go);
// without, the keys of an attempt not (yet) granted.
func plantContender(t *testing.T, c *Client, key string, granted bool, masters ...int) {
	t.Helper()
	ctx := context.Background()
	rdbs := direct(t)
	const token = "0123456789abcdef0123456789abcdef"
	for _, i := range masters {
		require.NoError(t, rdbs[i].Set(ctx, key, token, 10*time.Second).Err())
		if granted {
			require.NoError(t, rdbs[i].Set(ctx, c.fenceRecordKey(key), fmt.Sprintf("%d %s", 1<<40, token), 10*time.Second).Err())
		}
	}
	t.Cleanup(func() {
		for _, i := range masters {
			rdbs[i].Del(ctx, key, c.fenceRecordKey(key))
		}
	})
}

// refusedOneShot makes a one-shot Acquire of key on c, which must be
// refused as held, and returns its error and how many attempts it made.
func refusedOneShot(t *testing.T, c *Client, key string) (*OutcomeError, int64) {
	t.Helper()
	before := c.attempts.Load()
	_, err := c.Acquire(context.Background(), key, 5*time.Second)
	var oe *OutcomeError
	require.ErrorAs(t, err, &oe)
	require.ErrorIs(t, err, ErrLockHeld)
	return oe, c.attempts.Load() - before
}

// TestOneShotAcquireRetriesAContendedAttempt: masters 0–2 hold the key for
// another caller whose attempt was not granted (no fence record): the
// votes split. A one-shot Acquire is refused as contended, and retries
// after a random delay; the other caller's clean-up (deleting its keys,
// here just before the retry) lets the retry win. Negative control: with
// WithRetry(NoRetry()) the same attempt answers ErrLockHeld, Contended —
// what every one-shot acquire answered before, both callers told "held"
// with nobody holding the key (found by a black-box review: one master
// paused, two `lock run`s at once, the cron job ran nowhere).
func TestOneShotAcquireRetriesAContendedAttempt(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)

	key := newKey(t)
	plantContender(t, c, key, false, 0, 1, 2)
	_, err := c.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	var oe *OutcomeError
	require.ErrorAs(t, err, &oe)
	require.ErrorIs(t, err, ErrLockHeld)
	assert.True(t, oe.Contended, "%v", err)
	assert.Zero(t, c.ContendedRetries(), "NoRetry: one attempt")

	key = newKey(t)
	plantContender(t, c, key, false, 0, 1, 2)
	var once sync.Once
	c.beforeContendedRetry = func() {
		once.Do(func() {
			for _, r := range direct(t)[:3] {
				require.NoError(t, r.Del(ctx, key).Err())
			}
		})
	}
	lock, err := c.Acquire(ctx, key, 5*time.Second)
	require.NoError(t, err, "the retry finds the contender's keys released")
	assert.Equal(t, int64(1), c.ContendedRetries())
	require.NoError(t, lock.Release(ctx))
}

// TestContendedRetriesAreBounded: keys of an attempt that was never
// granted and never released (its client died) hold masters 0–2 until
// their TTL. A one-shot Acquire retries four times, then answers
// ErrLockHeld, Contended, with the keys' remaining time as RetryAfter.
func TestContendedRetriesAreBounded(t *testing.T) {
	c := newClient(t)
	key := newKey(t)
	plantContender(t, c, key, false, 0, 1, 2)
	oe, attempts := refusedOneShot(t, c, key)
	assert.True(t, oe.Contended)
	assert.Greater(t, oe.RetryAfter, 5*time.Second, "the keys end with their own TTL")
	assert.Equal(t, int64(contendedRetries), c.ContendedRetries())
	assert.Equal(t, int64(1+contendedRetries), attempts)
}

// TestGrantedHolderIsNotRetried: the key is a granted lock (its fence
// record on the masters that hold it): a one-shot Acquire makes one
// attempt and answers ErrLockHeld, not contended. Without the granted-lock
// check (fencing off) no refusal is contended: a split cannot be told from
// a holder whose other masters failed.
func TestGrantedHolderIsNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"granted-lock check", nil},
		{"fencing off: no granted-lock check", []Option{WithFenceKey("")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.opts...)
			key := newKey(t)
			plantContender(t, c, key, true, 0, 1, 2)
			oe, attempts := refusedOneShot(t, c, key)
			assert.False(t, oe.Contended, "%v", oe)
			assert.Zero(t, c.ContendedRetries())
			assert.Equal(t, int64(1), attempts)
		})
	}
}

// TestOneShotPermitRetriesAContendedSlot: the one slot of a semaphore of
// one permit holds an ungranted contender's keys; a one-shot AcquirePermit
// retries the whole attempt (each slot once per attempt, none retried on
// its own) and wins once the contender's keys are released. A slot held
// by a granted permit is full, not contended: one attempt.
func TestOneShotPermitRetriesAContendedSlot(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	name := newKey(t)
	slot := PermitKey(name, 0)
	plantContender(t, c, slot, false, 0, 1, 2)
	var once sync.Once
	c.beforeContendedRetry = func() {
		once.Do(func() {
			for _, r := range direct(t)[:3] {
				require.NoError(t, r.Del(ctx, slot).Err())
			}
		})
	}
	p, err := c.AcquirePermit(ctx, name, 1, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(1), c.ContendedRetries())
	require.NoError(t, p.Release(ctx))

	name = newKey(t)
	plantContender(t, c, PermitKey(name, 0), true, 0, 1, 2)
	_, err = c.AcquirePermit(ctx, name, 1, 5*time.Second)
	var oe *OutcomeError
	require.ErrorAs(t, err, &oe)
	require.ErrorIs(t, err, ErrLockHeld)
	assert.False(t, oe.Contended)
	assert.Equal(t, int64(1), c.ContendedRetries(), "a full semaphore is not retried")
}

// TestGrantedLockBehindSlowMastersIsNotContended: a granted lock holds the
// key on masters 0–3 with its fence record on 2 and 3 only (and on 4,
// which is down). Masters 2 and 3 answer 30ms late. The two refusals
// without a record and the down master already make the attempt lost; an
// attempt that decided there saw no granted lock and called it contended,
// retrying a held key four times (found by a review of the change). It
// now reads on while no granted lock is seen, and answers held at once.
func TestGrantedLockBehindSlowMastersIsNotContended(t *testing.T) {
	marker := "marker:" + newKey(t)
	c, proxies := proxiedClient(t, marker)
	until(t, 20*time.Second, func() bool { return allCounting(c) }, func() string { return fmt.Sprintf("%v", states(c)) })
	key := newKey(t)
	plantContender(t, c, key, false, 0, 1)
	plantContender(t, c, key, true, 2, 3)
	withMasters(t, "kill", 4)
	until(t, 10*time.Second, func() bool { return !c.Masters()[4].Up }, func() string { return fmt.Sprintf("%+v", c.Masters()[4]) })
	for _, i := range []int{2, 3} {
		proxies[i].set(30*time.Millisecond, 0)
	}
	oe, attempts := refusedOneShot(t, c, key)
	assert.False(t, oe.Contended, "%v", oe)
	assert.Equal(t, int64(1), attempts, "a held key: one attempt")
}

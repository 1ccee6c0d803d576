package idempotency

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/redlock"
)

// budgetTotals reads each master's count of a budget's bytes.
func budgetTotals(t *testing.T, set string) []int64 {
	t.Helper()
	out := make([]int64, len(servers))
	for i, s := range servers {
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		v, err := r.ZScore(context.Background(), set+":sz", "#total").Result()
		_ = r.Close()
		if err == redis.Nil {
			continue
		}
		require.NoError(t, err)
		out[i] = int64(v)
	}
	return out
}

// TestBudgetBoundsAnAccountsRecords: records begun against a budget are
// counted on every master (a copy's fields, then its answer once
// completed), and a Begin of a new record that would take the budget
// past its cap is refused with a *BudgetError that says when the oldest
// record ends, leaving no record and no lease; another budget (another
// account) is unaffected; a retry or take-over of a record already kept
// is not refused; Abort and the end of a record's retention give its
// bytes back. The negative control: the same records without a cap are
// all written (what an account could do before, a black-box pass filled
// the masters with 7-day records while holding two locks).
func TestBudgetBoundsAnAccountsRecords(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	set := newKey(t) + ":budget"
	other := newKey(t) + ":budget"
	body := make([]byte, 4000)
	begin := func(key string, b Budget, retention time.Duration) (BeginResult, error) {
		return s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp(key), Lease: time.Second, Retention: retention, Budget: b})
	}
	capped := Budget{Set: set, MaxBytes: 15_000}
	var keys []string
	for i := range 2 {
		key := newKey(t)
		res, err := begin(key, capped, time.Hour)
		require.NoError(t, err, "record %d", i)
		require.Equal(t, Started, res.Outcome)
		require.NoError(t, s.Complete(ctx, key, res.Token, &Answer{Status: 200, Body: body}))
		keys = append(keys, key)
	}
	for i, n := range budgetTotals(t, set) {
		assert.Greater(t, n, int64(2*len(body)), "master %d counts both answers", i)
	}
	// A third record passes the cap (two answers of about 5.4 KB stored,
	// base64, and their copies, with the new copy, are under 15 KB; a
	// begin counts only its copy), then a fourth is refused.
	third := newKey(t)
	res, err := begin(third, capped, 3*time.Second)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, third, res.Token, &Answer{Status: 200, Body: body}))
	fourth := newKey(t)
	_, err = begin(fourth, capped, time.Hour)
	require.ErrorIs(t, err, ErrBudgetFull)
	var be *BudgetError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, int64(15_000), be.MaxBytes)
	assert.Greater(t, be.RetryAfter, time.Duration(0))
	assert.LessOrEqual(t, be.RetryAfter, 3*time.Second, "the oldest to end is the third, with 3 s retention")
	rec, err := s.Get(ctx, fourth)
	require.NoError(t, err)
	assert.Equal(t, StateAbsent, rec.State, "no record left by a refused begin")
	lease, err := d.client(t).Status(ctx, leaseKey(fourth))
	require.NoError(t, err)
	assert.False(t, lease.Held, "no lease left by a refused begin")

	// Another account's budget is its own.
	res, err = begin(newKey(t), Budget{Set: other, MaxBytes: 15_000}, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, Started, res.Outcome)
	// A record already kept replays, cap or not.
	res, err = begin(keys[0], capped, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, Completed, res.Outcome)

	// The third record's retention ends: its bytes come back.
	require.Eventually(t, func() bool {
		res, err := begin(fourth, capped, time.Hour)
		if err != nil {
			if !errors.Is(err, ErrBudgetFull) {
				// Only a master that did not count this round (a race
				// build on a loaded machine quarantined three whose clock
				// reading was not precise enough) is waited out.
				require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
			}
			return false
		}
		require.Equal(t, Started, res.Outcome)
		// Abort gives its copy's bytes back at once.
		before := budgetTotals(t, set)
		require.NoError(t, s.Abort(ctx, fourth, res.Token))
		after := budgetTotals(t, set)
		for i := range before {
			assert.Less(t, after[i], before[i], "master %d: the aborted copy's bytes are given back", i)
		}
		return true
	}, 10*time.Second, 200*time.Millisecond, "a begin passes once the third record ended")

	// Negative control: with no cap (counted only), the same load is
	// all written.
	open := Budget{Set: newKey(t) + ":budget"}
	for i := range 4 {
		key := newKey(t)
		res, err := begin(key, open, time.Hour)
		require.NoError(t, err, "uncapped record %d", i)
		require.NoError(t, s.Complete(ctx, key, res.Token, &Answer{Status: 200, Body: body}))
	}
	for i, n := range budgetTotals(t, open.Set) {
		assert.Greater(t, n, int64(4*len(body)), "master %d counts the uncapped records too", i)
	}
	_, err = begin(newKey(t), Budget{MaxBytes: 1}, time.Hour)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "budget: a cap of 1 bytes needs a set")
}

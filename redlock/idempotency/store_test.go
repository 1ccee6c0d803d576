package idempotency

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// TestConcurrentBeginsOneStarted: 100 Begins of one key and fingerprint
// through two Stores (two daemon replicas, each with its own Client):
// exactly one Started; after Complete, every Begin replays the answer
// byte for byte.
func TestConcurrentBeginsOneStarted(t *testing.T) {
	d := newDeployment(t)
	stores := []*Store{d.store(t), d.store(t)}
	key, f := newKey(t), fp(`{"order":1,"qty":2}`)
	ctx := context.Background()
	req := BeginRequest{Key: key, Fingerprint: f, Lease: 10 * time.Second, Retention: time.Hour}

	var mu sync.Mutex
	outcomes := map[Outcome]int{}
	var started BeginResult
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			res, err := stores[i%2].Begin(ctx, req)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			outcomes[res.Outcome]++
			if res.Outcome == Started {
				started = res
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, outcomes[Started], "outcomes: %v", outcomes)
	require.Equal(t, 99, outcomes[InProgress], "outcomes: %v", outcomes)
	require.Positive(t, started.Fence)
	require.EqualValues(t, 1, started.Attempts)

	body := []byte{0, 1, 2, 0xff, 0xfe, '{', '"', '}', '\n'} // not UTF-8: replayed as bytes
	ans := &Answer{Status: 201, Headers: map[string]string{"Content-Type": "application/octet-stream", "Location": "/orders/7"}, Body: body}
	require.NoError(t, stores[0].Complete(ctx, key, started.Token, ans))

	for i := range 100 {
		wg.Go(func() {
			res, err := stores[i%2].Begin(ctx, req)
			if !assert.NoError(t, err) {
				return
			}
			if assert.Equal(t, Completed, res.Outcome) {
				assert.Equal(t, ans, res.Record.Answer)
				assert.Equal(t, started.Fence, res.Record.Fence)
			}
		})
	}
	wg.Wait()
	rec, err := stores[1].Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, StateCompleted, rec.State)
	require.Equal(t, body, rec.Answer.Body)
}

// TestFingerprintMismatch: the same key with another payload answers
// Mismatch while in progress and after completion, and nothing starts.
func TestFingerprintMismatch(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp(`{"qty":1}`), Lease: 5 * time.Second, Retention: time.Hour}
	res, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, res.Outcome)

	other := req
	other.Fingerprint = fp(`{"qty":2}`)
	for range 3 {
		r, err := s.Begin(ctx, other)
		require.NoError(t, err)
		require.Equal(t, Mismatch, r.Outcome)
		require.Equal(t, req.Fingerprint, r.Record.Fingerprint)
	}
	require.NoError(t, s.Complete(ctx, key, res.Token, &Answer{Status: 200, Body: []byte("ok")}))
	r, err := s.Begin(ctx, other)
	require.NoError(t, err)
	require.Equal(t, Mismatch, r.Outcome)
	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, res.Fence, rec.Fence, "no other attempt wrote the record")
	require.EqualValues(t, 1, rec.Attempts)
}

// TestExpiredLeaseTakeOver: a Begin after a lease that ended without
// Complete answers ExpiredInProgress with the earlier fence and a higher
// new one; the earlier attempt's late Complete is refused.
func TestExpiredLeaseTakeOver(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("x"), Lease: 300 * time.Millisecond, Retention: time.Hour}
	first, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, first.Outcome)

	r, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, InProgress, r.Outcome)
	require.Positive(t, r.RetryAfter)

	// The lease's keys end on the masters at most the TTL after the
	// masters set them, a little after the holder's validity ends.
	time.Sleep(time.Until(first.ValidUntil))
	req.Lease = 5 * time.Second
	var second BeginResult
	require.Eventually(t, func() bool {
		second, err = s.Begin(ctx, req)
		require.NoError(t, err)
		return second.Outcome != InProgress
	}, 2*time.Second, 20*time.Millisecond)
	require.Equal(t, ExpiredInProgress, second.Outcome, "%+v", second)
	require.Equal(t, first.Fence, second.PreviousFence)
	require.Greater(t, second.Fence, first.Fence)
	require.EqualValues(t, 2, second.Attempts)

	err = s.Complete(ctx, key, first.Token, &Answer{Status: 200})
	require.ErrorIs(t, err, ErrNotOwner)
	require.NoError(t, s.Complete(ctx, key, second.Token, &Answer{Status: 200, Body: []byte("second")}))
	got, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Completed, got.Outcome)
	require.Equal(t, []byte("second"), got.Record.Answer.Body)
}

// TestTakeOverKeepsTheLongerRetention: a take-over whose retention is
// shorter than the attempt's it takes over keeps the record as long as
// that attempt was granted. A black-box pass: attempt 1 (retention 60 s)
// died, a take-over with retention 2 s died too, and 3.5 s later a Begin
// answered a blind Started inside attempt 1's retention (and through the
// gateway the upstream ran a third time without Idempotency-Takeover).
func TestTakeOverKeepsTheLongerRetention(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	first, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("x"), Lease: 300 * time.Millisecond, Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, Started, first.Outcome)
	time.Sleep(time.Until(first.ValidUntil))

	short := BeginRequest{Key: key, Fingerprint: fp("x"), Lease: 500 * time.Millisecond, Retention: time.Second}
	var second BeginResult
	require.Eventually(t, func() bool {
		second, err = s.Begin(ctx, short)
		require.NoError(t, err)
		return second.Outcome != InProgress
	}, 2*time.Second, 20*time.Millisecond)
	require.Equal(t, ExpiredInProgress, second.Outcome, "%+v", second)
	for i := range servers {
		r := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
		left, err := r.PTTL(ctx, recordKey(key)).Result()
		ret := r.HGet(ctx, recordKey(key), "ret").Val()
		r.Close()
		require.NoError(t, err)
		assert.Greater(t, left, 50*time.Minute, "master %d keeps attempt 1's retention", i)
		assert.Equal(t, "3600000", ret, "master %d: a complete keeps the longer retention too", i)
	}

	// Past the take-over's own retention, the record still says an
	// attempt may have done the work.
	time.Sleep(time.Until(second.ValidUntil) + 1500*time.Millisecond)
	third, err := s.Begin(ctx, short)
	require.NoError(t, err)
	require.Equal(t, ExpiredInProgress, third.Outcome, "%+v", third)
	require.Equal(t, second.Fence, third.PreviousFence)
}

// TestAbortLetsARetryStart: after Abort the next Begin starts afresh.
func TestAbortLetsARetryStart(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("a"), Lease: 5 * time.Second, Retention: time.Hour}
	first, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.NoError(t, s.Abort(ctx, key, first.Token))
	again, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, again.Outcome)
	require.Greater(t, again.Fence, first.Fence)
	require.ErrorIs(t, s.Abort(ctx, key, first.Token), ErrNotOwner)

	_, err = s.Extend(ctx, key, again.Token, 10*time.Second)
	require.NoError(t, err)
	_, err = s.Extend(ctx, key, first.Token, 10*time.Second)
	require.ErrorIs(t, err, ErrNotOwner)
}

// TestLimits: bad arguments name the field and the limit; nothing is
// written.
func TestLimits(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t, WithMaxAnswerBytes(1024), WithMaxRetention(time.Hour))
	ctx := context.Background()
	key := newKey(t)
	_, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("a"), Lease: time.Second, Retention: 2 * time.Hour})
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "retention: 2h0m0s is outside 1s to 1h0m0s")
	_, err = s.Begin(ctx, BeginRequest{Key: key, Fingerprint: "ABC", Lease: time.Second, Retention: time.Hour})
	require.ErrorContains(t, err, "fingerprint: must be 64 lowercase hex")
	_, err = s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("a"), Lease: 48 * time.Hour, Retention: time.Hour})
	require.ErrorIs(t, err, ErrInvalid)
	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, StateAbsent, rec.State)

	res, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("a"), Lease: 5 * time.Second, Retention: time.Hour})
	require.NoError(t, err)
	err = s.Complete(ctx, key, res.Token, &Answer{Status: 200, Body: make([]byte, 1025)})
	require.ErrorIs(t, err, ErrAnswerTooLarge)
	require.ErrorContains(t, err, "1025 bytes (body and headers) is above the limit of 1024 bytes")
	rec, err = s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, StateInProgress, rec.State, "a refused answer stores nothing")
}

// TestTwoMastersLoseDataDuringInProgress: two of five masters lose their
// data while an attempt is IN_PROGRESS (one FLUSHALL, one restarted
// empty): no Begin answers Started before the lease ends, and the first
// after it answers ExpiredInProgress, not Started.
func TestTwoMastersLoseDataDuringInProgress(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: 3 * time.Second, Retention: time.Hour}
	first, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, first.Outcome)

	require.NoError(t, flushAll(servers[0].Addr()))
	require.NoError(t, servers[1].Restart())

	fresh := d.store(t) // a replica started after the loss
	deadline := first.ValidUntil
	begins := 0
	for time.Now().Before(deadline) {
		for _, st := range []*Store{s, fresh} {
			r, err := st.Begin(ctx, req)
			if err != nil {
				require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
				continue
			}
			begins++
			require.NotEqual(t, Started, r.Outcome, "a second attempt started during the lease")
			require.NotEqual(t, ExpiredInProgress, r.Outcome, "taken over during the lease")
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Positive(t, begins)
	var after BeginResult
	require.Eventually(t, func() bool {
		after, err = fresh.Begin(ctx, req)
		return err == nil && after.Outcome != InProgress
	}, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, ExpiredInProgress, after.Outcome)
	require.Equal(t, first.Fence, after.PreviousFence)
}

// TestCompletedSurvivesTwoMastersLosingData: a COMPLETED record is
// replayed after two masters lost their data, and the repaired masters do
// not answer "absent" for it.
func TestCompletedSurvivesTwoMastersLosingData(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: 3 * time.Second, Retention: time.Hour}
	first, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, key, first.Token, &Answer{Status: 200, Body: []byte("paid")}))

	require.NoError(t, flushAll(servers[2].Addr()))
	require.NoError(t, flushAll(servers[3].Addr()))
	fresh := d.store(t)
	for range 20 {
		for _, st := range []*Store{s, fresh} {
			r, err := st.Begin(ctx, req)
			if errors.Is(err, redlock.ErrQuorumUnavailable) {
				continue
			}
			require.NoError(t, err)
			require.Equal(t, Completed, r.Outcome)
			require.Equal(t, []byte("paid"), r.Record.Answer.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRepairedMastersDoNotAnswerForRecords: losses that each stay within
// N−quorum but add up over a record's retention. Masters 3 and 4 are down
// while the record completes (its copies: 0, 1, 2), come back empty and
// are repaired, so they count for locks again; then 0 and 1 lose their
// data and are repaired too. Only master 2 still has the record. Were the
// repaired masters to answer for records, a quorum of them would say
// "absent" and a Begin would start the work again: they must not, and the
// Begin answers quorum unavailable instead.
func TestRepairedMastersDoNotAnswerForRecords(t *testing.T) {
	d := newDeployment(t)
	c := d.client(t)
	s, err := New(c)
	require.NoError(t, err)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: 500 * time.Millisecond, Retention: time.Hour}

	require.NoError(t, servers[3].Kill())
	require.NoError(t, servers[4].Kill())
	t.Cleanup(func() {
		for _, i := range []int{3, 4} {
			if !servers[i].Running() {
				_ = servers[i].Restart()
			}
		}
	})
	first, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, first.Outcome)
	require.NoError(t, s.Complete(ctx, key, first.Token, &Answer{Status: 200, Body: []byte("paid")}))

	require.NoError(t, servers[3].Restart())
	require.NoError(t, servers[4].Restart())
	waitCounting(t, c, 20*time.Second, 3, 4)
	require.NoError(t, flushAll(servers[0].Addr()))
	require.NoError(t, flushAll(servers[1].Addr()))
	// A vote finds the loss at once; the repair follows within probes.
	_, _ = c.Status(ctx, "probe:"+key)
	waitCounting(t, c, 20*time.Second, 0, 1, 3, 4)
	// A Store that has not made a record action since the repairs knows
	// of them from the lock path's markers: /readyz shows the repaired
	// masters out at once, not after a record action reaches each one.
	fresh, err := New(c)
	require.NoError(t, err)
	for _, m := range fresh.RecordMasters(time.Now()) {
		require.False(t, m.Seen)
		if m.Index == 2 {
			require.True(t, m.Counts, "master 2 kept its data")
			require.True(t, m.RepairedAt.IsZero())
			continue
		}
		require.False(t, m.Counts, "master %d was repaired: %+v", m.Index, m)
		require.False(t, m.RepairedAt.IsZero())
		require.Greater(t, m.Left, DefaultMaxRetention-time.Hour)
	}
	// Master 2, the one that kept the record, does not answer: what the
	// other four say decides.
	require.NoError(t, servers[2].Pause())
	defer func() { require.NoError(t, servers[2].Resume()) }()

	for _, st := range []*Store{s, d.store(t)} {
		r, err := st.Begin(ctx, req)
		require.ErrorIs(t, err, redlock.ErrQuorumUnavailable, "outcome %v", r.Outcome)
		// The error says why and when: four masters wait out the max
		// retention since their repair, so a quorum counts for records
		// again in about that (7 days by default).
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		require.True(t, qe.ReturnKnown, "%v", err)
		require.Greater(t, qe.Return, DefaultMaxRetention-time.Hour, "%v", err)
		var rw *RetentionWaitError
		require.ErrorAs(t, err, &rw)
		require.ErrorIs(t, err, redlock.ErrMasterQuarantined)
		require.Contains(t, err.Error(), "answers for records again in")
	}
	// RecordMasters (shown on /readyz) says which masters count for
	// records and when the repaired ones will.
	waiting := 0
	for _, m := range s.RecordMasters(time.Now()) {
		if m.Seen && !m.Counts {
			waiting++
			require.False(t, m.RepairedAt.IsZero())
			require.Greater(t, m.Left, DefaultMaxRetention-time.Hour)
		}
	}
	require.Equal(t, 4, waiting, "masters 0, 1, 3 and 4 wait out the max retention")
	// With a max retention already past since the repairs, the repaired
	// masters count again — and then answer "absent": the limit of the
	// fault model (four masters lost data within the record's retention).
	short, err := New(c, WithMaxRetention(time.Second))
	require.NoError(t, err)
	time.Sleep(time.Second)
	req.Retention = time.Second
	r, err := short.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, r.Outcome, "the negative control: the rule is what refused")
}

// TestList: every record under a prefix is listed once, across pages and
// masters; records of other prefixes are not.
func TestList(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	prefix := newKey(t) + ":acct*[1]:" // glob characters are matched literally
	want := map[string]State{}
	for i := range 12 {
		key := fmt.Sprintf("%sreq-%d", prefix, i)
		res, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp(key), Lease: 10 * time.Second, Retention: time.Hour})
		require.NoError(t, err)
		want[key] = StateInProgress
		if i%2 == 0 {
			require.NoError(t, s.Complete(ctx, key, res.Token, &Answer{Status: 200}))
			want[key] = StateCompleted
		}
	}
	_, err := s.Begin(ctx, BeginRequest{Key: newKey(t) + ":acct-other:req", Fingerprint: fp("o"), Lease: 10 * time.Second, Retention: time.Hour})
	require.NoError(t, err)

	got := map[string]State{}
	cursor, pages := "", 0
	for {
		page, err := s.List(ctx, prefix, cursor, 3)
		require.NoError(t, err)
		for _, r := range page.Records {
			_, dup := got[r.Key]
			require.False(t, dup, "%s listed twice", r.Key)
			got[r.Key] = r.Record.State
		}
		pages++
		if page.Cursor == "" {
			break
		}
		cursor = page.Cursor
		require.Less(t, pages, 10000)
	}
	require.Equal(t, want, got)
	_, err = s.List(ctx, prefix, "9:0:0", 3)
	require.ErrorIs(t, err, ErrInvalid)
}

// TestExtendKeepsTheRecord: a lease extended past the record's retention
// keeps the record with it, so the retry after the lease ends answers
// ExpiredInProgress, not a blind Started; an extend whose lease the max
// retention cannot cover is refused and extends nothing.
func TestExtendKeepsTheRecord(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t, WithMaxRetention(time.Hour))
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("a"), Lease: 500 * time.Millisecond, Retention: time.Second}
	first, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, first.Outcome)

	extendedAt := time.Now()
	_, err = s.Extend(ctx, key, first.Token, 1500*time.Millisecond)
	require.NoError(t, err)

	// Past the retention Begin gave the record, still within the lease.
	time.Sleep(time.Until(extendedAt.Add(1100 * time.Millisecond)))
	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, StateInProgress, rec.State)
	require.Equal(t, first.Fence, rec.Fence)

	// Past the extended lease: the retry sees the attempt.
	time.Sleep(time.Until(extendedAt.Add(1600 * time.Millisecond)))
	var second BeginResult
	require.Eventually(t, func() bool {
		second, err = s.Begin(ctx, req)
		require.NoError(t, err)
		return second.Outcome != InProgress
	}, 2*time.Second, 20*time.Millisecond)
	require.Equal(t, ExpiredInProgress, second.Outcome, "%+v", second)
	require.Equal(t, first.Fence, second.PreviousFence)

	_, err = s.Extend(ctx, key, second.Token, 31*time.Minute)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "lease: 31m0s")
	require.ErrorContains(t, err, "max retention (1h0m0s): the lease can be at most 30m0s")
	require.NoError(t, s.Abort(ctx, key, second.Token))
}

// TestOperatorRepairOfIntactMastersKeepsRecords: repair-fences writes a
// repair marker on every master, "kept" on those it finds intact. Those
// still count for records at once: their records are all there. Before, a
// repair-fences run on a healthy deployment (a break-it pass) held every
// master out of record answers for the max retention (7 days), and every
// idempotency action answered 503. A master whose data was lost and
// repaired before the run is not laundered by it: it stays out.
func TestOperatorRepairOfIntactMastersKeepsRecords(t *testing.T) {
	d := newDeployment(t)
	c := d.client(t)
	s, err := New(c)
	require.NoError(t, err)
	ctx := context.Background()
	key := newKey(t)
	first, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: 500 * time.Millisecond, Retention: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, key, first.Token, &Answer{Status: 200, Body: []byte("paid")}))

	masters := make([]*redis.Options, len(servers))
	for i, srv := range servers {
		masters[i] = &redis.Options{Addr: srv.Addr()}
	}
	repair := func() *redlock.RepairResult {
		t.Helper()
		// The health loop spreads the highest fencing counter to every
		// master (spreadFence); one still below it would be taken for a
		// rollback.
		require.Eventually(t, func() bool {
			var vals []string
			for _, m := range masters {
				r := redis.NewClient(m)
				v, _ := r.Get(ctx, d.fence).Result()
				r.Close()
				vals = append(vals, v)
			}
			for _, v := range vals {
				if v != vals[0] {
					return false
				}
			}
			return true
		}, 10*time.Second, 20*time.Millisecond, "every master has the highest fencing counter")
		res, err := redlock.RepairFences(ctx, masters, redlock.RepairOptions{FenceKey: d.fence, MarkerKey: d.marker, MaxTTL: 2 * time.Second})
		require.NoError(t, err)
		return res
	}
	res := repair()
	for _, m := range res.Masters {
		require.Empty(t, m.Lost, "master %d was intact", m.Index)
	}
	waitCounting(t, c, 20*time.Second, 0, 1, 2, 3, 4)
	recordsCount := func(c *redlock.Client, want map[int]bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			fresh, err := New(c)
			require.NoError(t, err)
			for _, m := range fresh.RecordMasters(time.Now()) {
				if m.Counts != want[m.Index] {
					return false
				}
			}
			return true
		}, 10*time.Second, 50*time.Millisecond, "record masters counting: want %v", want)
	}
	recordsCount(c, map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true})
	r, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: time.Second, Retention: time.Hour})
	require.NoError(t, err, "the intact masters answer for records")
	require.Equal(t, Completed, r.Outcome)
	r, err = s.Begin(ctx, BeginRequest{Key: newKey(t), Fingerprint: fp("new"), Lease: time.Second, Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, Started, r.Outcome)

	// Master 3 loses its data; the Client repairs it from a quorum. A
	// repair-fences run after that finds it intact, but the earlier
	// repair's loss stands: master 3 stays out of record answers.
	require.NoError(t, flushAll(servers[3].Addr()))
	_, _ = c.Status(ctx, "probe:"+key)
	waitCounting(t, c, 20*time.Second, 3)
	recordsCount(c, map[int]bool{0: true, 1: true, 2: true, 4: true})
	repair()
	waitCounting(t, c, 20*time.Second, 0, 1, 2, 3, 4)
	recordsCount(c, map[int]bool{0: true, 1: true, 2: true, 4: true})
	// A daemon started after the run knows only the markers it finds.
	later := d.client(t)
	waitCounting(t, later, 20*time.Second, 0, 1, 2, 4)
	recordsCount(later, map[int]bool{0: true, 1: true, 2: true, 4: true})
}

// TestCompleteFillKeepsTheRetention: a Complete whose first round reached
// fewer than a quorum of the attempt's copies fills in the masters that
// missed its begin, from a copy of round one. The filled copies keep the
// record's retention; they were given a second (the reply's value, not a
// PTTL, was read as the copy's TTL), so an acknowledged answer lived on
// two masters a second later (a break-it pass then had a begin answered
// expired_in_progress after the complete).
func TestCompleteFillKeepsTheRetention(t *testing.T) {
	d := newDeployment(t)
	c := d.client(t)
	s, err := New(c)
	require.NoError(t, err)
	ctx := context.Background()
	key := newKey(t)

	first, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: 5 * time.Second, Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, Started, first.Outcome)
	// Masters 3 and 4 missed the begin (as if paused while it ran).
	for _, i := range []int{3, 4} {
		r := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
		require.NoError(t, r.Del(ctx, recordKey(key)).Err())
		r.Close()
	}

	require.NoError(t, servers[2].Pause())
	err = s.Complete(ctx, key, first.Token, &Answer{Status: 200, Body: []byte("paid")})
	require.NoError(t, servers[2].Resume())
	require.NoError(t, err)
	for _, i := range []int{0, 1, 3, 4} {
		r := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
		left, err := r.PTTL(ctx, recordKey(key)).Result()
		st := r.HGet(ctx, recordKey(key), "st").Val()
		r.Close()
		require.NoError(t, err)
		assert.Equal(t, "COMPLETED", st, "master %d", i)
		assert.Greater(t, left, 50*time.Minute, "master %d keeps the record's retention", i)
	}
}

// TestTakeOverHearsALateCompleteOnAnyMaster: attempt A's lease ended and
// its late Complete reached one master first (its COMPLETED copy there)
// when B's take-over Begin writes. B decided at the quorum-th write and
// answered ExpiredInProgress while that master held A's answer, so one key
// replayed A's answer or B's depending on which master a read met first (a
// break-it pass, with no fault at all). B's write now hears every master
// that answers, within the per-master timeout: A's COMPLETED copy refuses
// B, whose copies are put back, and A's answer is the record's.
func TestTakeOverHearsALateCompleteOnAnyMaster(t *testing.T) {
	d := newDeployment(t)
	c := d.client(t)
	s, err := New(c)
	require.NoError(t, err)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: time.Second, Retention: time.Hour}
	a, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, a.Outcome)
	// A's late Complete reached master 3 first.
	enc, err := s.encodeAnswer(&Answer{Status: 201, Body: []byte("A")})
	require.NoError(t, err)
	r3 := redis.NewClient(&redis.Options{Addr: servers[3].Addr()})
	require.NoError(t, r3.HSet(ctx, recordKey(key), "st", "COMPLETED", "ans", enc, "tc", time.Now().UnixMilli()).Err())
	r3.Close()
	time.Sleep(time.Until(a.ValidUntil)) // A's lease ended (its keys go within the drift)

	// B's take-over: its lease, then its write, with master 3 answering
	// last (paused 150 ms, within the 500 ms per-master timeout).
	cp, err := s.read(ctx, key)
	require.NoError(t, err)
	lease, err := c.Acquire(ctx, leaseKey(key), time.Second, redlock.WithWait(2*time.Second))
	require.NoError(t, err)
	require.NoError(t, servers[3].Pause())
	go func() {
		time.Sleep(150 * time.Millisecond)
		_ = servers[3].Resume()
	}()
	res, err := s.writeBegin(ctx, &req, lease, &cp)
	require.NoError(t, err)
	require.Equal(t, Completed, res.Outcome, "A's COMPLETED copy refuses the take-over")
	require.NotNil(t, res.Record.Answer)
	assert.Equal(t, "A", string(res.Record.Answer.Body))
	_ = lease.Release(ctx)

	for range 10 {
		r, err := s.Begin(ctx, req)
		require.NoError(t, err)
		if r.Outcome == Completed {
			assert.Equal(t, "A", string(r.Record.Answer.Body), "every replay is A's")
		} else {
			// A read that missed master 3 found A's IN_PROGRESS copies;
			// the write then met master 3.
			t.Fatalf("outcome %v, want Completed", r.Outcome)
		}
	}
}

// TestReadAnswersWithTheHighestFence: copies left by a late Complete of a
// taken-over attempt A (fence 7, one master) beside the attempt B that
// completed on a quorum (fence 8). A read stopped at the first COMPLETED
// copy it heard, so which answer replayed depended on which master
// answered first; it now hears a quorum and B's (the highest fence, met by
// every quorum) answers. Masters 0-2, which hold B's, answer last here.
func TestReadAnswersWithTheHighestFence(t *testing.T) {
	d := newDeployment(t)
	c := d.client(t)
	s, err := New(c)
	require.NoError(t, err)
	ctx := context.Background()
	key := newKey(t)
	put := func(i int, tok string, fence int, body string) {
		enc, err := s.encodeAnswer(&Answer{Status: 201, Body: []byte(body)})
		require.NoError(t, err)
		r := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
		defer r.Close()
		now := time.Now().UnixMilli()
		require.NoError(t, r.HSet(ctx, recordKey(key), "fp", fp("pay"), "st", "COMPLETED", "tok", tok, "fence", fence,
			"att", 1, "t0", now, "ret", 3600000, "ans", enc, "tc", now).Err())
		require.NoError(t, r.PExpire(ctx, recordKey(key), time.Hour).Err())
	}
	for _, i := range []int{0, 1, 2} {
		put(i, strings.Repeat("b", 32), 8, "B")
	}
	put(3, strings.Repeat("a", 32), 7, "A")
	for _, i := range []int{0, 1, 2} {
		require.NoError(t, servers[i].Pause())
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		for _, i := range []int{0, 1, 2} {
			_ = servers[i].Resume()
		}
	}()
	r, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: time.Second, Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, Completed, r.Outcome)
	assert.Equal(t, "B", string(r.Record.Answer.Body), "the highest fence's answer")
	assert.EqualValues(t, 8, r.Record.Fence)
}

// TestAbortOfATakeOverKeepsTheEarlierAttempt: attempt A's lease ended
// without a complete; B took over (ExpiredInProgress) and aborted, as
// client.Idempotent does when its function fails. The abort deleted the
// whole record, A's copy with it, so the next Begin answered Started with
// attempts 1 and no Takeover — while A may have done its work (a break-it
// pass). It now puts A's copy back: the next Begin is ExpiredInProgress.
func TestAbortOfATakeOverKeepsTheEarlierAttempt(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: time.Second, Retention: time.Hour}
	a, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, a.Outcome)
	begin := func() BeginResult {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r, err := s.Begin(ctx, req)
			require.NoError(t, err)
			if r.Outcome != InProgress || time.Now().After(deadline) {
				return r
			}
		}
	}
	b := begin()
	require.Equal(t, ExpiredInProgress, b.Outcome)
	require.Equal(t, a.Fence, b.PreviousFence)
	require.NoError(t, s.Abort(ctx, key, b.Token))

	c := begin()
	require.Equal(t, ExpiredInProgress, c.Outcome, "A may have done its work: not a fresh start")
	assert.Equal(t, a.Fence, c.PreviousFence)
	assert.EqualValues(t, 2, c.Attempts)

	// An abort of an attempt that took over nothing still leaves no record.
	other := newKey(t)
	f, err := s.Begin(ctx, BeginRequest{Key: other, Fingerprint: fp("x"), Lease: time.Second, Retention: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Abort(ctx, other, f.Token))
	g, err := s.Get(ctx, other)
	require.NoError(t, err)
	assert.Equal(t, StateAbsent, g.State)
}

// TestListLeavesTheAnswersOnTheMasters: a listing shows a completed
// record's answer status and size, and reads neither the answer nor its
// stored JSON: each master sends a fraction of a 48 KiB answer for the
// page. A record completed by an older client (no stored size) is listed
// with the same status and size, from its answer. Found by a helper: pages
// over records with 1 MB answers blocked each master 10-16 ms per record
// and slowed the lock calls.
func TestListLeavesTheAnswersOnTheMasters(t *testing.T) {
	d := newDeployment(t)
	// No health probe in the measured window: a probe round's INFO and
	// CONFIG GET answers are about 20 KB a master, and under -race on two
	// cores a listing can outlast a 100 ms health interval.
	s, err := New(d.client(t, redlock.WithHealthInterval(30*time.Second)), WithMaxAnswerBytes(1<<20))
	require.NoError(t, err)
	ctx := context.Background()
	prefix := newKey(t) + ":"
	answer := &Answer{Status: 201, Headers: map[string]string{"Location": "/orders/7"}, Body: bytes.Repeat([]byte("x"), 48<<10)}
	for _, k := range []string{"new", "old"} {
		res, err := s.Begin(ctx, BeginRequest{Key: prefix + k, Fingerprint: fp(k), Lease: 10 * time.Second, Retention: time.Hour})
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, prefix+k, res.Token, answer))
	}
	rdbs := make([]*redis.Client, len(servers))
	for i, srv := range servers {
		rdbs[i] = redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { rdbs[i].Close() })
		// As an older client's complete left it: no size or status.
		require.NoError(t, rdbs[i].HDel(ctx, recordKey(prefix+"old"), "asz", "ast").Err())
	}
	list := func(p string) []ListedRecord {
		var out []ListedRecord
		cursor := ""
		for {
			page, err := s.List(ctx, p, cursor, 100)
			require.NoError(t, err)
			out = append(out, page.Records...)
			if cursor = page.Cursor; cursor == "" {
				return out
			}
		}
	}
	netOut := func() []int64 {
		out := make([]int64, len(rdbs))
		for i, r := range rdbs {
			out[i], _ = strconv.ParseInt(infoField(t, r, "total_net_output_bytes"), 10, 64)
		}
		return out
	}
	// The listing connections are dialled (each new connection reads the
	// master's INFO) outside the measured window.
	_ = list(prefix + "none")
	before := netOut()
	recs := list(prefix + "new")
	after := netOut()
	require.Len(t, recs, 1)
	require.Equal(t, StateCompleted, recs[0].Record.State)
	require.Equal(t, 201, recs[0].Record.Answer.Status)
	require.Equal(t, answer.Size(), recs[0].Record.AnswerBytes())
	// A page of one record costs each master about 16 KB of its own (the
	// quorum reads' replies and their batches' INFO readings, measured on
	// this machine's Redis 7.0); the 48 KB answer is not among them.
	for i := range rdbs {
		assert.Less(t, after[i]-before[i], int64(len(answer.Body))*2/3, "master %d sent %d bytes for a page of one record", i, after[i]-before[i])
	}
	old := list(prefix + "old")
	require.Len(t, old, 1)
	require.Equal(t, 201, old[0].Record.Answer.Status)
	require.Equal(t, answer.Size(), old[0].Record.AnswerBytes(), "from the answer itself")

	// A replay still has the whole answer.
	res, err := s.Begin(ctx, BeginRequest{Key: prefix + "new", Fingerprint: fp("new"), Lease: 10 * time.Second, Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, Completed, res.Outcome)
	require.Equal(t, answer.Body, res.Record.Answer.Body)
}

// infoField reads one field of INFO from r.
func infoField(t *testing.T, r *redis.Client, name string) string {
	t.Helper()
	info, err := r.Info(context.Background(), "stats").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	t.Fatalf("INFO has no %s", name)
	return ""
}

// TestListWithoutAQuorumFailsAtOnce: with three of five masters paused, the
// first page of a listing is the quorum error, not an empty page (two
// empty pages came first, while the paused masters were skipped one by
// one: found by a black-box pass).
func TestListWithoutAQuorumFailsAtOnce(t *testing.T) {
	d := newDeployment(t)
	c := d.client(t)
	s, err := New(c)
	require.NoError(t, err)
	ctx := context.Background()
	key := newKey(t)
	_, err = s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp(key), Lease: 10 * time.Second, Retention: time.Hour})
	require.NoError(t, err)
	for _, i := range []int{0, 1, 2} {
		require.NoError(t, servers[i].Pause())
		defer func() { require.NoError(t, servers[i].Resume()) }()
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, m := range c.Masters() {
			if m.Counting {
				n++
			}
		}
		return n < 3
	}, 10*time.Second, 20*time.Millisecond)
	_, err = s.List(ctx, key, "", 10)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.False(t, qe.ReturnKnown, "paused masters have no known return: %v", err)
}

// TestSecondAnswerNeverReplays: an attempt completed with answer X on a
// quorum while masters 3 and 4 missed it (back from a restart of durable
// masters, their copies still IN_PROGRESS); a second Complete of the same
// token with answer Y is refused (ErrAlreadyCompleted, "the first answer
// is kept") and, since the record's complete lock, writes nothing (it
// wrote Y where the copies were IN_PROGRESS before; the test then puts
// such Y copies there itself, with X's fence, as an older version left
// them). Every replay must still be X: reads took whichever of the two
// COMPLETED copies answered first (a black-box pass: 9 X and 3 Y of 12
// replays; most Y with two of X's masters paused). Here X's masters answer
// last, so a read without the tie-break on completion time replays Y.
func TestSecondAnswerNeverReplays(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	req := BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: 5 * time.Second, Retention: time.Hour}
	a, err := s.Begin(ctx, req)
	require.NoError(t, err)
	require.Equal(t, Started, a.Outcome)
	require.NoError(t, s.Complete(ctx, key, a.Token, &Answer{Status: 201, Body: []byte("X")}))
	// Masters 3 and 4 as a restart from files written before the
	// Complete left them: the attempt's IN_PROGRESS copy.
	for _, i := range []int{3, 4} {
		r := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
		require.NoError(t, r.HSet(ctx, recordKey(key), "st", "IN_PROGRESS").Err())
		require.NoError(t, r.HDel(ctx, recordKey(key), "ans", "tc", "asz", "ast").Err())
		r.Close()
	}
	time.Sleep(5 * time.Millisecond) // the second Complete's stamp is later
	err = s.Complete(ctx, key, a.Token, &Answer{Status: 201, Body: []byte("Y")})
	require.ErrorIs(t, err, ErrAlreadyCompleted)
	// Since the record's complete lock and its read before the writes
	// (lockCompletes), the refused Complete writes nothing: its read met X.
	for _, i := range []int{3, 4} {
		r := redis.NewClient(&redis.Options{Addr: servers[i].Addr()})
		assert.Equal(t, "IN_PROGRESS", r.HGet(ctx, recordKey(key), "st").Val(), "master %d", i)
		// What a refused Complete of an earlier version left there, and
		// what reads must still not replay: Y, stamped later.
		y, err := json.Marshal(&Answer{Status: 201, Body: []byte("Y")})
		require.NoError(t, err)
		require.NoError(t, r.HSet(ctx, recordKey(key), "st", "COMPLETED", "ans", string(y), "tc", strconv.FormatInt(time.Now().UnixMilli(), 10)).Err())
		r.Close()
	}

	for range 3 {
		for _, i := range []int{0, 1, 2} {
			require.NoError(t, servers[i].Pause())
		}
		go func() {
			time.Sleep(150 * time.Millisecond)
			for _, i := range []int{0, 1, 2} {
				_ = servers[i].Resume()
			}
		}()
		r, err := s.Begin(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Completed, r.Outcome)
		assert.Equal(t, "X", string(r.Record.Answer.Body), "the first answer replays")
		time.Sleep(200 * time.Millisecond) // resumed
	}
}

// TestConcurrentCompletesOneAnswer: two Completes of one attempt with
// different answers, sent at once through two Stores (two daemons), every
// master up: exactly one returns nil, the other ErrAlreadyCompleted, and
// every master holds, and every read replays, the answer that returned
// nil. A black-box pass saw the masters split between the two answers (29
// of 150 keys replayed both, and both callers told 409 on 32): each master
// kept the Complete that reached it first. Without the record's complete
// lock (lockCompletes) this test finds such keys.
func TestConcurrentCompletesOneAnswer(t *testing.T) {
	d := newDeployment(t)
	stores := []*Store{d.store(t), d.store(t)}
	ctx := context.Background()
	rdbs := make([]*redis.Client, len(servers))
	for i, s := range servers {
		rdbs[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer rdbs[i].Close()
	}
	for n := range 30 {
		key := newKey(t)
		req := BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: 10 * time.Second, Retention: time.Hour}
		a, err := stores[0].Begin(ctx, req)
		require.NoError(t, err)
		require.Equal(t, Started, a.Outcome)
		answers := []*Answer{{Status: 201, Body: []byte("C1")}, {Status: 201, Body: []byte("C2")}}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() { errs[i] = stores[i].Complete(ctx, key, a.Token, answers[i]) })
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				require.Equal(t, -1, won, "key %d: both Completes answered nil", n)
				won = i
			} else {
				require.ErrorIs(t, err, ErrAlreadyCompleted, "key %d", n)
			}
		}
		require.NotEqual(t, -1, won, "key %d: both Completes refused (%v)", n, errs)
		want := string(answers[won].Body)
		for i, r := range rdbs {
			raw := r.HGet(ctx, recordKey(key), "ans").Val()
			assert.Contains(t, raw, fmt.Sprintf("%q", base64Of(want)), "key %d, master %d holds the answer that returned nil", n, i)
		}
		for _, s := range stores {
			rec, err := s.Get(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, want, string(rec.Answer.Body), "key %d: the read replays the answer that returned nil", n)
		}
	}
}

func base64Of(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestCompleteAfterADaemonDiedCompleting: the record's complete lock left
// by a daemon that died while completing (taken here and never released)
// delays the next Complete until it runs out, and no longer: the Complete
// waits a second past the lock's TTL, and stores its answer.
func TestCompleteAfterADaemonDiedCompleting(t *testing.T) {
	d := newDeployment(t)
	s := d.store(t)
	ctx := context.Background()
	key := newKey(t)
	a, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp("pay"), Lease: 30 * time.Second, Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, Started, a.Outcome)
	_, err = d.client(t).Acquire(ctx, key+":complete", completeLockTTL)
	require.NoError(t, err, "the dead daemon's complete lock")
	require.NoError(t, s.Complete(ctx, key, a.Token, &Answer{Status: 201, Body: []byte("X")}))
	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, "X", string(rec.Answer.Body))
}

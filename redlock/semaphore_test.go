package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdInterval is one permit's time held, as its holder saw it: from
// AcquirePermit's return to the earlier of the start of its release and the
// end of its validity.
type holdInterval struct {
	from, to time.Time
	slot     int
}

// maxOverlap returns the largest number of intervals that hold at one
// instant (a sweep over the ends; an interval that ends when another
// starts does not overlap it), and one instant where it is reached.
func maxOverlap(h []holdInterval) (int, time.Time) {
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(h))
	for _, iv := range h {
		edges = append(edges, edge{iv.from, +1}, edge{iv.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends before starts at the same instant
	})
	cur, best, at := 0, 0, time.Time{}
	for _, e := range edges {
		cur += e.delta
		if cur > best {
			best, at = cur, e.at
		}
	}
	return best, at
}

// TestMaxOverlapSeesTooMany is the checker's own negative control: a
// history with four holders at once is reported as four.
func TestMaxOverlapSeesTooMany(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	h := []holdInterval{{ms(0), ms(10), 0}, {ms(2), ms(12), 1}, {ms(4), ms(14), 2}, {ms(10), ms(20), 0}}
	n, _ := maxOverlap(h)
	assert.Equal(t, 3, n, "an interval ending when another starts does not overlap it")
	h = append(h, holdInterval{ms(5), ms(6), 3})
	n, at := maxOverlap(h)
	assert.Equal(t, 4, n)
	assert.Equal(t, ms(5), at)
}

// TestSemaphoreAtMostNHolders: 50 concurrent callers over five Clients take
// permits of one semaphore with N = 3, hold them briefly and release them;
// the history of every hold never has four at once (checked on the
// intervals, not on a counter), and does reach three.
func TestSemaphoreAtMostNHolders(t *testing.T) {
	const permits, callers, rounds = 3, 50, 6
	name := newKey(t)
	clients := make([]*Client, 5)
	for i := range clients {
		clients[i] = newClient(t)
	}
	ctx := context.Background()
	var mu sync.Mutex
	var history []holdInterval
	var wg sync.WaitGroup
	for i := range callers {
		c := clients[i%len(clients)]
		wg.Go(func() {
			for range rounds {
				p, err := c.AcquirePermit(ctx, name, permits, 2*time.Second, WithWait(20*time.Second))
				if !assert.NoError(t, err) {
					return
				}
				from := time.Now()
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				to := time.Now()
				if v := p.ValidUntil(); v.Before(to) {
					to = v
				}
				mu.Lock()
				history = append(history, holdInterval{from, to, p.Slot})
				mu.Unlock()
				assert.NoError(t, p.Release(ctx))
			}
		})
	}
	wg.Wait()
	require.Len(t, history, callers*rounds)
	n, at := maxOverlap(history)
	assert.LessOrEqual(t, n, permits, "%d holders at %v", n, at)
	assert.Equal(t, permits, n, "50 callers never held all three permits at once: the test did not contend")
	for _, iv := range history {
		assert.True(t, iv.slot >= 0 && iv.slot < permits, "slot %d", iv.slot)
	}
}

// countingAcquire is the UNSAFE design, kept here as a negative control:
// each reachable master adds token to the holders' set of the semaphore
// when it has fewer than permits, and the holder is granted with a quorum
// of such votes.
func countingAcquire(t *testing.T, rdbs []*redis.Client, reach []int, key, token string, permits int) bool {
	t.Helper()
	script := redis.NewScript(`if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then redis.call('SADD', KEYS[1], ARGV[1]) return 1 end return 0`)
	votes := 0
	for _, i := range reach {
		n, err := script.Run(context.Background(), rdbs[i], []string{key}, token, permits).Int()
		require.NoError(t, err)
		votes += n
	}
	return votes >= 3
}

// partialClient is a Client over the five masters of which only those in
// reach can be reached: the others are addresses where nothing listens.
func partialClient(t *testing.T, reach []int) *Client {
	t.Helper()
	marker := fmt.Sprintf("marker:%s:%d", t.Name(), keySeq.Add(1))
	plantMarker(marker)
	opts := masterOptions()
	for i := range opts {
		if !slices.Contains(reach, i) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			opts[i].Addr = l.Addr().String()
			require.NoError(t, l.Close())
		}
	}
	c, err := New(opts, WithPerMasterTimeout(500*time.Millisecond), WithMarkerKey(marker))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	waitCounting(t, c, len(reach))
	return c
}

// waitCounting waits until n masters count for c: a master restarted by
// an earlier test, or one a new Client has not probed yet, votes once
// the Client's first probe round has run for it.
func waitCounting(t *testing.T, c *Client, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		counting := 0
		for _, m := range c.Masters() {
			if m.Counting {
				counting++
			}
		}
		return counting == n
	}, 10*time.Second, 5*time.Millisecond)
}

// TestSemaphoreCountingControl: with N = 2, three holders that reach the
// masters {0,1,2}, {2,3,4} and {0,1,3}. Counting holders per master grants
// all three (no master counts more than two): the negative control. The
// slot locks grant two and refuse the third.
func TestSemaphoreCountingControl(t *testing.T) {
	const permits = 2
	reaches := [][]int{{0, 1, 2}, {2, 3, 4}, {0, 1, 3}}
	rdbs := direct(t)
	name := newKey(t)

	t.Run("counting per master is unsafe", func(t *testing.T) {
		key := name + ":counting"
		granted := 0
		for i, reach := range reaches {
			if countingAcquire(t, rdbs, reach, key, fmt.Sprintf("holder%d", i), permits) {
				granted++
			}
		}
		for i, r := range rdbs {
			n, err := r.SCard(context.Background(), key).Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, n, int64(permits), "master %d", i)
			r.Del(context.Background(), key)
		}
		assert.Equal(t, 3, granted, "the control must show three holders of two permits")
	})

	t.Run("slot locks", func(t *testing.T) {
		ctx := context.Background()
		var held []*Permit
		var refused []error
		for _, reach := range reaches {
			c := partialClient(t, reach)
			p, err := c.AcquirePermit(ctx, name, permits, 10*time.Second, WithRetry(NoRetry()))
			if err != nil {
				refused = append(refused, err)
				continue
			}
			held = append(held, p)
			t.Cleanup(func() { _ = p.Release(context.Background()) })
		}
		assert.Len(t, held, permits)
		require.Len(t, refused, 1)
		assert.ErrorIs(t, refused[0], ErrLockHeld)
		assert.NotEqual(t, held[0].Slot, held[1].Slot)
	})
}

// TestSemaphoreDownSubsets: for every subset of down masters, a semaphore
// of two permits grants two holders and refuses a third while a quorum is
// up (status: two taken), and otherwise fails with ErrQuorumUnavailable and
// leaves no slot key on any master.
func TestSemaphoreDownSubsets(t *testing.T) {
	rdbs := direct(t)
	ctx := context.Background()
	for mask := range 32 {
		down := bits(mask)
		t.Run(fmt.Sprintf("down=%v", down), func(t *testing.T) {
			name := newKey(t)
			withMasters(t, "kill", down...)
			c := newClient(t, WithPerMasterTimeout(5*time.Second))
			if len(down) <= 2 {
				waitCounting(t, c, 5-len(down))
			}
			p1, err := c.AcquirePermit(ctx, name, 2, 10*time.Second, WithRetry(NoRetry()))
			if len(down) > 2 {
				require.ErrorIs(t, err, ErrQuorumUnavailable)
				require.NotErrorIs(t, err, ErrMasterTimeout, "must not wait for dead masters")
				for slot := range 2 {
					assert.Empty(t, holders(t, rdbs, PermitKey(name, slot), ""), "slot %d", slot)
					for i := range 5 {
						if servers[i].Running() {
							n, err := rdbs[i].Exists(ctx, PermitKey(name, slot)).Result()
							require.NoError(t, err)
							assert.Zero(t, n, "master %d kept slot %d", i, slot)
						}
					}
				}
				_, err = c.SemaphoreStatus(ctx, name, 2)
				require.ErrorIs(t, err, ErrQuorumUnavailable)
				return
			}
			require.NoError(t, err)
			p2, err := c.AcquirePermit(ctx, name, 2, 10*time.Second, WithRetry(NoRetry()))
			require.NoError(t, err)
			assert.NotEqual(t, p1.Slot, p2.Slot)
			assert.NotEqual(t, p1.Token(), p2.Token())
			_, err = c.AcquirePermit(ctx, name, 2, 10*time.Second, WithRetry(NoRetry()))
			require.ErrorIs(t, err, ErrLockHeld)
			var oe *OutcomeError
			require.ErrorAs(t, err, &oe)
			assert.Positive(t, oe.RetryAfter)
			st, err := c.SemaphoreStatus(ctx, name, 2)
			require.NoError(t, err)
			assert.Equal(t, SemaphoreStatus{Permits: 2, Taken: 2, NextFree: st.NextFree}, st)
			assert.Positive(t, st.NextFree)
			require.NoError(t, p1.Extend(ctx, 20*time.Second))
			require.NoError(t, p1.Release(ctx))
			st, err = c.SemaphoreStatus(ctx, name, 2)
			require.NoError(t, err)
			assert.Equal(t, 1, st.Taken)
			p3, err := c.AcquirePermit(ctx, name, 2, 10*time.Second, WithRetry(NoRetry()))
			require.NoError(t, err)
			assert.Equal(t, p1.Slot, p3.Slot, "the released slot is the free one")
			assert.Greater(t, p3.Fence(), p1.Fence(), "a slot's fence grows across its holders")
			require.NoError(t, p2.Release(ctx))
			require.NoError(t, p3.Release(ctx))
		})
	}
}

// TestSemaphoreWaitWokenByRelease: a waiter for a full semaphore gets the
// permit when a holder releases it, by the release notification (the
// fallback poll is an hour).
func TestSemaphoreWaitWokenByRelease(t *testing.T) {
	defer func(d time.Duration) { pollFallback = d }(pollFallback)
	pollFallback = time.Hour
	c1, c2 := newClient(t), newClient(t)
	ctx := context.Background()
	name := newKey(t)
	var held []*Permit
	for range 2 {
		p, err := c1.AcquirePermit(ctx, name, 2, time.Minute)
		require.NoError(t, err)
		held = append(held, p)
	}
	got := make(chan *Permit, 1)
	go func() {
		p, err := c2.AcquirePermit(ctx, name, 2, time.Minute, WithWait(50*time.Second))
		assert.NoError(t, err)
		got <- p
	}()
	require.Eventually(t, func() bool { return c2.Waiting() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, held[1].Release(ctx))
	p := <-got
	require.NotNil(t, p)
	assert.Equal(t, held[1].Slot, p.Slot)
	require.NoError(t, p.Release(ctx))
	require.NoError(t, held[0].Release(ctx))
}

func TestSemaphoreInvalid(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	for _, n := range []int{0, -1, MaxPermits + 1} {
		_, err := c.AcquirePermit(ctx, "x", n, time.Second)
		require.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), fmt.Sprintf("permits %d is outside 1 to %d", n, MaxPermits))
		_, err = c.SemaphoreStatus(ctx, "x", n)
		require.ErrorIs(t, err, ErrInvalid)
	}
	_, err := c.AcquirePermit(ctx, "", 2, time.Second)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = c.AcquirePermit(ctx, "x", 2, time.Millisecond)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestPermitQueue(t *testing.T) {
	q, ok := permitQueue(PermitKey("a#permit:b", 17))
	assert.True(t, ok)
	assert.Equal(t, "a#permit:b#permit:", q)
	_, slot, ok := parsePermitKey(PermitKey("a", 0))
	assert.True(t, ok)
	assert.Equal(t, 0, slot)
	for _, k := range []string{"a", "a#permit:", "a#permit:1x", "a#permit:01", "a#permit:00", "a#permit:99999999999999999999"} {
		_, ok := permitQueue(k)
		assert.False(t, ok, k)
	}
}

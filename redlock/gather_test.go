package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatherAll runs gather over f for every master and returns each master's
// error (nil for an answer) and when gather returned.
func gatherAll(c *Client, f *fan, start time.Time) ([]error, time.Time) {
	errs := make([]error, len(c.masters))
	seen := make([]bool, len(c.masters))
	c.gather(context.Background(), f, start, nil, func(r reply) bool {
		if seen[r.idx] {
			panic("two results for one master")
		}
		seen[r.idx] = true
		errs[r.idx] = r.err
		return false
	}, nil)
	return errs, time.Now()
}

// newFan is a fan-out whose calls were never queued on a lane: the test
// plays the lane, writing stamps and answers itself, to control when each
// happens relative to the per-master timeout.
func newFan(c *Client) *fan {
	f := makeFan(len(c.masters))
	for i := range f.calls {
		f.calls[i].idx = int32(i)
	}
	return f
}

// TestGatherTimeoutCountsFromTheWrite: a call that waited in this process
// (a stalled scheduler, a busy lane) before it was written still gets the
// whole per-master timeout for the master's answer. With the timeout
// counted from the start of the fan-out, as before, the answers below
// arrive after it and every master would be reported timed out — on a
// saturated machine that was `make bench`'s c=256 503s with healthy masters.
func TestGatherTimeoutCountsFromTheWrite(t *testing.T) {
	const pmt = time.Second
	c := newClient(t, WithPerMasterTimeout(pmt))
	f := newFan(c)
	// The fan-out began 0.9 s ago; its calls are written now.
	start := time.Now().Add(-900 * time.Millisecond)
	written := time.Now()
	for i := range f.calls {
		f.calls[i].written.Store(written.UnixNano())
	}
	// The masters answer 0.3 s after the write: past start + timeout,
	// well within written + timeout.
	go func() {
		time.Sleep(300 * time.Millisecond)
		for i := range f.calls {
			f.put(reply{idx: i, val: int64(1), sent: written, at: time.Now()})
		}
	}()
	errs, _ := gatherAll(c, f, start)
	for i, err := range errs {
		assert.NoError(t, err, "master %d", i)
	}
}

// TestGatherGivesUpOnUnwrittenCalls: a call still queued in this process
// at start + timeout (its master's lane stuck on an earlier pipeline) is
// reported timed out then, not waited for: the wait for a stuck master
// stays bounded.
func TestGatherGivesUpOnUnwrittenCalls(t *testing.T) {
	const pmt = 200 * time.Millisecond
	c := newClient(t, WithPerMasterTimeout(pmt))
	f := newFan(c)
	start := time.Now()
	// Three masters answer at once; two calls are never written.
	for i := range 3 {
		f.calls[i].written.Store(start.UnixNano())
		f.put(reply{idx: i, val: int64(1), sent: start, at: start})
	}
	errs, done := gatherAll(c, f, start)
	for i := range 3 {
		assert.NoError(t, errs[i], "master %d", i)
	}
	for _, i := range []int{3, 4} {
		assert.True(t, errors.Is(errs[i], ErrMasterTimeout), "master %d: %v", i, errs[i])
	}
	assert.GreaterOrEqual(t, done.Sub(start), pmt, "gave up before the timeout")
}

// TestGatherWaitsForLateWrites: of two silent masters, the one written
// later sets how long gather waits, and one that never answers is reported
// timed out at its own written + timeout.
func TestGatherWaitsForLateWrites(t *testing.T) {
	const pmt = 300 * time.Millisecond
	c := newClient(t, WithPerMasterTimeout(pmt))
	f := newFan(c)
	start := time.Now()
	late := start.Add(200 * time.Millisecond)
	f.calls[0].written.Store(start.UnixNano())
	f.calls[1].written.Store(late.UnixNano()) // silent: never answers
	for i := 2; i < 5; i++ {
		f.calls[i].written.Store(start.UnixNano())
		f.put(reply{idx: i, val: int64(1), sent: start, at: start})
	}
	go func() {
		// Master 0 answers after start + timeout but before late + timeout.
		time.Sleep(pmt + 100*time.Millisecond)
		f.put(reply{idx: 0, val: int64(1), sent: start, at: time.Now()})
	}()
	errs, done := gatherAll(c, f, start)
	assert.NoError(t, errs[0])
	assert.True(t, errors.Is(errs[1], ErrMasterTimeout), "master 1: %v", errs[1])
	assert.GreaterOrEqual(t, done.Sub(late), pmt, "gave up on master 1 before its write + timeout")
}

// TestGatherReadsArrivedAnswersBeforeGivingUp: answers that are already in
// the channel when the deadline has passed are counted. select picks among
// ready cases at random, so a gather that raced its timer against them
// reported some healthy masters timed out; 200 rounds make that near
// certain.
func TestGatherReadsArrivedAnswersBeforeGivingUp(t *testing.T) {
	const pmt = 50 * time.Millisecond
	c := newClient(t, WithPerMasterTimeout(pmt))
	for round := range 200 {
		f := newFan(c)
		start := time.Now().Add(-2 * pmt) // the deadline passed before gather ran
		for i := range f.calls {
			f.put(reply{idx: i, val: int64(1), sent: start, at: start})
		}
		errs, _ := gatherAll(c, f, start)
		for i, err := range errs {
			require.NoError(t, err, "round %d, master %d", round, i)
		}
	}
}

// TestGatherReadsArrivedAnswersBeforeCancelling: answers already in the
// channel when ctx is cancelled are counted, as they are at a deadline. A
// gather that raced ctx.Done against them reported some answering masters
// as cancelled: an acquire cancelled right after its last vote counted
// fewer votes and stored fences than it had, and failed (safe, but the lock
// it had won went to its clean-up). 200 rounds make that near certain.
func TestGatherReadsArrivedAnswersBeforeCancelling(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for round := range 200 {
		f := newFan(c)
		start := time.Now()
		for i := range f.calls {
			f.put(reply{idx: i, val: int64(1), sent: start, at: start})
		}
		errs := make([]error, len(c.masters))
		c.gather(ctx, f, start, nil, func(r reply) bool {
			errs[r.idx] = r.err
			return false
		}, nil)
		for i, err := range errs {
			require.NoError(t, err, "round %d, master %d", round, i)
		}
	}
}

// TestGatherSleepsUntilTheAnswersItNeeds: with more, gather reads nothing
// until that many answers arrived; the answers before it wait in the
// fan-out. Each onReply sees all five in: gather slept through the first
// four. Without more it reads each answer as it comes.
func TestGatherSleepsUntilTheAnswersItNeeds(t *testing.T) {
	c := newClient(t, WithPerMasterTimeout(9*time.Second))
	for _, tc := range []struct {
		name string
		more func() int
	}{{"all five", func() int { return 5 }}, {"one at a time", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFan(c)
			start := time.Now()
			for i := range f.calls {
				f.calls[i].written.Store(start.UnixNano())
			}
			var read atomic.Int32
			seen := make(chan int32, len(c.masters)) // arrived, at each onReply
			go c.gather(context.Background(), f, start, nil, func(r reply) bool {
				seen <- f.arrived.Load()
				read.Add(1)
				return false
			}, tc.more)
			want := int32(1)
			if tc.more != nil {
				want = 5
			}
			require.Eventually(t, func() bool { return f.wakeAt.Load() == want }, 5*time.Second, time.Millisecond, "gather sleeps")
			for i := range f.calls {
				f.put(reply{idx: i, val: int64(1), sent: start, at: time.Now()})
				if tc.more == nil {
					// Read at once: the next answer finds it read.
					require.Eventually(t, func() bool { return read.Load() == int32(i+1) }, 5*time.Second, time.Millisecond)
				} else if i < 4 {
					assert.Zero(t, read.Load(), "read before the fifth answer")
				}
			}
			for i := range f.calls {
				arrived := <-seen
				if tc.more != nil {
					assert.Equal(t, int32(5), arrived, "answer %d read before the fifth arrived", i)
				} else {
					assert.Equal(t, int32(i+1), arrived)
				}
			}
		})
	}
}

// TestGatherLosesNoWake: answers put from five goroutines while gather
// reads and re-arms (more of one, two, then the rest) are all read, none
// reported timed out. A wake lost between gather's store of wakeAt and its
// last look at arrived would leave it asleep until the per-master timeout
// (9 s), which no round here comes near. Negative control: put signalling
// only when arrived equals wakeAt, and gather not looking at arrived after
// its store, fails within a few hundred rounds.
func TestGatherLosesNoWake(t *testing.T) {
	c := newClient(t, WithPerMasterTimeout(9*time.Second))
	for round := range 2000 {
		f := newFan(c)
		start := time.Now()
		for i := range f.calls {
			f.calls[i].written.Store(start.UnixNano())
		}
		for i := range f.calls {
			go f.put(reply{idx: i, val: int64(1), sent: start, at: start})
		}
		heard := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.gather(context.Background(), f, start, nil, func(r reply) bool {
				require.NoError(t, r.err, "round %d, master %d", round, r.idx)
				heard++
				return false
			}, func() int { return heard%3 + 1 })
		}()
		select {
		case <-done:
		case <-time.After(8 * time.Second):
			t.Fatalf("round %d: gather still asleep with %d of 5 answers in and %d read", round, f.arrived.Load(), heard)
		}
		require.Equal(t, 5, heard)
	}
}

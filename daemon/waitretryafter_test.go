package daemon

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitersRetryAfterIsTheHoldersTimeLeft: every acquire whose wait_ms
// runs out answers retry_after (and Retry-After) as the holder's time
// left when it answers, not when it arrived. Only the first waiter of a
// key attempts while the key is held; the others answered the refusal of
// their own first attempt: a black-box pass saw, with one holder of ttl
// 25 and five waiters of wait_ms 10000, three answer 15 and two 25. Here
// one waiter (wait_ms 8000) queues first, three more (wait_ms 3000) queue
// behind it and give up while it still waits: they must say about 12 s
// for a 15 s holder, not 15.
func TestWaitersRetryAfterIsTheHoldersTimeLeft(t *testing.T) {
	d := newDeployment(t)
	ts := newTestServer(t, d.locker(t), func(o *Options) { o.KeyPrefix = d.prefix; o.MaxWait = 10 * time.Second })
	const ttl = 15 * time.Second
	heldAt := time.Now() // the holder's lock ends no later than heldAt + ttl
	okData(t, ts.lock(t, testKeyAcme, fmt.Sprintf(`{"key":"ra:held","ttl":%d}`, int(ttl/time.Second))))

	type answer struct {
		r  *response
		at time.Time
	}
	answers := make(chan answer, 4)
	var wg sync.WaitGroup
	send := func(waitMS int) {
		wg.Go(func() {
			r := ts.lock(t, testKeyAcme, fmt.Sprintf(`{"key":"ra:held","ttl":5,"wait_ms":%d}`, waitMS))
			answers <- answer{r, time.Now()}
		})
	}
	send(8000)
	require.Eventually(t, func() bool { return ts.Server.waiters.waiting() == 1 }, 5*time.Second, time.Millisecond)
	for range 3 {
		send(3000)
	}
	wg.Wait()
	close(answers)
	n := 0
	for a := range answers {
		n++
		data := okData(t, a.r)
		require.Equal(t, false, data["acquired"], a.r.Raw)
		ra := num(t, data, "retry_after")
		// The daemon computed it a moment before a.at: up to a second
		// more than the time left at a.at, rounded up.
		left := heldAt.Add(ttl).Sub(a.at)
		most := int64((left+time.Second-1)/time.Second) + 1
		assert.LessOrEqual(t, ra, most, "retry_after %d answered %v after the holder took the lock (it has at most %v left): %s",
			ra, a.at.Sub(heldAt).Round(time.Millisecond), left.Round(time.Millisecond), a.r.Raw)
		assert.GreaterOrEqual(t, ra, int64(left/time.Second)-2, "retry_after below the holder's time left: %s", a.r.Raw)
		assert.Equal(t, strconv.FormatInt(ra, 10), a.r.Header.Get("Retry-After"), "the header says what the body says")
	}
	assert.Equal(t, 4, n)
}

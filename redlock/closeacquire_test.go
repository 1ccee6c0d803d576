package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCloseLeavesNoKeyOfAFailedAcquire: Close waits for the acquire
// attempts under way, so an attempt that Close makes fail still releases
// the keys it set (Acquire, step 5). Found by a black-box pass: 40
// goroutines acquiring in a loop, Close after 300 ms, and up to 26 of the
// failed acquires left their key on a quorum for the whole TTL (their
// clean-up releases met the closed lanes), with no token to release it.
func TestCloseLeavesNoKeyOfAFailedAcquire(t *testing.T) {
	ctx := context.Background()
	obs := newClient(t)
	direct := make([]*redis.Client, len(servers))
	for i, s := range servers {
		direct[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer direct[i].Close()
	}
	const workers = 40
	for round := range 4 {
		c := newClient(t)
		var wg sync.WaitGroup
		failed := make([]string, workers) // the key of a worker whose last acquire failed
		closedErrs := 0
		var mu sync.Mutex
		for w := range workers {
			key := fmt.Sprintf("%s:%d:%d", newKey(t), round, w)
			wg.Go(func() {
				for {
					l, err := c.Acquire(ctx, key, 30*time.Second)
					if err != nil {
						failed[w] = key
						mu.Lock()
						if errors.Is(err, ErrClosed) {
							closedErrs++
						}
						mu.Unlock()
						return
					}
					// Released through another Client: Close does not
					// release held locks, and this one may be closed.
					_, err = obs.Release(ctx, key, l.Token())
					require.NoError(t, err)
				}
			})
		}
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, c.Close())
		wg.Wait()
		for _, key := range failed {
			require.NotEmpty(t, key)
			holders := 0
			for _, d := range direct {
				if n, err := d.Exists(ctx, key).Result(); err == nil && n == 1 {
					holders++
				}
			}
			assert.Zero(t, holders, "round %d: %s: a failed acquire's key left on %d master(s)", round, key, holders)
		}
		t.Logf("round %d: %d of %d failed with ErrClosed", round, closedErrs, workers)
	}
}

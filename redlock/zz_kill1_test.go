package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// TestZZKill1Throughput: c=64 acquire+release cycles/s with master 0 killed.
func TestZZKill1Throughput(t *testing.T) {
	redis.SetLogger(nopLog{})
	srvs, err := redisproc.StartN(5, redisproc.Options{})
	require.NoError(t, err)
	defer redisproc.StopAll(srvs)
	mo := make([]*redis.Options, 5)
	for i, s := range srvs {
		mo[i] = &redis.Options{Addr: s.Addr()}
	}
	c, err := New(mo)
	require.NoError(t, err)
	defer c.Close()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, srvs[0].Kill())
	time.Sleep(300 * time.Millisecond)
	for _, d := range []time.Duration{time.Second, 4 * time.Second} {
		var n atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for w := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				for i := 0; time.Now().Before(stop); i++ {
					l, err := c.Acquire(ctx, fmt.Sprintf("k:%d:%d", w, i), 5*time.Second, WithRetry(NoRetry()))
					if err == nil {
						_ = l.Release(ctx)
						n.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("%v: %.0f cycles/s", d, float64(n.Load())/d.Seconds())
	}
}

type nopLog struct{}

func (nopLog) Printf(context.Context, string, ...any) {}

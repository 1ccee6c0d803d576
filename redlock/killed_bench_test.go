package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// BenchmarkOneMasterKilled: acquire+release cycles at c=64 with master 0's
// process killed (its port refuses connections), on five masters of its
// own. The acquire votes still go to a master marked down, dialled again
// at most once per refusedRedial (granted.go, "Masters marked down"); this
// measures what that costs against a build that does not ask it:
//
//	go test -run '^$' -bench OneMasterKilled -benchtime 40000x ./redlock
func BenchmarkOneMasterKilled(b *testing.B) {
	srvs, err := redisproc.StartN(5, redisproc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = redisproc.StopAll(srvs) }()
	mo := make([]*redis.Options, len(srvs))
	for i, s := range srvs {
		mo[i] = &redis.Options{Addr: s.Addr()}
	}
	c, err := New(mo)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := srvs[0].Kill(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); !c.QuorumAvailable() || c.Masters()[0].Up; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("master 0 not marked down, or no quorum, 10s after the kill: %+v", c.Masters())
		}
	}
	const conc = 64
	var seq, failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for n := seq.Add(1); n <= int64(b.N); n = seq.Add(1) {
				l, err := c.Acquire(ctx, fmt.Sprintf("killed:%d", n), 5*time.Second, WithRetry(NoRetry()))
				if err != nil {
					failed.Add(1)
					continue
				}
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d acquires failed with one master killed", n, b.N)
	}
}

package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSemaphore measures permit acquire+release cycles at concurrency
// 64 against the five test masters, with N = 4 permits:
//
//   - "shared": the 64 workers share one semaphore, each waiting for a
//     permit (WithWait), so at most 4 hold one at a time and a cycle's
//     latency includes the wait;
//
//   - "own": each worker has a semaphore of its own, so an acquire meets
//     a free slot at once: the cost of a permit next to a plain lock
//     (BenchmarkAcquireRelease).
//
//     go test -run '^$' -bench Semaphore -benchtime 3s ./redlock
//
// Targets, measured in the same run as AcquireRelease/c=64: "own" at
// least 0.8× its cycles/s (one slot attempt when a slot is free, as one
// lock); "shared" no failed cycle and at least 0.3× the cycles/s of "own"
// (64 workers queue for 4 permits; each hand-off is a release
// notification and a new attempt over the slots).
func BenchmarkSemaphore(b *testing.B) {
	for _, shared := range []bool{true, false} {
		name := "own"
		if shared {
			name = "shared"
		}
		b.Run(fmt.Sprintf("N=4/%s/c=64", name), func(b *testing.B) { benchPermits(b, 64, 4, shared) })
	}
}

func benchPermits(b *testing.B, conc, permits int, shared bool) {
	c, err := New(masterOptions(), benchOpts...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	run := time.Now().UnixNano()
	var seq atomic.Int64
	lat := make([][]time.Duration, conc)
	var failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			name := fmt.Sprintf("bench:sem:%d", run)
			if !shared {
				name = fmt.Sprintf("bench:sem:%d:%d", run, w)
			}
			for seq.Add(1) <= int64(b.N) {
				t0 := time.Now()
				p, err := c.AcquirePermit(ctx, name, permits, 10*time.Second, WithWait(10*time.Second))
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil {
					failed.Add(1)
					continue
				}
				_ = p.Release(ctx)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-acquire-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-acquire-µs")
		b.ReportMetric(float64(failed.Load()), "failed")
		b.ReportMetric(float64(c.attempts.Load())/float64(b.N), "slot-attempts/cycle")
	}
}

// BenchmarkFullSemaphore measures one refused attempt at a semaphore whose
// permits are all held, at N = 4 and N = 100: an Acquire of the first
// slot tried and a read of the slots (grantedSlots), where a walk over
// every slot would cost N Acquires:
//
//	go test -run '^$' -bench FullSemaphore -benchtime 200x ./redlock
func BenchmarkFullSemaphore(b *testing.B) {
	for _, permits := range []int{4, 100} {
		b.Run(fmt.Sprintf("N=%d", permits), func(b *testing.B) {
			c, err := New(masterOptions(), benchOpts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			name := fmt.Sprintf("benchfull:%d:%d", permits, time.Now().UnixNano())
			for range permits {
				p, err := c.AcquirePermit(ctx, name, permits, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = p.Release(ctx) }()
			}
			attempts := c.attempts.Load()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.AcquirePermit(ctx, name, permits, time.Minute, WithRetry(NoRetry())); err == nil {
					b.Fatal("a permit of a full semaphore was granted")
				}
			}
			b.ReportMetric(float64(c.attempts.Load()-attempts)/float64(b.N), "acquires/attempt")
		})
	}
}

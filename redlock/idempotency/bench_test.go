package idempotency

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// benchConcurrency is the number of goroutines the benchmarks run at
// once: c=64, as the performance target states.
const benchConcurrency = 64

// parallel64 runs body on benchConcurrency goroutines (RunParallel with
// the parallelism that gives 64 on this GOMAXPROCS, rounded up).
func parallel64(b *testing.B, body func(pb *testing.PB)) {
	b.SetParallelism((benchConcurrency + 1) / 2)
	b.RunParallel(body)
}

// BenchmarkBeginComplete: one begin (read, lease acquire, IN_PROGRESS
// write) and one complete (COMPLETED write, lease release) per operation,
// each on a key of its own, at c=64 on the five real masters.
func BenchmarkBeginComplete(b *testing.B) {
	d := newDeploymentB(b)
	s := d.storeB(b)
	ctx := context.Background()
	var n atomic.Int64
	ans := &Answer{Status: 201, Body: []byte(`{"order":"o-1"}`)}
	start := time.Now()
	b.ResetTimer()
	parallel64(b, func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("%s:bc:%d", d.marker, n.Add(1))
			res, err := s.Begin(ctx, BeginRequest{Key: key, Fingerprint: fp(key), Lease: 10 * time.Second, Retention: time.Minute})
			if err != nil || res.Outcome != Started {
				b.Errorf("begin: %v %v", res.Outcome, err)
				return
			}
			if err := s.Complete(ctx, key, res.Token, ans); err != nil {
				b.Errorf("complete: %v", err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
}

// BenchmarkReplay: a begin of a completed key, answered with the stored
// answer from one quorum read, at c=64.
func BenchmarkReplay(b *testing.B) {
	d := newDeploymentB(b)
	s := d.storeB(b)
	ctx := context.Background()
	key := d.marker + ":replay"
	req := BeginRequest{Key: key, Fingerprint: fp(key), Lease: 10 * time.Second, Retention: time.Hour}
	res, err := s.Begin(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, key, res.Token, &Answer{Status: 200, Body: make([]byte, 1024)}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	b.ResetTimer()
	parallel64(b, func(pb *testing.PB) {
		for pb.Next() {
			r, err := s.Begin(ctx, req)
			if err != nil || r.Outcome != Completed {
				b.Errorf("replay: %v %v", r.Outcome, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "replays/s")
}

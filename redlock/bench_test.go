package redlock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// BenchmarkAcquireRelease measures acquire+release cycles in-process
// against the five test masters at concurrency 1, 16 and 64, on random keys,
// with the default per-master timeout. It reports cycles/s and the p50/p99
// acquire latency:
//
//	go test -run '^$' -bench AcquireRelease -benchtime 3s ./redlock
func BenchmarkAcquireRelease(b *testing.B) {
	for _, conc := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("c=%d", conc), func(b *testing.B) { benchCycles(b, conc, benchOpts...) })
	}
}

// BenchmarkSafetyModes measures what the granted-lock check (granted.go)
// and WithExtraVotes cost, in the same run, at concurrency 1 and 64:
// "quorum-only" is the check off (an acquire decides at the quorum-th
// vote), "default" the check on (it waits for every master's answer),
// "extra=1" one extra vote on top:
//
//	go test -run '^$' -bench SafetyModes -benchtime 3s -count 3 ./redlock
func BenchmarkSafetyModes(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"quorum-only", []Option{withGuardOff(guardswitch.GrantedLock)}},
		{"default", nil},
		{"extra=1", []Option{WithExtraVotes(1)}},
	} {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/c=%d", mode.name, conc), func(b *testing.B) { benchCycles(b, conc, append(slices.Clone(benchOpts), mode.opts...)...) })
		}
	}
}

// benchCycles runs b.N acquire+release cycles at concurrency conc on a
// Client with opts, and reports cycles/s and the p50/p99 acquire latency.
func benchCycles(b *testing.B, conc int, opts ...Option) {
	c, err := New(masterOptions(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var seq atomic.Int64
	lat := make([][]time.Duration, conc)
	var failed atomic.Int64
	cpu0, self0 := readMastersCPU(b), selfCPU()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			for seq.Add(1) <= int64(b.N) {
				key := fmt.Sprintf("bench:%d:%d", w, seq.Load())
				t0 := time.Now()
				lock, err := c.Acquire(ctx, key, 10*time.Second, WithRetry(NoRetry()))
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil {
					failed.Add(1)
					continue
				}
				_ = lock.Release(ctx)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu, self := readMastersCPU(b).sub(cpu0), selfCPU()-self0
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-acquire-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-acquire-µs")
		b.ReportMetric(float64(failed.Load()), "failed")
		b.ReportMetric(cpu.process.Seconds()*1e6/float64(b.N), "master-cpu-µs/cycle")
		b.ReportMetric(cpu.scripts.Seconds()*1e6/float64(b.N), "script-µs/cycle")
		b.ReportMetric(self.Seconds()*1e6/float64(b.N), "client-cpu-µs/cycle")
		// Grants that wrote their fence back twice (acquire.go writeBack):
		// one more round trip each.
		b.ReportMetric(float64(c.FenceRewrites())/float64(b.N), "fence-rewrites/cycle")
	}
}

// mastersCPU is the CPU the five test masters spent, summed: process is
// INFO cpu used_cpu_user + used_cpu_sys (the scripts, the network I/O and
// the event loop), scripts the INFO commandstats usec of EVAL and EVALSHA
// (the scripts alone).
type mastersCPU struct{ process, scripts time.Duration }

func (a mastersCPU) sub(b mastersCPU) mastersCPU {
	return mastersCPU{a.process - b.process, a.scripts - b.scripts}
}

// selfCPU is this process's CPU time (user + system): the client's share
// of a cycle, next to the masters'.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readMastersCPU reads mastersCPU from the test masters.
func readMastersCPU(b *testing.B) mastersCPU {
	var out mastersCPU
	ctx := context.Background()
	for _, s := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		out.process += readMastersCPUOf(b, rdb)
		stats, err := rdb.Info(ctx, "commandstats").Result()
		_ = rdb.Close()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(stats) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k != "cmdstat_eval" && k != "cmdstat_evalsha" {
				continue
			}
			for field := range strings.SplitSeq(v, ",") {
				if us, ok := strings.CutPrefix(field, "usec="); ok {
					n, _ := strconv.ParseInt(us, 10, 64)
					out.scripts += time.Duration(n) * time.Microsecond
				}
			}
		}
	}
	return out
}

var benchOpts []Option

// BenchmarkList measures a whole listing of 1,000 held locks in pages of
// 100 (10 SCAN steps per scanned master, one status read per page on every
// master) against the five test masters, and reports the time per page.
// Its per-master timeout is 500ms, as the tests': on a loaded machine a
// page's pipeline of 100 status scripts may not answer within 50ms.
//
//	go test -run '^$' -bench List -benchtime 20x ./redlock
func BenchmarkList(b *testing.B) {
	c, err := New(masterOptions(), append([]Option{WithPerMasterTimeout(500 * time.Millisecond)}, benchOpts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	prefix := fmt.Sprintf("benchlist:%d:", time.Now().UnixNano())
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range 1000 {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := c.Acquire(ctx, fmt.Sprintf("%s%d", prefix, i), time.Minute, WithWait(time.Second)); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	pages, listed := 0, 0
	b.ResetTimer()
	for b.Loop() {
		cursor := ""
		for {
			p, err := c.List(ctx, prefix, cursor, 100)
			if err != nil {
				b.Fatal(err)
			}
			pages++
			listed += len(p.Locks)
			if cursor = p.Cursor; cursor == "" {
				break
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(pages), "µs/page")
	b.ReportMetric(float64(pages)/float64(b.N), "pages/listing")
	if listed != 1000*b.N {
		b.Fatalf("listed %d locks in %d listings, want 1000 each", listed, b.N)
	}
}

// BenchmarkScripts measures what each script of a fenced acquire+release
// cycle costs one master: b.N calls, pipelined 16 deep on one connection
// to one test master, on keys of their own, and the master's CPU (INFO cpu
// user+sys) per call. A cycle costs every master one acquire, one fence
// write-back and one release, plus one statistics reading per pipelined
// batch of votes (batchstats.go):
//
//	go test -run '^$' -bench Scripts -benchtime 20000x ./redlock
func BenchmarkScripts(b *testing.B) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: servers[0].Addr()})
	defer rdb.Close()
	run := fmt.Sprintf("benchscripts:%d", time.Now().UnixNano())
	marker, horizon, counter := run+":marker", run+":marker:horizon", run+":marker:counter"
	if err := rdb.MSet(ctx, marker, "m", horizon, "1", counter, "5").Err(); err != nil {
		b.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	voteKeys := func(k string) []string { return []string{k, marker, horizon, counter, k + ":fence"} }
	for _, s := range []struct {
		name   string
		script *redis.Script
		keys   func(k string) []string
		args   []any
	}{
		{"acquire", productScripts.acquire, voteKeys, []any{token, "10000"}},
		{"fence", productScripts.fence, voteKeys, []any{token, "7"}},
		{"release", releaseScript, func(k string) []string { return []string{k, k + ":fence"} }, []any{token, run + ":released"}},
		{"stats-reading", statsReadScript, func(string) []string { return nil }, nil},
		// The same three steps as they were at df18b48, before the data-loss,
		// clock and granted-lock checks (testdata/df18b48): what the checks
		// cost, script by script.
		{"df18b48-acquire", df18b48Script(b, "acquire"), func(k string) []string { return []string{k, counter} }, []any{token, "10000"}},
		{"df18b48-fence", df18b48Script(b, "fence"), func(k string) []string { return []string{k, counter} }, []any{token, "7"}},
		{"df18b48-release", df18b48Script(b, "release"), func(k string) []string { return []string{k} }, []any{token}},
	} {
		b.Run(s.name, func(b *testing.B) {
			if err := s.script.Load(ctx, rdb).Err(); err != nil {
				b.Fatal(err)
			}
			if strings.HasSuffix(s.name, "fence") || strings.HasSuffix(s.name, "release") {
				// The lock each call acts on, as in a cycle.
				b.StopTimer()
				for i := 0; i < b.N; i += 256 {
					p := rdb.Pipeline()
					for j := i; j < min(i+256, b.N); j++ {
						p.Set(ctx, fmt.Sprintf("%s:%s:%d", run, s.name, j), token, time.Minute)
					}
					if _, err := p.Exec(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			cpu0 := readMastersCPUOf(b, rdb)
			for i := 0; i < b.N; i += 16 {
				p := rdb.Pipeline()
				for j := i; j < min(i+16, b.N); j++ {
					s.script.EvalSha(ctx, p, s.keys(fmt.Sprintf("%s:%s:%d", run, s.name, j)), s.args...)
				}
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((readMastersCPUOf(b, rdb)-cpu0).Seconds()*1e6/float64(b.N), "master-cpu-µs/call")
		})
	}
}

// df18b48Script is the cycle script name as it was at df18b48
// (testdata/df18b48/<name>.lua).
func df18b48Script(b *testing.B, name string) *redis.Script {
	src, err := os.ReadFile(filepath.Join("testdata", "df18b48", name+".lua"))
	if err != nil {
		b.Fatal(err)
	}
	return redis.NewScript(string(src))
}

// readMastersCPUOf reads one master's INFO cpu used_cpu_user +
// used_cpu_sys.
func readMastersCPUOf(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += time.Duration(f * float64(time.Second))
		}
	}
	return sum
}

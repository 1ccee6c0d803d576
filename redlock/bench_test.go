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
	var batches batchCounter
	c, err := New(masterOptions(), append(slices.Clone(opts), WithObserver(&batches))...)
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
	batches.pipelines.Store(0)
	batches.calls.Store(0)
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
		// Pipelines per cycle summed over the masters, and calls per
		// pipeline: how well the lanes batch (fewer, larger pipelines cost
		// the masters and this process fewer syscalls).
		if p := batches.pipelines.Load(); p > 0 {
			b.ReportMetric(float64(p)/float64(b.N), "pipelines/cycle")
			b.ReportMetric(float64(batches.calls.Load())/float64(p), "calls/pipeline")
		}
	}
}

// batchCounter is an Observer that counts pipelined round trips and the
// commands they carried.
type batchCounter struct{ pipelines, calls atomic.Int64 }

func (o *batchCounter) ObserveBatch(_ int, size int, _ time.Duration, _ error) {
	o.pipelines.Add(1)
	o.calls.Add(int64(size))
}

func (o *batchCounter) ObserveProbe(int, bool, time.Duration) {}

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
		{"release", releaseScript, func(k string) []string { return []string{k, k + ":fence"} }, []any{token, run + ":released", releaseID(token)}},
		{"stats-reading", statsReadScript, func(string) []string { return nil }, nil},
		// The same three steps as they were at df18b48, before the data-loss,
		// clock and granted-lock checks (testdata/df18b48): what the checks
		// cost, script by script.
		{"df18b48-acquire", df18b48Script(b, "acquire"), func(k string) []string { return []string{k, counter} }, []any{token, "10000"}},
		{"df18b48-fence", df18b48Script(b, "fence"), func(k string) []string { return []string{k, counter} }, []any{token, "7"}},
		{"df18b48-release", df18b48Script(b, "release"), func(k string) []string { return []string{k} }, []any{token}},
	} {
		b.Run(s.name, func(b *testing.B) {
			locked := strings.HasSuffix(s.name, "fence") || strings.HasSuffix(s.name, "release")
			benchScriptCalls(b, rdb, run+":"+s.name, s.script, s.keys, s.args, locked)
		})
	}
}

// benchScriptCalls calls script b.N times on rdb's master, pipelined 16
// deep, each on a key of its own (prefix:<i>, given to keys), and reports
// the master's CPU (INFO cpu user+sys) per call (scriptCallsCPU).
func benchScriptCalls(b *testing.B, rdb *redis.Client, prefix string, script *redis.Script, keys func(string) []string, args []any, locked bool) {
	b.ReportMetric(scriptCallsCPU(b, rdb, prefix, script, keys, args, locked, b.N).Seconds()*1e6/float64(b.N), "master-cpu-µs/call")
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

// BenchmarkCheckCosts measures what each safety check of a fenced
// acquire+release cycle costs one master, by taking the check's Redis calls
// out of the product script (a variant per check, never sent by a Client)
// and comparing the master's CPU per call: every variant runs b.N calls on
// one test master, pipelined 16 deep, interleaved with the others in
// chunks of 512 so that the machine's load drifts over all of them alike.
// It reports µs of master CPU per call for each variant; what a check
// costs is the product's figure minus its variant's, and a cycle makes 5
// votes, 3 write-backs and 5 releases (docs/performance.md turns them into
// µs per cycle):
//
//	go test -run '^$' -bench CheckCosts -benchtime 40000x ./redlock
func BenchmarkCheckCosts(b *testing.B) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: servers[0].Addr()})
	defer rdb.Close()
	run := fmt.Sprintf("checkcosts:%d", time.Now().UnixNano())
	marker, horizon, counter := run+":marker", run+":marker:horizon", run+":marker:counter"
	if err := rdb.MSet(ctx, marker, "m", horizon, "1", counter, "5").Err(); err != nil {
		b.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	voteKeys := func(k string) []string { return []string{k, marker, horizon, counter, k + ":fence"} }
	vote := func(prelude, acquire string) *redis.Script { return redis.NewScript(prelude + acquire) }
	// without takes line out of src, and fails unless it is there exactly
	// once: a variant must not measure a script the product no longer has.
	without := func(src, line, by string) string {
		if strings.Count(src, line) != 1 {
			b.Fatalf("%q is not in the script exactly once", line)
		}
		return strings.Replace(src, line, by, 1)
	}
	const (
		timeLine   = "local now = redis.call('TIME')"
		stateLine  = "  state = redis.call('MGET', KEYS[2], KEYS[3], KEYS[4])"
		raiseLine  = "    redis.call('SET', KEYS[3], string.format('%d', h))"
		replyLine  = "  return string.format('%d %d %s %s %d %d %d %d ', code, value, now[1], now[2], horizonBefore, horizon, counter, #mk) .. mk .. (extra or '')"
		fTimeLine  = timeLine
		fStateLine = "local s = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3], KEYS[4])"
		fRecLine   = "if KEYS[5] then"
	)
	// A TIME reading fixed an hour ahead: the scripts set expiries from it
	// (expiry.lua), so a reading in the past would set keys already expired.
	fixedTime := fmt.Sprintf("{'%d', '0'}", time.Now().Add(time.Hour).Unix())
	pre := votePreludeLua
	type variant struct {
		name   string
		script *redis.Script
		keys   func(string) []string
		args   []any
		locked bool
	}
	vs := []variant{
		{"vote", productScripts.acquire, voteKeys, []any{token, "10000"}, false},
		{"vote-without-TIME", vote(without(pre, timeLine, "local now = "+fixedTime), acquireLua), voteKeys, []any{token, "10000"}, false},
		{"vote-without-state-read", vote(without(pre, stateLine, "  state = {'m', '1', '5'}"), acquireLua), voteKeys, []any{token, "10000"}, false},
		{"vote-without-horizon-raise", vote(without(pre, raiseLine, ""), acquireLua), voteKeys, []any{token, "10000"}, false},
		{"vote-with-a-2-field-reply", vote(without(pre, replyLine, "  return string.format('%d %d', code, value)"), acquireLua), voteKeys, []any{token, "10000"}, false},
		{"vote-without-all-four", vote(without(without(without(without(pre, timeLine, "local now = "+fixedTime), stateLine, "  state = {'m', '1', '5'}"), raiseLine, ""), replyLine, "  return string.format('%d %d', code, value)"), acquireLua), voteKeys, []any{token, "10000"}, false},
		{"df18b48-vote", df18b48Script(b, "acquire"), func(k string) []string { return []string{k, counter} }, []any{token, "10000"}, false},
		{"fence", productScripts.fence, voteKeys, []any{token, "7"}, true},
		{"fence-without-TIME", redis.NewScript(without(fenceLua, fTimeLine, "local now = "+fixedTime)), voteKeys, []any{token, "7"}, true},
		{"fence-without-state-read", redis.NewScript(without(fenceLua, fStateLine, "local s = redis.call('MGET', KEYS[1], KEYS[4]); s = {s[1], 'm', '1', s[2]}")), voteKeys, []any{token, "7"}, true},
		{"fence-without-record", redis.NewScript(without(fenceLua, fRecLine, "if false then")), voteKeys, []any{token, "7"}, true},
		{"fence-without-all-three", redis.NewScript(without(without(without(fenceLua, fTimeLine, "local now = "+fixedTime), fStateLine, "local s = redis.call('MGET', KEYS[1], KEYS[4]); s = {s[1], 'm', '1', s[2]}"), fRecLine, "if false then")), voteKeys, []any{token, "7"}, true},
		{"df18b48-fence", df18b48Script(b, "fence"), func(k string) []string { return []string{k, counter} }, []any{token, "7"}, true},
		{"release", releaseScript, func(k string) []string { return []string{k, k + ":fence"} }, []any{token, run + ":released", releaseID(token)}, true},
		{"release-without-record", releaseScript, func(k string) []string { return []string{k} }, []any{token, run + ":released", releaseID(token)}, true},
		{"release-without-publish", releaseScript, func(k string) []string { return []string{k, k + ":fence"} }, []any{token}, true},
		{"release-without-both", releaseScript, func(k string) []string { return []string{k} }, []any{token}, true},
		{"df18b48-release", df18b48Script(b, "release"), func(k string) []string { return []string{k} }, []any{token}, true},
	}
	cpu := make([]time.Duration, len(vs))
	const chunk = 512
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		for i, v := range vs {
			cpu[i] += scriptCallsCPU(b, rdb, fmt.Sprintf("%s:%s:%d", run, v.name, done), v.script, v.keys, v.args, v.locked, n)
		}
	}
	for i, v := range vs {
		b.ReportMetric(cpu[i].Seconds()*1e6/float64(b.N), v.name+"-µs/call")
	}
}

// scriptCallsCPU calls script n times on rdb's master, pipelined 16 deep,
// each on a key of its own (prefix:<i>, given to keys), and returns the
// master's CPU (INFO cpu user+sys) the calls cost. locked: each key first
// holds the token (ARGV[1]) for a minute, as for a fence write-back or a
// release in a cycle; those SETs are not counted. The keys (and their
// fence records) are deleted afterwards, not counted either.
func scriptCallsCPU(b *testing.B, rdb *redis.Client, prefix string, script *redis.Script, keys func(string) []string, args []any, locked bool, n int) time.Duration {
	ctx := context.Background()
	if err := script.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	if locked {
		p := rdb.Pipeline()
		for j := range n {
			p.Set(ctx, fmt.Sprintf("%s:%d", prefix, j), args[0], time.Minute)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := readMastersCPUOf(b, rdb)
	for i := 0; i < n; i += 16 {
		p := rdb.Pipeline()
		for j := i; j < min(i+16, n); j++ {
			script.EvalSha(ctx, p, keys(fmt.Sprintf("%s:%d", prefix, j)), args...)
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	used := readMastersCPUOf(b, rdb) - cpu0
	// The keyspace stays small, the same for every chunk: its growth (and
	// rehashing) would be charged to whichever variant runs at the time.
	p := rdb.Pipeline()
	for j := range n {
		// A script with no key (the statistics reading) deletes only the
		// fence records' names, which it never wrote.
		del := []string{fmt.Sprintf("%s:%d:fence", prefix, j)}
		if ks := keys(fmt.Sprintf("%s:%d", prefix, j)); len(ks) > 0 {
			del = append(del, ks[0])
		}
		p.Del(ctx, del...)
	}
	if _, err := p.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	return used
}

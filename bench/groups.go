package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

// The master-groups scale cell (-groups 1,2,3): for each number of groups
// g, 5g fresh masters on loopback, one redlock.Client per group (default
// options but a 500ms per-master timeout) behind redlock.Groups, and conc workers looping acquire+release
// on random keys for the cell's duration. It reports the library's ops/s
// (completed cycles) and the masters' CPU: the sum of their user+system
// time (/proc/<pid>/stat) over the cell, per cycle and per master of the
// cycle's group (a cycle runs on the five masters of one group), and the
// bench process's own CPU per cycle. On a shared 2-core machine the
// masters and the bench share the cores, so ops/s here is what 2 cores
// give; the CPU per cycle is what carries over to dedicated cores
// (docs/performance.md, "Master groups: capacity").

// groupsResult is one cell of the scale table.
type groupsResult struct {
	Groups            int     `json:"groups"`
	Masters           int     `json:"masters"`
	Conc              int     `json:"conc"`
	OpsPerSec         float64 `json:"ops_per_s"`
	Errors            int64   `json:"errors"`
	LastError         string  `json:"last_error,omitempty"`
	MasterCPUPerCycle float64 `json:"master_cpu_us_per_cycle_per_master"`
	BenchCPUPerCycle  float64 `json:"bench_cpu_us_per_cycle"`
	MasterCPUShare    float64 `json:"master_cpu_cores"`
	BenchCPUShare     float64 `json:"bench_cpu_cores"`
}

func runGroupsCells(ctx context.Context, counts []int, conc int, dur time.Duration) ([]groupsResult, error) {
	var out []groupsResult
	for _, g := range counts {
		r, err := groupsCell(ctx, g, conc, dur)
		if err != nil {
			return out, err
		}
		progress("groups=%d: %.0f ops/s, %d errors (last: %s), %.1f µs master CPU per cycle per master", g, r.OpsPerSec, r.Errors, r.LastError, r.MasterCPUPerCycle)
		out = append(out, r)
	}
	return out, nil
}

func groupsCell(ctx context.Context, n, conc int, dur time.Duration) (groupsResult, error) {
	const perGroup = 5
	tmp, err := os.MkdirTemp("", "redlockd-bench-groups")
	if err != nil {
		return groupsResult{}, err
	}
	defer os.RemoveAll(tmp)
	masters, err := redisproc.StartN(n*perGroup, redisproc.Options{Dir: tmp})
	if err != nil {
		return groupsResult{}, err
	}
	defer redisproc.StopAll(masters) //nolint:errcheck // the masters' exit status says nothing about the results
	var groups []redlock.Group
	for gi := range n {
		var opts []*redis.Options
		for _, m := range masters[gi*perGroup : (gi+1)*perGroup] {
			opts = append(opts, &redis.Options{Addr: m.Addr()})
		}
		// 500ms per master, not the default 50ms: on a shared 2-core
		// machine a healthy master is often not scheduled within 50ms at
		// c=256, and the cell would measure timeouts, not capacity.
		c, err := redlock.New(opts, redlock.WithPerMasterTimeout(500*time.Millisecond))
		if err != nil {
			return groupsResult{}, err
		}
		groups = append(groups, redlock.Group{Name: "g" + strconv.Itoa(gi), Client: c})
	}
	gs, err := redlock.NewGroups(groups...)
	if err != nil {
		return groupsResult{}, err
	}
	defer gs.Close()

	cycle := func(ctx context.Context, i int) error {
		lk, err := gs.Acquire(ctx, "bench:groups:"+strconv.Itoa(i), 10*time.Second)
		if err != nil {
			return err
		}
		return lk.Release(ctx)
	}
	var lastErr atomic.Value
	loop := func(d time.Duration) (cycles, errs int64) {
		var c, e atomic.Int64
		stop := time.Now().Add(d)
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for time.Now().Before(stop) && ctx.Err() == nil {
					if err := cycle(ctx, rand.IntN(1<<20)); err != nil && !errors.Is(err, redlock.ErrLockHeld) {
						e.Add(1)
						lastErr.Store(err.Error())
					} else if err == nil {
						c.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return c.Load(), e.Load()
	}
	loop(500 * time.Millisecond) // warm-up: connections, scripts loaded
	before, err := mastersCPU(masters)
	if err != nil {
		return groupsResult{}, err
	}
	selfBefore, err := procCPU("self")
	if err != nil {
		return groupsResult{}, err
	}
	start := time.Now()
	cycles, errs := loop(dur)
	elapsed := time.Since(start)
	after, err := mastersCPU(masters)
	if err != nil {
		return groupsResult{}, err
	}
	selfAfter, err := procCPU("self")
	if err != nil {
		return groupsResult{}, err
	}
	r := groupsResult{Groups: n, Masters: len(masters), Conc: conc, Errors: errs,
		OpsPerSec:      float64(cycles) / elapsed.Seconds(),
		MasterCPUShare: (after - before).Seconds() / elapsed.Seconds(),
		BenchCPUShare:  (selfAfter - selfBefore).Seconds() / elapsed.Seconds(),
	}
	if e, ok := lastErr.Load().(string); ok {
		r.LastError = e
	}
	if cycles > 0 {
		r.MasterCPUPerCycle = float64((after - before).Microseconds()) / float64(cycles) / perGroup
		r.BenchCPUPerCycle = float64((selfAfter - selfBefore).Microseconds()) / float64(cycles)
	}
	return r, nil
}

// mastersCPU is the masters' user+system CPU time so far, summed.
func mastersCPU(masters []*redisproc.Server) (time.Duration, error) {
	var sum time.Duration
	for _, m := range masters {
		d, err := procCPU(strconv.Itoa(m.PID()))
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// procCPU reads utime+stime of /proc/<pid>/stat (clock ticks of 10 ms:
// USER_HZ is 100 on Linux).
func procCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %s: %w", pid, err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// printGroups writes the scale table as markdown.
func printGroups(rs []groupsResult) {
	fmt.Println("| groups | masters | c | lib ops/s | errors | master CPU per cycle per master (µs) | bench CPU per cycle (µs) | masters' CPU (cores) | bench CPU (cores) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		fmt.Printf("| %d | %d | %d | %.0f | %d | %.1f | %.1f | %.2f | %.2f |\n", r.Groups, r.Masters, r.Conc, r.OpsPerSec, r.Errors, r.MasterCPUPerCycle, r.BenchCPUPerCycle, r.MasterCPUShare, r.BenchCPUShare)
	}
}

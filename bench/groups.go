package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
// g, 5g fresh masters on loopback, measured twice for the cell's duration
// each, with conc workers looping acquire+release on random keys:
//
//   - lib: one redlock.Client per group (default options but a 500ms
//     per-master timeout) behind redlock.Groups, in this process;
//   - http: `redlockd serve` built from -root, with master_groups g0…
//     over the same masters (per_master_timeout 500ms, no account limits),
//     through POST /v1/lock over keep-alive HTTP.
//
// Each reports ops/s (completed cycles) and CPU time read from
// /proc/<pid>/stat over the run: the masters' summed, per cycle and per
// master of the cycle's group (a cycle runs on the five masters of one
// group), this process's per cycle (the library, or the HTTP client), and
// for http the daemon's per cycle. On a shared 2-core machine the masters,
// the daemon and the bench share the cores, so ops/s here is what 2 cores
// give; the CPU per cycle is what carries over to dedicated cores
// (docs/performance.md, "Master groups: capacity").

// groupsResult is one cell of the scale table.
type groupsResult struct {
	Groups  int        `json:"groups"`
	Masters int        `json:"masters"`
	Conc    int        `json:"conc"`
	Lib     groupsRun  `json:"lib"`
	HTTP    groupsRun  `json:"http"`
	Load    [3]float64 `json:"load_average"` // at the cell's start: 1, 5, 15 minutes
}

// groupsRun is one transport's run in a cell.
type groupsRun struct {
	OpsPerSec         float64 `json:"ops_per_s"`
	Errors            int64   `json:"errors"`
	LastError         string  `json:"last_error,omitempty"`
	MasterCPUPerCycle float64 `json:"master_cpu_us_per_cycle_per_master"`
	BenchCPUPerCycle  float64 `json:"bench_cpu_us_per_cycle"`
	DaemonCPUPerCycle float64 `json:"daemon_cpu_us_per_cycle,omitempty"`
	MasterCPUShare    float64 `json:"master_cpu_cores"`
	BenchCPUShare     float64 `json:"bench_cpu_cores"`
	DaemonCPUShare    float64 `json:"daemon_cpu_cores,omitempty"`
}

func runGroupsCells(ctx context.Context, counts []int, conc int, dur time.Duration, root string) ([]groupsResult, error) {
	dir, err := os.MkdirTemp("", "redlockd-bench-groups-bin")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	progress("building the daemon from %s", root)
	bin, err := buildDaemon(root, dir)
	if err != nil {
		return nil, err
	}
	var out []groupsResult
	for _, g := range counts {
		r, err := groupsCell(ctx, g, conc, dur, bin)
		if err != nil {
			return out, err
		}
		progress("groups=%d: lib %.0f ops/s, %d errors (last: %s), %.1f µs master CPU per cycle per master; http %.0f ops/s, %d errors (last: %s), %.1f µs daemon CPU per cycle",
			g, r.Lib.OpsPerSec, r.Lib.Errors, r.Lib.LastError, r.Lib.MasterCPUPerCycle, r.HTTP.OpsPerSec, r.HTTP.Errors, r.HTTP.LastError, r.HTTP.DaemonCPUPerCycle)
		out = append(out, r)
	}
	return out, nil
}

// groupCycle is one acquire+release of key i; a key found held is neither
// a cycle nor an error (errHeld).
type groupCycle func(ctx context.Context, i int) error

var errHeld = errors.New("held")

func groupsCell(ctx context.Context, n, conc int, dur time.Duration, bin string) (groupsResult, error) {
	const perGroup = 5
	r := groupsResult{Groups: n, Masters: n * perGroup, Conc: conc, Load: loadAverage()}
	tmp, err := os.MkdirTemp("", "redlockd-bench-groups")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(tmp)
	masters, err := redisproc.StartN(n*perGroup, redisproc.Options{Dir: tmp})
	if err != nil {
		return r, err
	}
	defer redisproc.StopAll(masters) //nolint:errcheck // the masters' exit status says nothing about the results
	var groups []redlock.Group
	var cfg strings.Builder
	cfg.WriteString("per_master_timeout: 500ms\nmaster_groups:\n")
	for gi := range n {
		var opts []*redis.Options
		fmt.Fprintf(&cfg, "  - name: g%d\n    masters:\n", gi)
		for _, m := range masters[gi*perGroup : (gi+1)*perGroup] {
			opts = append(opts, &redis.Options{Addr: m.Addr()})
			fmt.Fprintf(&cfg, "      - %q\n", m.Addr())
		}
		// 500ms per master, not the default 50ms: on a shared 2-core
		// machine a healthy master is often not scheduled within 50ms at
		// c=256, and the cell would measure timeouts, not capacity.
		c, err := redlock.New(opts, redlock.WithPerMasterTimeout(500*time.Millisecond))
		if err != nil {
			return r, err
		}
		groups = append(groups, redlock.Group{Name: "g" + strconv.Itoa(gi), Client: c})
	}
	gs, err := redlock.NewGroups(groups...)
	if err != nil {
		return r, err
	}
	defer gs.Close()
	lib := func(ctx context.Context, i int) error {
		lk, err := gs.Acquire(ctx, "bench:groups:"+strconv.Itoa(i), 10*time.Second)
		if errors.Is(err, redlock.ErrLockHeld) {
			return errHeld
		}
		if err != nil {
			return err
		}
		return lk.Release(ctx)
	}
	if r.Lib, err = measureGroups(ctx, masters, nil, conc, dur, lib); err != nil {
		return r, err
	}

	cfgPath := filepath.Join(tmp, "redlockd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		return r, err
	}
	d, err := startDaemonArgs(bin, tmp, "redlockd", "", nil, []string{"--config", cfgPath}, noLimits...)
	if err != nil {
		return r, err
	}
	defer d.stop()
	if !d.waitAllUp(ctx, n*perGroup) {
		return r, fmt.Errorf("groups=%d: the daemon did not see every master up", n)
	}
	hc, err := newLockPoster(d, conc)
	if err != nil {
		return r, err
	}
	defer hc.close()
	tg := httpTarget("http", hc, 10*time.Second)
	viaHTTP := func(ctx context.Context, i int) error {
		release, err := tg.acquire(ctx, "bench:groups:"+strconv.Itoa(i))
		if errors.Is(err, errNotAcquired) {
			return errHeld
		}
		if err != nil {
			return err
		}
		return release(ctx)
	}
	r.HTTP, err = measureGroups(ctx, masters, d, conc, dur, viaHTTP)
	return r, err
}

// measureGroups runs cycle with conc workers: a 500ms warm-up
// (connections, scripts loaded), then dur measured.
func measureGroups(ctx context.Context, masters []*redisproc.Server, d *daemonProc, conc int, dur time.Duration, cycle groupCycle) (groupsRun, error) {
	var lastErr atomic.Value
	loop := func(d time.Duration) (cycles, errs int64) {
		var c, e atomic.Int64
		stop := time.Now().Add(d)
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for time.Now().Before(stop) && ctx.Err() == nil {
					switch err := cycle(ctx, rand.IntN(1<<20)); {
					case err == nil:
						c.Add(1)
					case !errors.Is(err, errHeld):
						e.Add(1)
						lastErr.Store(err.Error())
					}
				}
			})
		}
		wg.Wait()
		return c.Load(), e.Load()
	}
	loop(500 * time.Millisecond)
	lastErr = atomic.Value{}
	cpu := func() (ms, self, daemon time.Duration, err error) {
		if ms, err = mastersCPU(masters); err != nil {
			return
		}
		if self, err = procCPU("self"); err != nil {
			return
		}
		if d != nil {
			daemon, err = procCPU(strconv.Itoa(d.cmd.Process.Pid))
		}
		return
	}
	m0, s0, d0, err := cpu()
	if err != nil {
		return groupsRun{}, err
	}
	start := time.Now()
	cycles, errs := loop(dur)
	elapsed := time.Since(start)
	m1, s1, d1, err := cpu()
	if err != nil {
		return groupsRun{}, err
	}
	r := groupsRun{Errors: errs,
		OpsPerSec:      float64(cycles) / elapsed.Seconds(),
		MasterCPUShare: (m1 - m0).Seconds() / elapsed.Seconds(),
		BenchCPUShare:  (s1 - s0).Seconds() / elapsed.Seconds(),
		DaemonCPUShare: (d1 - d0).Seconds() / elapsed.Seconds(),
	}
	if e, ok := lastErr.Load().(string); ok {
		r.LastError = e
	}
	if cycles > 0 {
		const perGroup = 5
		r.MasterCPUPerCycle = float64((m1 - m0).Microseconds()) / float64(cycles) / perGroup
		r.BenchCPUPerCycle = float64((s1 - s0).Microseconds()) / float64(cycles)
		r.DaemonCPUPerCycle = float64((d1 - d0).Microseconds()) / float64(cycles)
	}
	return r, nil
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute figures (zeros when
// unreadable).
func loadAverage() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := range min(3, len(f)) {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
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
	fmt.Println("| groups | masters | c | via | ops/s | errors | master CPU per cycle per master (µs) | bench CPU per cycle (µs) | daemon CPU per cycle (µs) | masters' CPU (cores) | bench CPU (cores) | daemon CPU (cores) | load average at start |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		for _, v := range []struct {
			via string
			run groupsRun
		}{{"lib", r.Lib}, {"http", r.HTTP}} {
			fmt.Printf("| %d | %d | %d | %s | %.0f | %d | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.1f %.1f %.1f |\n", r.Groups, r.Masters, r.Conc, v.via, v.run.OpsPerSec, v.run.Errors,
				v.run.MasterCPUPerCycle, v.run.BenchCPUPerCycle, v.run.DaemonCPUPerCycle, v.run.MasterCPUShare, v.run.BenchCPUShare, v.run.DaemonCPUShare, r.Load[0], r.Load[1], r.Load[2])
		}
	}
}

// Command bench runs redlockd side by side with go-redsync on five local
// redis-server masters: redlockd's library
// in-process, the daemon over keep-alive HTTP, go-redsync v4, and the
// one-master SET NX floor, for several concurrencies, with zero, one and two
// masters paused (SIGSTOP). It prints a markdown table and writes JSON.
//
//	cd bench && go run . [-quick] [-duration 3s] [-conc 1,16,64,256]
//	    [-scenarios healthy,pause1,pause2] [-targets lib,http,redsync,floor]
//	    [-down3 pause,kill] [-idempotency=false] [-multikey=false] [-semaphore=false] [-json results/latest.json]
//	    [-cpuprofile FILE]
//
// It is a separate module so that go-redsync never enters the product's
// go.mod; the replace directive builds redlockd from the working tree, and
// the masters come from internal/redisproc, as in the product's tests (Go's
// internal rule follows the import path, not the module).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

const numMasters = 5

// lockTTL is the TTL of every lock taken (redsync: its expiry).
const lockTTL = 10 * time.Second

type config struct {
	dur        time.Duration
	conc       []int
	scenarios  []string
	targets    []string
	down3      []string
	jsonPath   string
	cpuProfile string
	root       string
	// The hand-off cell: waiter counts (none: skipped), rounds per count,
	// the time limit of one target at one count, the load window.
	handoff       []int
	handoffRounds int
	handoffLimit  time.Duration
	loadWindow    time.Duration
	// idem runs the idempotency cell (idempotency.go).
	idem bool
	// multiKey runs the multi-key cell (multikey.go).
	multiKey bool
	// sem runs the semaphore cell (semaphore.go).
	sem bool
}

var scenarioPaused = map[string][]int{ // master indexes paused in each scenario
	"healthy": nil,
	"pause1":  {0},
	"pause2":  {0, 1},
}

func main() {
	var cfg config
	var conc, scen, targets, down3, handoff string
	quick := flag.Bool("quick", false, "1s cells (same as -duration 1s); hand-off: 50 rounds, 3s limit, 3s load window")
	flag.DurationVar(&cfg.dur, "duration", 3*time.Second, "how long each cell runs")
	flag.StringVar(&conc, "conc", "1,16,64,256", "comma-separated concurrencies (workers per cell)")
	flag.StringVar(&scen, "scenarios", "healthy,pause1,pause2", "comma-separated scenarios: healthy, pause1 (master 0 paused), pause2 (masters 0 and 1 paused)")
	flag.StringVar(&targets, "targets", "lib,http,httpq,redsync,floor", "comma-separated targets: lib, http (the daemon without account limits), httpq (with a quota, a rate limit and max_locks, never reached), redsync, floor")
	flag.StringVar(&down3, "down3", "pause,kill", `three-masters-down drill: "pause" (SIGSTOP 0,1,2), "kill" (SIGKILL, run last), both, or "" to skip`)
	flag.StringVar(&cfg.jsonPath, "json", filepath.Join("results", "latest.json"), "where to write the JSON results")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of this process; samples carry the label target=lib|http|redsync|floor (go tool pprof -tagfocus=target=lib -top FILE); worker goroutines also carry cell=<scenario>/c<N> (the library's own lanes carry target=lib only)")
	flag.StringVar(&cfg.root, "root", "..", "the redlockd repository whose ./cmd/redlockd is built for the http target")
	flag.StringVar(&handoff, "handoff", "1,8,64", `hand-off cell: comma-separated numbers of waiters on the key ("" to skip)`)
	flag.IntVar(&cfg.handoffRounds, "handoff-rounds", 200, "hand-offs measured per target and number of waiters")
	flag.DurationVar(&cfg.handoffLimit, "handoff-limit", 8*time.Second, "time limit of one target at one number of waiters (fewer rounds if reached)")
	flag.DurationVar(&cfg.loadWindow, "load-window", 5*time.Second, "how long the masters' commands are counted with 64 waiters on a held key")
	flag.BoolVar(&cfg.multiKey, "multikey", true, "multi-key cell: the library's AcquireMulti + Release of 1, 2 and 8 keys at c=64 on the same masters, cycles/s as ratios to one key (-multikey=false to skip)")
	flag.BoolVar(&cfg.idem, "idempotency", true, "idempotency cell: the library's idempotency store at c=64 on the same masters, begin + complete cycles/s and replays/s, as ratios to the healthy c=64 lib cell (-idempotency=false to skip)")
	flag.BoolVar(&cfg.sem, "semaphore", true, "semaphore cell: a plain lock per worker (the baseline), then permits of a semaphore of 4 at c=64 on the same masters, one shared by every worker and one per worker, cycles/s as ratios to the plain phase (and to the healthy c=64 lib cell) (-semaphore=false to skip)")
	groupsFlag := flag.String("groups", "", `master-groups scale cell alone: comma-separated numbers of groups of five masters (e.g. "1,2,3"), run at the largest -conc through the library; the other cells are skipped`)
	flag.Parse()
	if *quick {
		cfg.dur = time.Second
		cfg.handoffRounds = min(cfg.handoffRounds, 50)
		cfg.handoffLimit = min(cfg.handoffLimit, 3*time.Second)
		cfg.loadWindow = min(cfg.loadWindow, 3*time.Second)
	}
	var err error
	if cfg.conc, err = parseInts(conc); err == nil {
		cfg.scenarios, err = parseList(scen, "healthy", "pause1", "pause2")
	}
	if err == nil {
		cfg.targets, err = parseList(targets, "lib", "http", "httpq", "redsync", "floor")
	}
	if err == nil {
		cfg.down3, err = parseList(down3, "pause", "kill")
	}
	if err == nil && strings.TrimSpace(handoff) != "" {
		cfg.handoff, err = parseInts(handoff)
	}
	if err == nil && (cfg.handoffRounds < 1 || cfg.handoffLimit <= 0 || cfg.loadWindow <= 0) {
		err = errors.New("-handoff-rounds must be ≥ 1, -handoff-limit and -load-window > 0")
	}
	if err == nil && cfg.dur <= 0 {
		err = errors.New("-duration must be > 0")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if strings.TrimSpace(*groupsFlag) != "" {
		counts, err := parseInts(*groupsFlag)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -groups:", err)
			os.Exit(2)
		}
		rs, err := runGroupsCells(ctx, counts, slices.Max(cfg.conc), cfg.dur, cfg.root)
		printGroups(rs)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run starts the masters and the targets, runs every cell, then the
// three-masters-down drill, and prints and writes the report.
func run(ctx context.Context, cfg config) error {
	tmp, err := os.MkdirTemp("", "redlockd-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	stopProfile, err := startCPUProfile(cfg.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()

	// go-redis logs every failed dial to stderr; the cells count errors.
	redis.SetLogger(quietLogger{})
	progress("starting %d redis-server masters", numMasters)
	masters, err := redisproc.StartN(numMasters, redisproc.Options{Dir: tmp})
	if err != nil {
		return err
	}
	defer redisproc.StopAll(masters) //nolint:errcheck // the masters' exit status says nothing about the results
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}

	env := &env{cfg: cfg, masters: masters}
	defer env.close()
	tgs, err := env.startTargets(ctx, addrs, tmp)
	if err != nil {
		return err
	}
	rep := newReport(cfg, addrs)
	warmUp(ctx, cfg, tgs)
	if err := env.runCells(ctx, tgs, rep); err != nil {
		return err
	}
	// httpq has no cell after these: its daemon goes, so that its
	// account's held-lock sync (limits.DefaultSyncInterval, about 130
	// commands/s per master counting the script's own calls) is not
	// counted in the load windows as the waiters' cost.
	env.stopQuotaDaemon()
	if err := env.runIdem(ctx, addrs, rep); err != nil {
		return err
	}
	if err := env.runMultiKey(ctx, addrs, rep); err != nil {
		return err
	}
	if err := env.runSemaphore(ctx, addrs, rep); err != nil {
		return err
	}
	if err := env.runHandoff(ctx, addrs, rep); err != nil {
		return err
	}
	if err := env.runDown3(ctx, tgs, rep); err != nil {
		return err
	}
	if env.daemon != nil {
		rep.DaemonVmHWMKiB, _ = env.daemon.memory()
	}
	return writeReport(cfg, rep)
}

// startCPUProfile starts profiling this process into path ("" : no
// profile) and returns the function that stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// startTargets creates every target of cfg.targets on the masters at
// addrs: the library client, the daemon (built into dir), go-redsync's
// clients and the floor's one client.
func (e *env) startTargets(ctx context.Context, addrs []string, dir string) (map[string]target, error) {
	tgs := map[string]target{}
	for _, name := range e.cfg.targets {
		switch name {
		case "lib":
			opts := make([]*redis.Options, len(addrs))
			for i, a := range addrs {
				opts[i] = &redis.Options{Addr: a}
			}
			var err error
			// Created under the label so its lanes and health loop carry it.
			pprof.Do(ctx, pprof.Labels("target", "lib"), func(context.Context) {
				e.lib, err = redlock.New(opts)
			})
			if err != nil {
				return nil, err
			}
			tgs[name] = libTarget(e.lib, lockTTL)
		case "http":
			progress("building and starting the daemon from %s", e.cfg.root)
			bin, err := buildDaemon(e.cfg.root, dir)
			if err != nil {
				return nil, err
			}
			e.daemonBin, e.dir = bin, dir
			if e.daemon, err = startDaemon(bin, dir, "redlockd", "", addrs, noLimits...); err != nil {
				return nil, err
			}
			if e.httpc, err = newLockPoster(e.daemon, slices.Max(e.cfg.conc)); err != nil {
				return nil, err
			}
			tgs[name] = httpTarget(name, e.httpc, lockTTL)
		case "httpq":
			bin := e.daemonBin
			if bin == "" {
				var err error
				if bin, err = buildDaemon(e.cfg.root, dir); err != nil {
					return nil, err
				}
			}
			progress("starting a daemon with a quota, a rate limit and max_locks")
			var err error
			if e.daemonQ, err = startDaemon(bin, dir, "redlockd-q", "", addrs, withLimits...); err != nil {
				return nil, err
			}
			if e.httpcQ, err = newLockPoster(e.daemonQ, slices.Max(e.cfg.conc)); err != nil {
				return nil, err
			}
			tgs[name] = httpTarget(name, e.httpcQ, lockTTL)
		case "redsync":
			for _, a := range addrs {
				e.rdbs = append(e.rdbs, redis.NewClient(&redis.Options{Addr: a}))
			}
			tgs[name] = redsyncTarget(e.rdbs, lockTTL)
		case "floor":
			e.floor = redis.NewClient(&redis.Options{Addr: addrs[numMasters-1]})
			tgs[name] = floorTarget(e.floor, lockTTL)
		}
	}
	return tgs, nil
}

// newReport is the report's header: the machine, versions and settings.
func newReport(cfg config, addrs []string) *report {
	rep := &report{
		Started:     time.Now().UTC().Format(time.RFC3339),
		GoVersion:   runtime.Version(),
		NumCPU:      runtime.NumCPU(),
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		DurationS:   cfg.dur.Seconds(),
		TTLS:        lockTTL.Seconds(),
		Masters:     addrs,
		Commit:      gitDescribe(cfg.root),
		Versions:    moduleVersions(),
		RedsyncNote: redsyncNote(),
		Notes:       benchNotes(),
	}
	if v, err := redisVersion(); err == nil {
		rep.RedisVersion = v
	}
	return rep
}

// warmUp opens every connection pool (and the HTTP keep-alive pool) at
// the largest concurrency, so the first cell does not pay for dialling.
func warmUp(ctx context.Context, cfg config, tgs map[string]target) {
	warm := min(cfg.dur/3, 500*time.Millisecond)
	for _, name := range cfg.targets {
		runCell(ctx, tgs[name], "warmup", slices.Max(cfg.conc), warm)
	}
	waitStrays(5 * time.Second)
}

// runCells runs every scenario × concurrency × target cell into rep.Cells.
func (e *env) runCells(ctx context.Context, tgs map[string]target, rep *report) error {
	for _, sc := range e.cfg.scenarios {
		for _, c := range e.cfg.conc {
			for _, name := range e.cfg.targets {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r, err := e.cell(ctx, tgs[name], sc, c, scenarioPaused[sc])
				if err != nil {
					return err
				}
				if name == "http" && c == 256 {
					r.DaemonVmHWMKiB, r.DaemonVmRSSKiB = e.daemon.memory()
				}
				progress("%-8s c=%-3d %-8s %9.0f ops/s  acq p50 %s p99 %s  rel p50 %s p99 %s  errors %d/%d  stuck %d",
					sc, c, name, r.OpsPerS, fmtMS(r.AcquireP50MS), fmtMS(r.AcquireP99MS), fmtMS(r.ReleaseP50MS), fmtMS(r.ReleaseP99MS),
					r.AcquireErrors, r.ReleaseErrors, r.StuckWorkers)
				rep.Cells = append(rep.Cells, r)
			}
		}
	}
	return nil
}

// runDown3 is the three-masters-down drill: no quorum is possible; how fast
// is "no" answered? Paused first, then killed (the killed masters stay
// dead), into rep.Down3.
func (e *env) runDown3(ctx context.Context, tgs map[string]target, rep *report) error {
	var targets []string
	for _, name := range e.cfg.targets {
		// The floor uses master 4 alone: it has no quorum to lose. httpq
		// answers a lost quorum as http does.
		if name != "floor" && name != "httpq" {
			targets = append(targets, name)
		}
	}
	modes := slices.DeleteFunc(slices.Clone(e.cfg.down3), func(m string) bool { return m == "kill" })
	if slices.Contains(e.cfg.down3, "kill") {
		modes = append(modes, "kill") // last: the killed masters stay dead
	}
	for _, mode := range modes {
		if mode == "kill" {
			for _, i := range []int{0, 1, 2} {
				if err := e.masters[i].Kill(); err != nil {
					return err
				}
			}
			progress("down3: SIGKILLed masters 0, 1, 2")
		}
		for _, name := range targets {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var r cellResult
			if mode == "pause" {
				var err error
				if r, err = e.cell(ctx, tgs[name], "down3-pause", 1, []int{0, 1, 2}); err != nil {
					return err
				}
			} else {
				r = runCell(ctx, tgs[name], "down3-kill", 1, e.cfg.dur)
				waitStrays(e.cfg.dur + 5*time.Second)
			}
			progress("down3-%s %-8s failed acquires %d, median answer %s, p99 %s, acquired %d",
				mode, name, r.AcquireErrors, fmtMS(r.FailedAcqP50MS), fmtMS(r.FailedAcqP99MS), r.AcquireAttempts-r.AcquireErrors)
			rep.Down3 = append(rep.Down3, r)
		}
	}
	return nil
}

// writeReport prints the markdown tables and writes the JSON results.
func writeReport(cfg config, rep *report) error {
	rep.finish()
	fmt.Print(rep.markdown(cfg))
	if err := rep.writeJSON(cfg.jsonPath); err != nil {
		return err
	}
	progress("wrote %s", cfg.jsonPath)
	if cfg.cpuProfile != "" {
		progress("CPU profile in %s: go tool pprof -tagfocus=target=lib -top %s", cfg.cpuProfile, cfg.cpuProfile)
	}
	return nil
}

// env is what the cells share: the masters and every client.
type env struct {
	cfg     config
	masters []*redisproc.Server
	lib     *redlock.Client
	daemon  *daemonProc
	// daemonBin is the built daemon, dir the run's temporary directory:
	// the hand-off cell starts a second replica from them.
	daemonBin, dir string
	httpc          lockPoster
	daemonQ        *daemonProc // the httpq target
	httpcQ         lockPoster
	rdbs           []*redis.Client
	floor          *redis.Client
}

// stopQuotaDaemon stops the httpq target's daemon and its client.
func (e *env) stopQuotaDaemon() {
	if e.httpcQ != nil {
		e.httpcQ.close()
		e.httpcQ = nil
	}
	if e.daemonQ != nil {
		e.daemonQ.stop()
		e.daemonQ = nil
	}
}

func (e *env) close() {
	if e.lib != nil {
		e.lib.Close()
	}
	if e.httpc != nil {
		e.httpc.close()
	}
	if e.daemon != nil {
		e.daemon.stop()
	}
	e.stopQuotaDaemon()
	for _, r := range e.rdbs {
		r.Close()
	}
	if e.floor != nil {
		e.floor.Close()
	}
}

// cell runs one cell with the given masters paused for its whole length,
// then resumes them and lets every client recover before returning.
func (e *env) cell(ctx context.Context, tg target, scenario string, conc int, paused []int) (cellResult, error) {
	for _, i := range paused {
		if err := e.masters[i].Pause(); err != nil {
			return cellResult{}, err
		}
	}
	cpu0, cpuErr := e.mastersCPU(ctx, len(paused) == 0)
	r := runCell(ctx, tg, scenario, conc, e.cfg.dur)
	if cpu1, err := e.mastersCPU(ctx, cpuErr == nil && len(paused) == 0); err == nil && r.Cycles > 0 && len(paused) == 0 {
		r.MasterCPUUSPerCycle = (cpu1 - cpu0).Seconds() * 1e6 / float64(r.Cycles)
	}
	for _, i := range paused {
		if err := e.masters[i].Resume(); err != nil {
			return r, err
		}
	}
	if !waitStrays(e.cfg.dur + 10*time.Second) {
		progress("warning: workers of %s c=%d %s still stuck %v after the cell", scenario, conc, tg.name, e.cfg.dur+10*time.Second)
	}
	if len(paused) > 0 {
		e.recover(ctx)
	}
	time.Sleep(100 * time.Millisecond)
	return r, nil
}

// mastersCPU sums the masters' INFO cpu used_cpu_user + used_cpu_sys
// (when read is false it reads nothing and fails: a paused master would
// not answer).
func (e *env) mastersCPU(ctx context.Context, read bool) (time.Duration, error) {
	if !read {
		return 0, errors.New("not read")
	}
	var sum time.Duration
	for _, m := range e.masters {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ReadTimeout: time.Second, WriteTimeout: time.Second})
		info, err := rdb.Info(ctx, "cpu").Result()
		_ = rdb.Close()
		if err != nil {
			return 0, err
		}
		for line := range strings.Lines(info) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
				}
				sum += time.Duration(f * float64(time.Second))
			}
		}
	}
	return sum, nil
}

// recover waits until the library and the daemon see every master up again.
func (e *env) recover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if e.lib != nil {
		for ctx.Err() == nil && !allUp(e.lib) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if e.daemon != nil {
		e.daemon.waitAllUp(ctx, numMasters)
	}
	if ctx.Err() != nil {
		progress("warning: not every master reported up 5s after resume")
	}
}

func allUp(c *redlock.Client) bool {
	for _, m := range c.Masters() {
		if !m.Up {
			return false
		}
	}
	return true
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "# "+format+"\n", args...)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad concurrency %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseList(s string, allowed ...string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(allowed, f) {
			return nil, fmt.Errorf("unknown %q (want one of %s)", f, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

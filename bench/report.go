package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

type report struct {
	Started      string            `json:"started"`
	Command      string            `json:"command"`
	Commit       string            `json:"redlockd_commit"`
	GoVersion    string            `json:"go_version"`
	RedisVersion string            `json:"redis_version"`
	NumCPU       int               `json:"num_cpu"`
	GOMAXPROCS   int               `json:"gomaxprocs"`
	DurationS    float64           `json:"cell_duration_s"`
	TTLS         float64           `json:"lock_ttl_s"`
	Masters      []string          `json:"masters"`
	Versions     map[string]string `json:"versions"`
	RedsyncNote  string            `json:"redsync_note"`
	Notes        []string          `json:"notes"`
	Cells        []cellResult      `json:"cells"`
	Down3        []cellResult      `json:"three_masters_down"`
	// DaemonVmHWMKiB is the daemon's peak RSS over the whole run; the c=256
	// http cells carry the value right after each of them.
	DaemonVmHWMKiB int64 `json:"daemon_vmhwm_kib_end"`
	// Handoff is the hand-off cell; Load the masters' command rates, idle
	// first, then with handoffLoadWaiters waiters on a held key per target.
	Handoff []handoffResult `json:"handoff"`
	Load    []masterLoad    `json:"masters_load"`
	Checks  []check         `json:"targets"`
	// Idem is the idempotency cell (nil when skipped).
	Idem *idemResult `json:"idempotency,omitempty"`
	// MultiKey is the multi-key cell (nil when skipped).
	MultiKey *multiKeyResult `json:"multi_key,omitempty"`
	// Sem is the semaphore cell (nil when skipped).
	Sem *semResult `json:"semaphore,omitempty"`
}

type check struct {
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func (r *report) cell(scenario, target string, conc int) *cellResult {
	for i := range r.Cells {
		c := &r.Cells[i]
		if c.Scenario == scenario && c.Target == target && c.Conc == conc {
			return c
		}
	}
	return nil
}

// minRatioCycles is the fewest cycles a go-redsync cell must complete for
// the others to be given as a ratio to it: a paused master can stall
// go-redsync's workers for most of a cell, and a ratio over a handful of
// cycles (100000×) says nothing.
const minRatioCycles = 10

// finish fills in ratios to go-redsync, the observed redsync timeouts and
// the performance targets.
func (r *report) finish() {
	r.Command = strings.TrimSpace("go run . " + strings.Join(os.Args[1:], " "))
	for i := range r.Cells {
		c := &r.Cells[i]
		if rs := r.cell(c.Scenario, "redsync", c.Conc); rs != nil && rs.Cycles >= minRatioCycles && rs.OpsPerS > 0 {
			ratio := c.OpsPerS / rs.OpsPerS
			c.Ratio = &ratio
		}
	}
	for _, sc := range []string{"pause1", "pause2"} {
		for _, c := range r.Cells {
			if c.Scenario == sc && c.Target == "redsync" {
				rel := "no release completed"
				if c.ReleaseP50MS > 0 {
					rel = "release p50 " + fmtMS(c.ReleaseP50MS) + " ms"
				}
				r.RedsyncNote += fmt.Sprintf(" Observed with %s at c=%d: acquire p50 %s ms, %s, %d stuck worker(s).",
					sc, c.Conc, fmtMS(c.AcquireP50MS), rel, c.StuckWorkers)
				break
			}
		}
	}

	ratio := func(a, b *cellResult) (float64, bool) {
		if a == nil || b == nil || b.OpsPerS == 0 || (b.Target == "redsync" && b.Cycles < minRatioCycles) {
			return 0, false
		}
		return a.OpsPerS / b.OpsPerS, true
	}
	for _, conc := range []int{64, 256} {
		if x, ok := ratio(r.cell("healthy", "lib", conc), r.cell("healthy", "redsync", conc)); ok {
			r.Checks = append(r.Checks, check{fmt.Sprintf("library, c=%d healthy: ≥ 3× go-redsync ops/s", conc), fmt.Sprintf("%.2f×", x), x >= 3})
		}
	}
	if x, ok := ratio(r.cell("pause1", "lib", 64), r.cell("healthy", "lib", 64)); ok {
		r.Checks = append(r.Checks, check{"library, c=64 one master paused: ≥ 80% of its healthy ops/s", fmt.Sprintf("%.0f%%", 100*x), x >= 0.8})
	}
	if x, ok := ratio(r.cell("healthy", "http", 64), r.cell("healthy", "redsync", 64)); ok {
		r.Checks = append(r.Checks, check{"daemon over HTTP, c=64 healthy: ≥ 1.5× go-redsync in-process ops/s", fmt.Sprintf("%.2f×", x), x >= 1.5})
	}
	if x, ok := ratio(r.cell("healthy", "httpq", 64), r.cell("healthy", "http", 64)); ok {
		r.Checks = append(r.Checks, check{"daemon with a quota, a rate limit and max_locks, c=64 healthy: ≥ 90% of its ops/s without", fmt.Sprintf("%.0f%%", 100*x), x >= 0.9})
	}
	for _, d := range r.Down3 {
		if (d.Target == "lib" || d.Target == "http") && d.AcquireErrors > 0 {
			r.Checks = append(r.Checks, check{
				fmt.Sprintf("three masters down (%s), %s: median failed-acquire answer ≤ 1 ms", strings.TrimPrefix(d.Scenario, "down3-"), d.Target),
				fmtMS(d.FailedAcqP50MS) + " ms", d.FailedAcqP50MS <= 1,
			})
		}
	}
	for _, tg := range []string{"lib", "http"} {
		errs, cells := 0, 0
		for _, c := range r.Cells {
			if c.Scenario == "healthy" && c.Target == tg {
				errs += c.AcquireErrors + c.ReleaseErrors + c.StuckWorkers
				cells++
			}
		}
		if cells > 0 {
			r.Checks = append(r.Checks, check{fmt.Sprintf("%s, healthy cells at every concurrency: no errors", tg), strconv.Itoa(errs) + " errors", errs == 0})
		}
	}
	r.handoffChecks()
	r.idemChecks()
	r.multiKeyChecks()
	r.semChecks()
	var hwm int64
	for _, c := range r.Cells {
		hwm = max(hwm, c.DaemonVmHWMKiB)
	}
	if hwm > 0 {
		r.Checks = append(r.Checks, check{"daemon peak RSS after the c=256 HTTP cells ≤ 64 MiB", fmt.Sprintf("%.1f MiB", float64(hwm)/1024), hwm <= 64*1024})
	}
}

var scenarioTitles = map[string]string{
	"healthy": "healthy (all five masters answer)",
	"pause1":  "one master paused (SIGSTOP master 0 for the whole cell)",
	"pause2":  "two masters paused (SIGSTOP masters 0 and 1 for the whole cell)",
}

func (r *report) markdown(cfg config) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("## redlockd vs go-redsync: five local redis-server masters, %gs cells\n\n", r.DurationS)
	p("`%s` (in bench/) · redlockd %s · %s · redis %s · %d CPUs · go-redsync %s · go-redis %s\n\n",
		r.Command, r.Commit, r.GoVersion, r.RedisVersion, r.NumCPU, r.Versions["github.com/go-redsync/redsync/v4"], r.Versions["github.com/redis/go-redis/v9"])
	for _, sc := range cfg.scenarios {
		p("### %s\n\n", scenarioTitles[sc])
		p("| c | target | ops/s | × redsync | acquire p50 | acquire p99 | release p50 | release p99 | acq errors | rel errors | stuck | master CPU µs/cycle |\n")
		p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		var errLines []string
		for _, c := range r.Cells {
			if c.Scenario != sc {
				continue
			}
			ratio := "—"
			if c.Ratio != nil && *c.Ratio < 100 {
				ratio = fmt.Sprintf("%.2f", *c.Ratio)
			} else if c.Ratio != nil {
				ratio = fmt.Sprintf("%.0f", *c.Ratio)
			}
			cpu := "—"
			if c.MasterCPUUSPerCycle > 0 {
				cpu = fmt.Sprintf("%.0f", c.MasterCPUUSPerCycle)
			}
			p("| %d | %s | %.0f | %s | %s | %s | %s | %s | %d | %d | %d | %s |\n",
				c.Conc, c.Target, c.OpsPerS, ratio, fmtMS(c.AcquireP50MS), fmtMS(c.AcquireP99MS),
				fmtMS(c.ReleaseP50MS), fmtMS(c.ReleaseP99MS), c.AcquireErrors, c.ReleaseErrors, c.StuckWorkers, cpu)
			if len(c.Errors) > 0 {
				errLines = append(errLines, fmt.Sprintf("- c=%d %s: %s", c.Conc, c.Target, fmtErrors(c.Errors)))
			}
		}
		p("\nLatencies in ms. × redsync is — where go-redsync completed fewer than %d cycles. Master CPU: INFO cpu user+sys, summed over the masters, per completed cycle (healthy cells; the floor runs on one master). ", minRatioCycles)
		if len(errLines) == 0 {
			p("No errors.\n\n")
		} else {
			p("Errors:\n\n%s\n\n", strings.Join(errLines, "\n"))
		}
	}
	if len(r.Down3) > 0 {
		p("### three masters down (no quorum possible), one worker, failed-acquire answer time\n\n")
		p("| masters 0,1,2 | target | failed acquires | median | p99 | acquired (should be 0) | errors |\n|---|---|---:|---:|---:|---:|---|\n")
		for _, d := range r.Down3 {
			how := "SIGSTOP"
			if d.Scenario == "down3-kill" {
				how = "SIGKILL"
			}
			p("| %s | %s | %d | %s | %s | %d | %s |\n", how, d.Target, d.AcquireErrors, fmtMS(d.FailedAcqP50MS), fmtMS(d.FailedAcqP99MS),
				d.AcquireAttempts-d.AcquireErrors, fmtErrors(d.Errors))
		}
		p("\n")
	}
	r.handoffMarkdown(p)
	r.idemMarkdown(p)
	r.multiKeyMarkdown(p)
	r.semMarkdown(p)
	var mem []string
	for _, c := range r.Cells {
		if c.DaemonVmHWMKiB > 0 {
			mem = append(mem, fmt.Sprintf("after %s c=%d: VmHWM %.1f MiB (VmRSS %.1f MiB)", c.Scenario, c.Conc,
				float64(c.DaemonVmHWMKiB)/1024, float64(c.DaemonVmRSSKiB)/1024))
		}
	}
	if len(mem) > 0 || r.DaemonVmHWMKiB > 0 {
		p("### daemon memory (peak RSS, /proc/<pid>/status)\n\n")
		for _, m := range mem {
			p("- %s\n", m)
		}
		p("- end of run: VmHWM %.1f MiB\n\n", float64(r.DaemonVmHWMKiB)/1024)
	}
	if len(r.Checks) > 0 {
		p("### performance targets\n\n| target | measured | met |\n|---|---:|---|\n")
		for _, c := range r.Checks {
			met := "yes"
			if !c.Met {
				met = "**no**"
			}
			p("| %s | %s | %s |\n", c.Target, c.Measured, met)
		}
		p("\n")
	}
	p("### how this was measured\n\n")
	for _, n := range r.Notes {
		p("- %s\n", n)
	}
	p("- %s\n", r.RedsyncNote)
	return b.String()
}

func fmtErrors(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(m[b]-m[a], strings.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", m[k], k)
	}
	return strings.Join(parts, "; ")
}

func fmtMS(ms float64) string {
	switch {
	case ms == 0:
		return "—"
	case ms < 10:
		return fmt.Sprintf("%.2f", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.0f", ms)
}

func (r *report) writeJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func benchNotes() []string {
	return []string{
		"Each cell: c workers, each looping acquire + release on a fresh random key (TTL 10 s) for the cell's duration; all targets run one after another in one process on the same five masters.",
		"ops/s = cycles whose acquire and release both succeeded ÷ wall time (start to the last worker's end). Acquire percentiles include failed attempts; release percentiles cover every release attempt.",
		"Paused cells: the master(s) get SIGSTOP right before the cell and SIGCONT after it; the next cell starts once the library and the daemon report every master up. A cell is cut at 2× duration + 5 s: workers still inside a call are abandoned (counted as stuck, their call cancelled).",
		"lib: redlock.New with default options. http: the real `redlockd serve` binary built from this tree, default settings (REDLOCKD_MASTERS, REDLOCKD_API_KEYS, REDLOCKD_LISTEN only), called with keep-alive HTTP/1.1 connections; the HTTP client runs in the bench process and shares the CPUs with the daemon and the masters, so it is a lean one: fasthttp's HostClient by default (-httpclient net: net/http's Client, which measured about 0.9× the ops/s at c=64).",
		"floor: plain SET key token NX PX + Lua compare-and-delete on master 4 alone (never paused), go-redis with default options.",
		"idempotency (after the cells; -idempotency=false skips it): redlock/idempotency's Store over the lib target's Client (default options, so fencing on), 64 workers, healthy, one cell duration per phase: begin (lease 5 s, retention 10 s) + complete of 15 bytes on a fresh key each time, then begin of a completed key (1 KiB answer, one key per worker), answered Completed from one quorum read. Ratios are to the healthy c=64 lib cell of the same run.",
		"multi-key (after the idempotency cell; -multikey=false skips it): the lib target's Client, 64 workers, healthy, one cell duration per row: AcquireMulti (TTL 10 s) + Lock.Release of a fresh set of 1, 2 and 8 keys (1 key is an ordinary Acquire: the baseline); ratios are to the 1-key row of the same cell.",
		"semaphore (after idempotency; -semaphore=false skips it): redlock's AcquirePermit over the lib target's Client, N = 4 permits, TTL 10 s, 64 workers, healthy, one cell duration per phase: first a plain lock per worker (Acquire + Release on the same Client: the baseline), then one semaphore shared by every worker, each acquire waiting for a permit (WithWait 10 s), then one semaphore per worker (a free slot at once). A cycle is a permit (or the plain lock) acquired and released. The targets are ratios to the plain phase; the ratios to the healthy c=64 lib cell of the same run are shown too.",
	}
}

func redsyncNote() string {
	o := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: only its defaults are read
	defer o.Close()
	d := o.Options()
	return fmt.Sprintf("go-redsync: one Mutex per acquire with WithExpiry(%v), WithTries(1), other options default. "+
		"Its per-master bound on acquire is a context deadline of expiry × timeoutFactor = %v × 0.05 = %v, and Unlock has none; "+
		"but its go-redis v9 clients (default options) have ContextTimeoutEnabled=false, so go-redis puts no context deadline on socket reads: "+
		"a master that has a connection but does not answer (paused) is waited for go-redis's ReadTimeout, %v, on acquire and release alike "+
		"(the context deadline only bounds waiting for a pooled connection: PoolSize %d per master, and dial retries).",
		lockTTL, lockTTL, time.Duration(float64(lockTTL)*0.05), d.ReadTimeout, d.PoolSize)
}

func moduleVersions() map[string]string {
	out := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	for _, d := range bi.Deps {
		out[d.Path] = d.Version
	}
	return out
}

func gitDescribe(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func redisVersion() (string, error) {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "", err
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v, nil
		}
	}
	return strings.TrimSpace(string(out)), nil
}

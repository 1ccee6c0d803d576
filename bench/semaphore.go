package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// The semaphore cell: permits of redlock.AcquirePermit at c=64 with N = 4,
// in three phases of the cell's duration each, on one Client:
//
//   - plain: each worker takes and releases a plain lock on a key of its
//     own, as the own phase does with its permit: the baseline the two
//     others are compared with, measured in the same cell (the healthy
//     lib cell ran minutes earlier, before the idempotency cell filled the
//     masters; the multi-key cell's one-key row shows how far that alone
//     moves a rate);
//   - shared: the 64 workers share one semaphore and wait for a permit
//     (WithWait), so at most 4 hold one at a time and each hand-off is a
//     release notification and a new attempt over the slots;
//   - own: each worker has a semaphore of its own, so an acquire meets a
//     free slot at once: the cost of a permit next to a plain lock.
const (
	semConc    = 64
	semPermits = 4
	// semWait bounds a shared-phase acquire's wait for a permit.
	semWait = 10 * time.Second
)

// semPhaseResult is one phase of the semaphore cell.
type semPhaseResult struct {
	// Cycles: a permit acquired and released, both succeeded.
	Cycles     int     `json:"cycles"`
	CyclesPerS float64 `json:"cycles_per_s"`
	Errors     int     `json:"errors"`
	// AcquireP50MS, AcquireP99MS: a successful cycle's acquire, waiting
	// included.
	AcquireP50MS float64 `json:"acquire_p50_ms"`
	AcquireP99MS float64 `json:"acquire_p99_ms"`
	// VsLib: CyclesPerS over the healthy c=64 lib cell's ops/s of the
	// same run (nil without that cell).
	VsLib *float64 `json:"vs_lib,omitempty"`
	// VsPlain: CyclesPerS over the plain phase's (nil for that phase).
	VsPlain *float64 `json:"vs_plain,omitempty"`
}

// semResult is the semaphore cell.
type semResult struct {
	Conc      int            `json:"concurrency"`
	Permits   int            `json:"permits"`
	DurationS float64        `json:"duration_s"` // of each phase
	Plain     semPhaseResult `json:"plain"`
	Shared    semPhaseResult `json:"shared"`
	Own       semPhaseResult `json:"own"`
	Errors    map[string]int `json:"errors,omitempty"`
}

// runSemaphore runs the semaphore cell into rep.Sem (skipped with
// -semaphore=false), on the lib target's Client when there is one, else
// on a Client of its own (default options).
func (e *env) runSemaphore(ctx context.Context, addrs []string, rep *report) error {
	if !e.cfg.sem {
		return nil
	}
	c, done, err := e.libClient(addrs)
	if err != nil {
		return err
	}
	defer done()
	progress("semaphore N=%d c=%d: a plain lock per worker, one semaphore shared by every worker, then one per worker, %v each", semPermits, semConc, e.cfg.dur)
	r := &semResult{Conc: semConc, Permits: semPermits, DurationS: e.cfg.dur.Seconds(), Errors: map[string]int{}}
	var mu sync.Mutex
	fail := func(what string, err error) {
		mu.Lock()
		r.Errors[what+": "+errClass(err)]++
		mu.Unlock()
	}
	run := time.Now().UnixNano()
	for _, what := range []string{"plain", "shared", "own"} {
		out := map[string]*semPhaseResult{"plain": &r.Plain, "shared": &r.Shared, "own": &r.Own}[what]
		var lat []time.Duration
		n, errs, wall := phase(ctx, "semaphore", semConc, e.cfg.dur, func(ctx context.Context, w int) (time.Duration, bool) {
			t0 := time.Now()
			var release func(context.Context) error
			switch what {
			case "plain":
				l, err := c.Acquire(ctx, fmt.Sprintf("bench:sem:%d:plain:%d", run, w), lockTTL)
				if err != nil {
					fail(what+" acquire", err)
					return 0, false
				}
				release = l.Release
			default:
				name, opts := fmt.Sprintf("bench:sem:%d:%d", run, w), []redlock.AcquireOption(nil)
				if what == "shared" {
					name, opts = fmt.Sprintf("bench:sem:%d:shared", run), append(opts, redlock.WithWait(semWait))
				}
				p, err := c.AcquirePermit(ctx, name, semPermits, lockTTL, opts...)
				if err != nil {
					fail(what+" acquire", err)
					return 0, false
				}
				release = p.Release
			}
			took := time.Since(t0)
			if err := release(ctx); err != nil {
				fail(what+" release", err)
				return 0, false
			}
			return took, true
		}, &lat)
		out.Cycles, out.Errors = n, errs
		out.CyclesPerS = float64(n) / wall.Seconds()
		out.AcquireP50MS, out.AcquireP99MS = pct(lat)
		progress("semaphore %s: %.0f cycles/s (acquire p50 %s p99 %s ms, errors %d)",
			what, out.CyclesPerS, fmtMS(out.AcquireP50MS), fmtMS(out.AcquireP99MS), out.Errors)
	}
	if len(r.Errors) == 0 {
		r.Errors = nil
	}
	rep.Sem = r
	return nil
}

// semChecks adds the semaphore targets to r.Checks and the ratios to
// r.Sem: one per worker ≥ 0.8× and shared ≥ 0.2× the plain phase's
// acquire + release cycles/s (the library's, same Client, same cell:
// runSemaphore), no errors. The ratios to the healthy c=64 lib cell are
// printed too. That a semaphore never has more than N holders is for the
// tests and the drills (I7), not for a benchmark.
func (r *report) semChecks() {
	x := r.Sem
	if x == nil {
		return
	}
	r.Checks = append(r.Checks,
		check{fmt.Sprintf("semaphore N=%d, c=%d: no errors", x.Permits, x.Conc),
			fmt.Sprintf("%d errors", x.Plain.Errors+x.Shared.Errors+x.Own.Errors), x.Plain.Errors+x.Shared.Errors+x.Own.Errors == 0})
	if lib := r.cell("healthy", "lib", x.Conc); lib != nil && lib.OpsPerS > 0 {
		for _, ph := range []*semPhaseResult{&x.Plain, &x.Shared, &x.Own} {
			v := ph.CyclesPerS / lib.OpsPerS
			ph.VsLib = &v
		}
	}
	if x.Plain.CyclesPerS == 0 {
		return
	}
	own, shared := x.Own.CyclesPerS/x.Plain.CyclesPerS, x.Shared.CyclesPerS/x.Plain.CyclesPerS
	x.Own.VsPlain, x.Shared.VsPlain = &own, &shared
	r.Checks = append(r.Checks,
		check{fmt.Sprintf("semaphore N=%d, one per worker, c=%d healthy: cycles/s ≥ 0.8× the library's acquire + release (plain phase, same cell)", x.Permits, x.Conc),
			fmt.Sprintf("%.2f× (%.0f/s)", own, x.Own.CyclesPerS), own >= 0.8},
		check{fmt.Sprintf("semaphore N=%d shared by %d workers waiting for a permit, healthy: cycles/s ≥ 0.2× the library's acquire + release (plain phase, same cell)", x.Permits, x.Conc),
			fmt.Sprintf("%.2f× (%.0f/s)", shared, x.Shared.CyclesPerS), shared >= 0.2})
}

// semMarkdown prints the semaphore cell's table.
func (r *report) semMarkdown(p func(string, ...any)) {
	x := r.Sem
	if x == nil {
		return
	}
	vs := func(f *float64) string {
		if f == nil {
			return "—"
		}
		return fmt.Sprintf("%.2f×", *f)
	}
	p("### semaphore: N = %d permits, healthy, c=%d, %.0f s per row\n\n", x.Permits, x.Conc, x.DurationS)
	p("| semaphore | cycles | per s | × plain phase | × lib cell | acquire p50 ms | acquire p99 ms | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range []struct {
		what string
		ph   semPhaseResult
	}{{"plain lock, one per worker (the baseline)", x.Plain}, {"one shared by every worker (waiting for a permit)", x.Shared}, {"one per worker", x.Own}} {
		p("| %s | %d | %.0f | %s | %s | %s | %s | %d |\n", row.what, row.ph.Cycles, row.ph.CyclesPerS, vs(row.ph.VsPlain), vs(row.ph.VsLib),
			fmtMS(row.ph.AcquireP50MS), fmtMS(row.ph.AcquireP99MS), row.ph.Errors)
	}
	p("\n")
	for _, k := range slices.Sorted(maps.Keys(x.Errors)) {
		p("- %s: %d\n", k, x.Errors[k])
	}
	if len(x.Errors) > 0 {
		p("\n")
	}
}

package main

import (
	"context"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"time"
)

// cellResult is one target at one concurrency in one scenario.
type cellResult struct {
	Scenario string  `json:"scenario"`
	Target   string  `json:"target"`
	Conc     int     `json:"concurrency"`
	Cycles   int     `json:"cycles"` // acquire and release both succeeded
	OpsPerS  float64 `json:"ops_per_s"`
	WallS    float64 `json:"wall_s"` // start to last worker finished (or abandoned)
	// Ratio is OpsPerS over go-redsync's in the same cell; nil when there is
	// no redsync cell or it completed fewer than minRatioCycles cycles.
	Ratio *float64 `json:"ratio_vs_redsync,omitempty"`

	AcquireAttempts int     `json:"acquire_attempts"`
	AcquireErrors   int     `json:"acquire_errors"`
	ReleaseErrors   int     `json:"release_errors"`
	AcquireP50MS    float64 `json:"acquire_p50_ms"` // over every attempt, failed ones included
	AcquireP99MS    float64 `json:"acquire_p99_ms"`
	ReleaseP50MS    float64 `json:"release_p50_ms"` // over every release attempt
	ReleaseP99MS    float64 `json:"release_p99_ms"`
	FailedAcqP50MS  float64 `json:"failed_acquire_p50_ms"` // answer time of failed acquires only
	FailedAcqP99MS  float64 `json:"failed_acquire_p99_ms"`
	// StuckWorkers were still inside an acquire or release when the cell's
	// hard limit (2×duration + 5s) passed; they were abandoned (their
	// context cancelled) and what they had completed is counted.
	StuckWorkers int            `json:"stuck_workers"`
	Errors       map[string]int `json:"errors,omitempty"` // "acquire: <class>" / "release: <class>" / "stuck in <phase>"

	// MasterCPUUSPerCycle is the CPU the masters spent per completed cycle,
	// summed over every master (INFO cpu used_cpu_user + used_cpu_sys,
	// read before and after the cell): the scripts, the network I/O and
	// the event loop. Healthy cells only (a paused master cannot be read);
	// it includes the clients' background probes, which are the same for
	// every cell.
	MasterCPUUSPerCycle float64 `json:"master_cpu_us_per_cycle,omitempty"`

	DaemonVmHWMKiB int64 `json:"daemon_vmhwm_kib,omitempty"` // http cells: the daemon's peak RSS so far
	DaemonVmRSSKiB int64 `json:"daemon_vmrss_kib,omitempty"`
}

// workerStats is one worker's record. The cell reads it under mu and then
// closes it, so a worker abandoned in a hung call cannot change a result
// that has been reported.
type workerStats struct {
	mu      sync.Mutex
	closed  bool
	done    bool
	phase   string
	acqOK   []time.Duration
	acqFail []time.Duration
	rel     []time.Duration
	cycles  int
	relErr  int
	errs    map[string]int
}

func (w *workerStats) update(fn func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	fn()
	return true
}

// strays counts workers that have not returned, including those abandoned
// by earlier cells; the next cell waits (bounded) for them.
var strays sync.WaitGroup

func waitStrays(d time.Duration) bool {
	done := make(chan struct{})
	go func() { strays.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// runCell runs conc workers doing acquire+release cycles on random keys
// until dur has passed, then waits for in-flight cycles up to the hard
// limit of 2×dur + 5s from the start.
func runCell(ctx context.Context, tg target, scenario string, conc int, dur time.Duration) cellResult {
	start := time.Now()
	deadline := start.Add(dur)
	hard := deadline.Add(dur + 5*time.Second)
	cctx, cancel := context.WithDeadline(ctx, hard)
	defer cancel()
	labels := pprof.Labels("target", tg.name, "cell", scenario+"/c"+strconv.Itoa(conc))

	ws := make([]*workerStats, conc)
	var wg sync.WaitGroup
	for i := range ws {
		w := &workerStats{errs: map[string]int{}}
		ws[i] = w
		wg.Add(1)
		strays.Add(1)
		go pprof.Do(cctx, labels, func(ctx context.Context) {
			defer strays.Done()
			defer wg.Done()
			work(ctx, tg, w, deadline)
		})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	t := time.NewTimer(time.Until(hard))
	select {
	case <-allDone:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	wall := time.Since(start)

	r := cellResult{Scenario: scenario, Target: tg.name, Conc: conc, WallS: wall.Seconds(), Errors: map[string]int{}}
	var acq, fail, rel []time.Duration
	for _, w := range ws {
		w.mu.Lock()
		w.closed = true
		acq = append(append(acq, w.acqOK...), w.acqFail...)
		fail = append(fail, w.acqFail...)
		rel = append(rel, w.rel...)
		r.Cycles += w.cycles
		r.AcquireErrors += len(w.acqFail)
		r.ReleaseErrors += w.relErr
		for k, v := range w.errs {
			r.Errors[k] += v
		}
		if !w.done {
			r.StuckWorkers++
			r.Errors["stuck in "+w.phase]++
		}
		w.mu.Unlock()
	}
	r.AcquireAttempts = len(acq)
	r.OpsPerS = float64(r.Cycles) / wall.Seconds()
	r.AcquireP50MS, r.AcquireP99MS = pct(acq)
	r.ReleaseP50MS, r.ReleaseP99MS = pct(rel)
	r.FailedAcqP50MS, r.FailedAcqP99MS = pct(fail)
	return r
}

func work(ctx context.Context, tg target, w *workerStats, deadline time.Time) {
	defer w.update(func() { w.done, w.phase = true, "" })
	prefix := "bench:" + tg.name + ":"
	for ctx.Err() == nil && time.Now().Before(deadline) {
		key := prefix + strconv.FormatUint(rand.Uint64(), 36)
		w.update(func() { w.phase = "acquire" })
		t0 := time.Now()
		release, err := tg.acquire(ctx, key)
		d := time.Since(t0)
		if !w.update(func() {
			if err != nil {
				w.acqFail = append(w.acqFail, d)
				w.errs["acquire: "+classify(ctx, err)]++
			} else {
				w.acqOK = append(w.acqOK, d)
				w.phase = "release"
			}
		}) {
			return
		}
		if err != nil {
			continue
		}
		t1 := time.Now()
		err = release(ctx)
		d = time.Since(t1)
		if !w.update(func() {
			w.rel = append(w.rel, d)
			if err != nil {
				w.relErr++
				w.errs["release: "+classify(ctx, err)]++
			} else {
				w.cycles++
			}
		}) {
			return
		}
	}
}

// classify labels err, or says that the cell's hard limit cancelled it.
func classify(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return "cancelled at cell end"
	}
	return errClass(err)
}

// pct returns the 50th and 99th percentiles in milliseconds (nearest rank).
func pct(ds []time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := int(q*float64(len(ds))+0.999999) - 1
		i = min(max(i, 0), len(ds)-1)
		return float64(ds[i]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.99)
}

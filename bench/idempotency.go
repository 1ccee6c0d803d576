package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlockd/redlockd/redlock/idempotency"
)

// idemConc is the idempotency cell's concurrency: c=64, as the
// idempotency targets are stated.
const idemConc = 64

// The idempotency cell's lease and retention: the record outlives the
// lease by a lease (Begin's rule), and expires soon after the run.
const (
	idemLease     = 5 * time.Second
	idemRetention = 10 * time.Second
)

// idemResult is the idempotency cell: the library's idempotency store
// (redlock/idempotency) on the same masters, healthy, at c=64, in two
// phases of the cell's duration each.
type idemResult struct {
	Conc      int     `json:"concurrency"`
	DurationS float64 `json:"duration_s"` // of each phase
	// BeginCompletes: a begin (quorum read, lease acquire, IN_PROGRESS
	// write) and a complete (COMPLETED write, lease release) on a fresh
	// key, both succeeded.
	BeginCompletes      int     `json:"begin_completes"`
	BeginCompletesPerS  float64 `json:"begin_completes_per_s"`
	BeginCompleteErrors int     `json:"begin_complete_errors"`
	BeginCompleteP50MS  float64 `json:"begin_complete_p50_ms"`
	BeginCompleteP99MS  float64 `json:"begin_complete_p99_ms"`
	// Replays: a begin of a completed key answered Completed (one quorum
	// read); each worker replays a key of its own.
	Replays      int     `json:"replays"`
	ReplaysPerS  float64 `json:"replays_per_s"`
	ReplayErrors int     `json:"replay_errors"`
	ReplayP50MS  float64 `json:"replay_p50_ms"`
	ReplayP99MS  float64 `json:"replay_p99_ms"`
	// The rates over the library's acquire + release cycles/s in the
	// healthy c=64 lib cell of the same run (nil without that cell).
	BeginCompleteVsLib *float64       `json:"begin_completes_vs_lib,omitempty"`
	ReplaysVsLib       *float64       `json:"replays_vs_lib,omitempty"`
	Errors             map[string]int `json:"errors,omitempty"`
}

// runIdem runs the idempotency cell into rep.Idem (skipped with
// -idempotency=false). It uses the lib target's Client when there is one
// (its default fence key gives the fences records need), else a Client of
// its own.
func (e *env) runIdem(ctx context.Context, addrs []string, rep *report) error {
	if !e.cfg.idem {
		return nil
	}
	c, done, err := e.libClient(addrs)
	if err != nil {
		return err
	}
	defer done()
	s, err := idempotency.New(c)
	if err != nil {
		return err
	}
	progress("idempotency c=%d: begin + complete, then replays, %v each", idemConc, e.cfg.dur)
	r := &idemResult{Conc: idemConc, DurationS: e.cfg.dur.Seconds(), Errors: map[string]int{}}
	var mu sync.Mutex
	fail := func(what string, err error) {
		mu.Lock()
		r.Errors[what+": "+errClass(err)]++
		mu.Unlock()
	}
	run := fmt.Sprintf("bench:idem:%d", time.Now().UnixNano())
	ans := &idempotency.Answer{Status: 201, Body: []byte(`{"order":"o-1"}`)}
	var seq atomic.Int64

	var bcLat []time.Duration
	n, errs, wall := phase(ctx, "idempotency", idemConc, e.cfg.dur, func(ctx context.Context, w int) (time.Duration, bool) {
		key := run + ":bc:" + strconv.FormatInt(seq.Add(1), 10)
		t0 := time.Now()
		res, err := s.Begin(ctx, idempotency.BeginRequest{Key: key, Fingerprint: sha(key), Lease: idemLease, Retention: idemRetention})
		if err == nil && res.Outcome != idempotency.Started {
			err = fmt.Errorf("begin answered %s", res.Outcome)
		}
		if err != nil {
			fail("begin", err)
			return 0, false
		}
		if err := s.Complete(ctx, key, res.Token, ans); err != nil {
			fail("complete", err)
			return 0, false
		}
		return time.Since(t0), true
	}, &bcLat)
	r.BeginCompletes, r.BeginCompleteErrors = n, errs
	r.BeginCompletesPerS = float64(n) / wall.Seconds()
	r.BeginCompleteP50MS, r.BeginCompleteP99MS = pct(bcLat)

	// One completed key per worker, begun and completed before the phase.
	reqs := make([]idempotency.BeginRequest, idemConc)
	for w := range reqs {
		key := run + ":replay:" + strconv.Itoa(w)
		reqs[w] = idempotency.BeginRequest{Key: key, Fingerprint: sha(key), Lease: idemLease, Retention: time.Minute}
		res, err := s.Begin(ctx, reqs[w])
		if err != nil {
			return fmt.Errorf("idempotency: replay key: %w", err)
		}
		if err := s.Complete(ctx, reqs[w].Key, res.Token, &idempotency.Answer{Status: 200, Body: make([]byte, 1024)}); err != nil {
			return fmt.Errorf("idempotency: replay key: %w", err)
		}
	}
	var rpLat []time.Duration
	n, errs, wall = phase(ctx, "idempotency", idemConc, e.cfg.dur, func(ctx context.Context, w int) (time.Duration, bool) {
		t0 := time.Now()
		res, err := s.Begin(ctx, reqs[w])
		if err == nil && res.Outcome != idempotency.Completed {
			err = fmt.Errorf("replay answered %s", res.Outcome)
		}
		if err != nil {
			fail("replay", err)
			return 0, false
		}
		return time.Since(t0), true
	}, &rpLat)
	r.Replays, r.ReplayErrors = n, errs
	r.ReplaysPerS = float64(n) / wall.Seconds()
	r.ReplayP50MS, r.ReplayP99MS = pct(rpLat)
	if len(r.Errors) == 0 {
		r.Errors = nil
	}
	progress("idempotency c=%d: %.0f begin+complete/s (p50 %s p99 %s ms, errors %d), %.0f replays/s (p50 %s p99 %s ms, errors %d)",
		idemConc, r.BeginCompletesPerS, fmtMS(r.BeginCompleteP50MS), fmtMS(r.BeginCompleteP99MS), r.BeginCompleteErrors,
		r.ReplaysPerS, fmtMS(r.ReplayP50MS), fmtMS(r.ReplayP99MS), r.ReplayErrors)
	rep.Idem = r
	return nil
}

// phase runs op on conc workers for d (each op on a context bounded by
// 10 s; profile samples labelled target=label) and returns the successes,
// the failures, the wall time and, in lat, every success's latency.
func phase(ctx context.Context, label string, conc int, d time.Duration, op func(ctx context.Context, w int) (time.Duration, bool), lat *[]time.Duration) (ok, failed int, wall time.Duration) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for w := range conc {
		wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("target", label), func(ctx context.Context) {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			for time.Now().Before(end) && ctx.Err() == nil {
				octx, cancel := context.WithTimeout(ctx, 10*time.Second)
				l, good := op(octx, w)
				cancel()
				if good {
					mine = append(mine, l)
				} else {
					bad++
				}
			}
			mu.Lock()
			*lat = append(*lat, mine...)
			failed += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	return len(*lat), failed, time.Since(start)
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// idemChecks adds the idempotency targets to r.Checks and the ratios to
// the lib cell to r.Idem: replays ≥ 1× and begin + complete ≥ 0.25× the
// library's acquire + release cycles/s, healthy, c=64, same run.
func (r *report) idemChecks() {
	lib := r.cell("healthy", "lib", idemConc)
	if r.Idem == nil || lib == nil || lib.OpsPerS == 0 {
		return
	}
	bc, rp := r.Idem.BeginCompletesPerS/lib.OpsPerS, r.Idem.ReplaysPerS/lib.OpsPerS
	r.Idem.BeginCompleteVsLib, r.Idem.ReplaysVsLib = &bc, &rp
	r.Checks = append(r.Checks,
		check{"idempotency records, c=64 healthy: replays/s ≥ 1× the library's acquire + release cycles/s",
			fmt.Sprintf("%.2f× (%.0f/s)", rp, r.Idem.ReplaysPerS), rp >= 1},
		check{"idempotency records, c=64 healthy: begin + complete cycles/s ≥ 0.25× the library's acquire + release cycles/s",
			fmt.Sprintf("%.2f× (%.0f/s)", bc, r.Idem.BeginCompletesPerS), bc >= 0.25},
		check{"idempotency records, c=64 healthy: no errors",
			fmt.Sprintf("%d errors", r.Idem.BeginCompleteErrors+r.Idem.ReplayErrors), r.Idem.BeginCompleteErrors+r.Idem.ReplayErrors == 0})
}

// idemMarkdown prints the idempotency cell's table.
func (r *report) idemMarkdown(p func(string, ...any)) {
	x := r.Idem
	if x == nil {
		return
	}
	vs := func(f *float64) string {
		if f == nil {
			return "—"
		}
		return fmt.Sprintf("%.2f×", *f)
	}
	p("### idempotency records: the library's store, healthy, c=%d, %.0f s per row\n\n", x.Conc, x.DurationS)
	p("| operation | done | per s | × lib acquire + release | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
	p("| begin + complete (fresh key) | %d | %.0f | %s | %s | %s | %d |\n", x.BeginCompletes, x.BeginCompletesPerS, vs(x.BeginCompleteVsLib),
		fmtMS(x.BeginCompleteP50MS), fmtMS(x.BeginCompleteP99MS), x.BeginCompleteErrors)
	p("| replay (begin of a completed key) | %d | %.0f | %s | %s | %s | %d |\n\n", x.Replays, x.ReplaysPerS, vs(x.ReplaysVsLib),
		fmtMS(x.ReplayP50MS), fmtMS(x.ReplayP99MS), x.ReplayErrors)
	for _, k := range slices.Sorted(maps.Keys(x.Errors)) {
		p("- %s: %d\n", k, x.Errors[k])
	}
	if len(x.Errors) > 0 {
		p("\n")
	}
}

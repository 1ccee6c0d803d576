package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// multiKeySizes are the multi-key cell's set sizes: 1 (the same library
// Client's single-key acquire + release, measured in the same cell as the
// baseline), 2 and 8 keys.
var multiKeySizes = []int{1, 2, 8}

// multiKeyRow is one set size of the multi-key cell.
type multiKeyRow struct {
	Keys     int     `json:"keys"`
	Cycles   int     `json:"cycles"`
	PerS     float64 `json:"cycles_per_s"`
	Errors   int     `json:"errors"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
	VsSingle float64 `json:"vs_single_key"` // PerS over the 1-key row's
}

// multiKeyResult is the multi-key cell: AcquireMulti + Lock.Release of
// fresh sets (no contention) through the library at c=64, healthy.
type multiKeyResult struct {
	Conc      int            `json:"concurrency"`
	DurationS float64        `json:"duration_s"` // of each row
	Rows      []multiKeyRow  `json:"rows"`
	Errors    map[string]int `json:"errors,omitempty"`
}

// runMultiKey runs the multi-key cell into rep.MultiKey (skipped with
// -multikey=false), on the lib target's Client or one of its own.
func (e *env) runMultiKey(ctx context.Context, addrs []string, rep *report) error {
	if !e.cfg.multiKey {
		return nil
	}
	c, done, err := e.libClient(addrs)
	if err != nil {
		return err
	}
	defer done()
	r := &multiKeyResult{Conc: idemConc, DurationS: e.cfg.dur.Seconds(), Errors: map[string]int{}}
	run := fmt.Sprintf("bench:multi:%d", time.Now().UnixNano())
	var seq atomic.Int64
	for _, n := range multiKeySizes {
		progress("multi-key c=%d: acquire + release of %d key(s), %v", idemConc, n, e.cfg.dur)
		var lat []time.Duration
		var mu sync.Mutex
		errs := map[string]int{}
		done, failed, wall := phase(ctx, "multikey", idemConc, e.cfg.dur, func(ctx context.Context, w int) (time.Duration, bool) {
			base := run + ":" + strconv.FormatInt(seq.Add(1), 10)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = base + ":" + strconv.Itoa(i)
			}
			t0 := time.Now()
			lk, err := c.AcquireMulti(ctx, keys, 10*time.Second)
			if err == nil {
				err = lk.Release(ctx)
			}
			if err != nil {
				mu.Lock()
				errs[errClass(err)]++
				mu.Unlock()
				return 0, false
			}
			return time.Since(t0), true
		}, &lat)
		for k, v := range errs {
			r.Errors[fmt.Sprintf("%d keys: %s", n, k)] += v
		}
		row := multiKeyRow{Keys: n, Cycles: done, Errors: failed, PerS: float64(done) / wall.Seconds()}
		row.P50MS, row.P99MS = pct(lat)
		if len(r.Rows) > 0 && r.Rows[0].PerS > 0 {
			row.VsSingle = row.PerS / r.Rows[0].PerS
		} else {
			row.VsSingle = 1
		}
		r.Rows = append(r.Rows, row)
		progress("multi-key c=%d, %d key(s): %.0f cycles/s (%.2f× one key; p50 %s p99 %s ms, errors %d)",
			idemConc, n, row.PerS, row.VsSingle, fmtMS(row.P50MS), fmtMS(row.P99MS), row.Errors)
	}
	if len(r.Errors) == 0 {
		r.Errors = nil
	}
	rep.MultiKey = r
	return nil
}

// libClient is the lib target's Client when there is one, else a Client
// of its own (default options) that done closes.
func (e *env) libClient(addrs []string) (c *redlock.Client, done func(), err error) {
	if e.lib != nil {
		return e.lib, func() {}, nil
	}
	opts := make([]*redis.Options, len(addrs))
	for i, a := range addrs {
		opts[i] = &redis.Options{Addr: a}
	}
	if c, err = redlock.New(opts); err != nil {
		return nil, nil, err
	}
	return c, func() { _ = c.Close() }, nil
}

// multiKeyChecks adds the multi-key targets: a set of 2 keys costs about
// one single-key lock (≥ 0.8× its cycles/s); a set of 8 at most four
// (≥ 0.25×: half the cost of its eight keys locked one by one); no errors.
func (r *report) multiKeyChecks() {
	x := r.MultiKey
	if x == nil {
		return
	}
	errs := 0
	for _, row := range x.Rows {
		errs += row.Errors
		switch row.Keys {
		case 2:
			r.Checks = append(r.Checks, check{"multi-key lock, c=64 healthy: 2 keys ≥ 0.8× one key's acquire + release cycles/s (same Client, same run)",
				fmt.Sprintf("%.2f× (%.0f/s)", row.VsSingle, row.PerS), row.VsSingle >= 0.8})
		case 8:
			r.Checks = append(r.Checks, check{"multi-key lock, c=64 healthy: 8 keys ≥ 0.25× one key's acquire + release cycles/s (twice eight single-key locks taken one by one)",
				fmt.Sprintf("%.2f× (%.0f/s)", row.VsSingle, row.PerS), row.VsSingle >= 0.25})
		}
	}
	r.Checks = append(r.Checks, check{"multi-key lock, c=64 healthy: no errors", fmt.Sprintf("%d errors", errs), errs == 0})
}

// multiKeyMarkdown prints the multi-key cell's table.
func (r *report) multiKeyMarkdown(p func(string, ...any)) {
	x := r.MultiKey
	if x == nil {
		return
	}
	p("### multi-key locks: the library's AcquireMulti + Release, healthy, c=%d, %.0f s per row\n\n", x.Conc, x.DurationS)
	p("| keys | cycles | per s | × one key | p50 ms | p99 ms | errors |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range x.Rows {
		p("| %d | %d | %.0f | %.2f× | %s | %s | %d |\n", row.Keys, row.Cycles, row.PerS, row.VsSingle, fmtMS(row.P50MS), fmtMS(row.P99MS), row.Errors)
	}
	p("\n")
	for k, v := range x.Errors {
		p("- %s: %d\n", k, v)
	}
}

package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// Scenario is one row of the drill matrix.
type Scenario struct {
	// Name is the row's name, e.g. "kill-2".
	Name string
	// Summary says what is broken and what must hold.
	Summary string
	// Must lists what the checker must find: invariants that must be
	// violated (a negative control: the drill disables a protection and
	// proves the checker sees the damage) or StaleRejected. Every other
	// violation is unexpected.
	Must []string
	// May lists violations that are consequences of a Must and tolerated.
	May []string
	// Needs lists the fault kinds the target must support; if it does not,
	// the scenario is skipped.
	Needs []FaultKind
	// Options are added to the drill's own library clients (the daemons
	// of a target keep theirs).
	Options []redlock.Option
	// Workload runs the contention workload and the probes for
	// Config.Duration while Script runs.
	Workload bool
	// MultiKey: the workload's clients take random sets of keys as
	// multi-key locks (Drill.setClient) instead of one key each.
	MultiKey bool
	// Permits, when positive, makes the workload's clients take permits
	// of one semaphore of this many permits instead of locks (I7).
	Permits int
	// Script injects and heals the faults.
	Script func(ctx context.Context, d *Drill) error
	// ScriptEnds: the workload stops when Script returns, not at
	// Config.Duration (a fuzz schedule that ran out, or found what it
	// looked for).
	ScriptEnds bool
	// Clients, Keys and Via, when set, replace the Config's for this row.
	Clients, Keys int
	Via           string
	// Prepare, when set, runs once the drill's clients are ready and
	// before the workload starts (a route for the library lockers).
	Prepare func(ctx context.Context, d *Drill) error
	// Verify, when set, checks what the row is about beyond I1–I6, over
	// the checked History; its violations are judged as the checker's
	// (Must, May, or unexpected).
	Verify func(d *Drill, h History) []Violation
}

// Control reports whether the scenario is a negative control.
func (s *Scenario) Control() bool { return len(s.Must) > 0 }

// Result is the outcome of one scenario.
type Result struct {
	Scenario string `json:"scenario"`
	Summary  string `json:"summary"`
	Target   string `json:"target"`
	Control  bool   `json:"control"`
	// Skipped says why the scenario did not run ("" if it ran).
	Skipped string `json:"skipped,omitempty"`
	// Error is a failure of the drill itself (a fault could not be
	// injected, an arrangement did not happen); it fails the scenario.
	Error  string   `json:"error,omitempty"`
	Faults string   `json:"faults"`
	Notes  []string `json:"notes,omitempty"`
	// Grants and Failures count acquires (probes included).
	Grants   int `json:"grants"`
	Failures int `json:"failures"`
	// StaleRejected counts writes the Resource refused as stale.
	StaleRejected int `json:"stale_rejected"`
	// Violations lists what the checker found; Unexpected counts those
	// that are neither in Must nor in May.
	Violations []Violation    `json:"violations"`
	Counts     map[string]int `json:"counts"`
	Unexpected int            `json:"unexpected"`
	Missed     []string       `json:"missed,omitempty"` // Must items not found
	Caught     []string       `json:"caught,omitempty"` // Must items found
	Linear     string         `json:"linearizable"`     // porcupine: ok, illegal, unknown
	P50        time.Duration  `json:"acquire_p50_ns"`
	P99        time.Duration  `json:"acquire_p99_ns"`
	Elapsed    time.Duration  `json:"elapsed_ns"`
	Timeline   string         `json:"timeline,omitempty"`
	Leftovers  []Leftover     `json:"leftovers,omitempty"`
	// Events are the faults, heals and notes (master state changes seen
	// by the drill's library clients included), in order.
	Events []Event `json:"events"`
	// Stalls are masters that did not answer PINGs in time, for 250ms or
	// more, with no injected fault to explain it.
	Stalls  []Stall  `json:"stalls,omitempty"`
	History *History `json:"-"`
	lin     porcupine.LinearizationInfo
}

// Pass reports whether the scenario met its expectations: it ran, nothing
// unexpected was found, and a control caught all it must.
func (r *Result) Pass() bool {
	return r.Skipped != "" || (r.Error == "" && r.Unexpected == 0 && len(r.Missed) == 0)
}

// Verdict is the report's one-word outcome.
func (r *Result) Verdict() string {
	switch {
	case r.Skipped != "":
		return "skipped"
	case r.Error != "":
		return "ERROR"
	case r.Unexpected > 0:
		return "VIOLATION"
	case len(r.Missed) > 0:
		return "MISSED"
	case r.Control:
		return "caught"
	}
	return "ok"
}

// Run runs one scenario against t and checks its history. outDir, if not
// empty, receives the porcupine timeline as timeline-<name>.html.
func Run(ctx context.Context, t Target, cfg Config, sc *Scenario, outDir string) *Result {
	if sc.Clients > 0 {
		cfg.Clients = sc.Clients
	}
	if sc.Keys > 0 {
		cfg.Keys = sc.Keys
	}
	if sc.Via != "" {
		cfg.Via = sc.Via
	}
	cfg = cfg.withDefaults()
	res := &Result{Scenario: sc.Name, Summary: sc.Summary, Target: t.Name(), Control: sc.Control(), Counts: map[string]int{}}
	started := time.Now()
	defer func() { res.Elapsed = time.Since(started) }()
	for _, k := range sc.Needs {
		if !t.Supports(k) {
			res.Skipped = fmt.Sprintf("the %s target cannot inject %s faults", t.Name(), k)
			return res
		}
	}
	readyCtx, cancel := context.WithTimeout(ctx, cfg.Client.MaxTTL+30*time.Second)
	err := t.Ready(readyCtx)
	cancel()
	if err != nil {
		res.Error = "target not ready before the drill: " + err.Error()
		return res
	}
	cfg.Logf("scenario %s: %s", sc.Name, sc.Summary)
	d, err := newDrill(ctx, t, cfg, sc)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer d.close()

	watchStop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		wg.Go(func() { d.watch(watchStop) })
		wg.Go(func() { d.monitor(watchStop) })
		wg.Wait()
		close(watched)
	}()
	var serr error
	if sc.Prepare != nil {
		serr = sc.Prepare(ctx, d)
	}
	switch {
	case serr != nil:
		// The row's arrangement failed: neither workload nor script runs.
	case sc.Workload:
		stop := make(chan struct{})
		wg := d.runWorkload(ctx, stop, true)
		serr = sc.Script(ctx, d)
		if serr == nil && !sc.ScriptEnds {
			serr = d.SleepUntil(ctx, cfg.Duration)
		}
		close(stop)
		wg.Wait()
	default:
		serr = sc.Script(ctx, d)
	}
	if serr != nil {
		res.Error = serr.Error()
	}
	stopWatching := sync.OnceFunc(func() { close(watchStop); <-watched })
	defer stopWatching()
	// Undo whatever the script left broken (after an error, say), then
	// give every key written the time to expire before the sweep.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	healAt := d.rec.Now()
	if err := t.HealAll(hctx); err != nil {
		res.Error = strings.TrimPrefix(res.Error+"; heal: "+err.Error(), "; ")
	}
	if !d.unrecoverable.Load() {
		if err := t.Ready(hctxWithTimeout(hctx, cfg.Client.MaxTTL+5*time.Second)); err != nil {
			d.Notef("target not ready again after the drill: %v", err)
		}
	} else if r, ok := t.(Recoverer); ok {
		if err := r.Recover(hctx, cfg.Client.MaxTTL); err != nil {
			d.Notef("operator recovery failed: %v", err)
		} else {
			d.Notef("operator recovery: redlockd repair-fences raised every fencing counter past the highest; the running daemons count the repaired masters again after their quarantine")
		}
	}
	stopWatching()
	h := d.rec.History(d.res.Writes())
	last := healAt
	for _, op := range h.Ops {
		last = max(last, op.Return)
	}
	_ = d.Sleep(hctx, last+time.Duration(d.maxTTL.Load())+300*time.Millisecond-d.rec.Now())
	res.Leftovers, err = sweep(hctx, t)
	if err != nil {
		d.Notef("sweep incomplete: %v", err)
	}

	cp := CheckParams{
		Masters: t.Masters(), FastSlack: cfg.FastSlack, Leftovers: res.Leftovers,
		HealGrace:   cfg.Client.HealthInterval + cfg.Client.PerMasterTimeout,
		DriftFactor: cfg.Client.DriftFactor,
	}
	if len(d.groups) > 1 {
		cp.Groups, cp.GroupOf = d.groups, d.GroupOf
	}
	res.Violations = Check(h, cp)
	if sc.Verify != nil {
		res.Violations = append(res.Violations, sc.Verify(d, h)...)
	}
	linear, info := Linearize(h, 20*time.Second)
	res.Linear = string(linear)
	if linear == porcupine.Illegal && !slices.ContainsFunc(res.Violations, func(v Violation) bool { return v.Invariant == I2 }) {
		// The direct check misses only concurrent grants with equal fences.
		res.Violations = append(res.Violations, Violation{Invariant: I2, Detail: "porcupine: the grants' fences cannot be ordered to increase strictly in real-time order (equal fences?)"})
	}
	res.lin = info
	res.History = &h
	res.Events = h.Events
	var longest Stall
	for _, st := range h.Unexplained {
		if st.To-st.From >= 250*time.Millisecond {
			res.Stalls = append(res.Stalls, st)
			if st.To-st.From > longest.To-longest.From {
				longest = st
			}
		}
	}
	if n := len(res.Stalls); n > 0 {
		d.Notef("with no fault injected, masters answered PINGs slower than the per-master timeout for 250ms or more %d time(s), the longest %v (master %d at %s): the machine stalled them; I5 counts them as faulty meanwhile (report.json lists them)",
			n, (longest.To - longest.From).Round(time.Millisecond), longest.Master, fmtAt(longest.From))
	}
	summarize(res, d, h, sc)
	if outDir != "" {
		name := "timeline-" + sc.Name + ".html"
		if err := WriteTimeline(filepath.Join(outDir, name), h, info, res.Violations); err != nil {
			d.Notef("timeline not written: %v", err)
		} else {
			res.Timeline = name
		}
	}
	d.notesMu.Lock()
	res.Notes = slices.Clone(d.notes)
	d.notesMu.Unlock()
	cfg.Logf("scenario %s: %s (%d grants, %d failures, violations %v) in %v", sc.Name, res.Verdict(), res.Grants, res.Failures, res.Counts, time.Since(started).Round(100*time.Millisecond))
	return res
}

// Recoverer is a Target that can run the operator's procedure for masters
// that lost their data beyond the daemons' own repair (DockerTarget: the
// deployment outlives the scenario; a ProcessTarget is thrown away).
type Recoverer interface {
	// Recover repairs the masters; maxTTL is the longest TTL any client of
	// the deployment may have granted (the repaired masters stay out that
	// long).
	Recover(ctx context.Context, maxTTL time.Duration) error
}

func hctxWithTimeout(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	context.AfterFunc(c, cancel)
	return c
}

func summarize(res *Result, d *Drill, h History, sc *Scenario) {
	var lat []time.Duration
	for _, op := range h.Ops {
		if op.Kind != "acquire" {
			continue
		}
		lat = append(lat, op.Latency())
		if op.OK {
			res.Grants++
		} else {
			res.Failures++
		}
	}
	slices.Sort(lat)
	res.P50, res.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	for _, w := range h.Writes {
		if !w.OK && w.Reason == "stale" {
			res.StaleRejected++
		}
	}
	res.Faults = describeFaults(h.Events)
	res.Counts = Count(res.Violations)
	allowed := map[string]bool{}
	for _, s := range append(slices.Clone(sc.Must), sc.May...) {
		allowed[s] = true
	}
	for inv, n := range res.Counts {
		if !allowed[inv] {
			res.Unexpected += n
		}
	}
	for _, m := range sc.Must {
		found := res.Counts[m] > 0
		if m == StaleRejected {
			found = res.StaleRejected > 0 && int64(res.StaleRejected) >= d.expectStale.Load()
		}
		if found {
			res.Caught = append(res.Caught, m)
		} else {
			res.Missed = append(res.Missed, m)
		}
	}
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * q)
	return sorted[i]
}

// sweep lists the lock keys left on any master (I4), reading the masters
// directly.
func sweep(ctx context.Context, t Target) ([]Leftover, error) {
	var out []Leftover
	var errs []error
	pattern := t.Space().LockPattern()
	for i, addr := range t.DirectAddrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
		var cursor uint64
		for range 1000 { // a bounded scan: a drill writes a few hundred keys
			keys, next, err := rdb.Scan(ctx, cursor, pattern, 500).Result()
			if err != nil {
				errs = append(errs, fmt.Errorf("master %d (%s): %w", i, addr, err))
				break
			}
			for _, k := range keys {
				pttl, err := rdb.PTTL(ctx, k).Result()
				if err == nil && pttl == -2 { // go-redis passes -2 and -1 through as is
					continue // expired between SCAN and PTTL
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				out = append(out, Leftover{Master: i, Key: k, PTTL: pttl})
			}
			cursor = next
			if cursor == 0 {
				break
			}
		}
		_ = rdb.Close()
	}
	slices.SortFunc(out, func(a, b Leftover) int { return cmp.Or(cmp.Compare(a.Master, b.Master), cmp.Compare(a.Key, b.Key)) })
	return out, errors.Join(errs...)
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// The hand-off cell: one key, a holder and K waiters. Each round the holder
// releases; the time from the release's answer to the next holder's
// acquire answer is the hand-off latency. The new holder holds; the old one
// joins the queue again at its tail, so K waiters wait in every round and
// the expected winner of a round (first come, first served) is known.
//
// Then, with one holder and handoffLoadWaiters waiters on a held key, the
// masters' total_commands_processed is read before and after a window: the
// load the waiters put on the masters, beside the same window with no
// waiter at all (health probes of the library and the daemons).

// handoffWait is how long a redlockd waiter waits (WithWait, wait_ms); a
// waiter whose wait runs out joins again at the tail.
const handoffWait = 30 * time.Second

// slowHandoff: a redlockd hand-off slower than this is reported as it
// happens (the fallback poll is 2 s).
const slowHandoff = 500 * time.Millisecond

// handoffLoadWaiters is how many waiters wait on the held key while the
// masters' commands are counted.
const handoffLoadWaiters = 64

// handoffResult is one target with K waiters.
type handoffResult struct {
	Target  string `json:"target"`
	Waiters int    `json:"waiters"`
	Rounds  int    `json:"rounds"` // hand-offs measured
	// P50MS, P99MS: release answer → next holder's acquire answer. Negative
	// when the next holder's answer arrived before the release's.
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// InOrder counts rounds won by the waiter that had waited longest
	// (meaningful where waiters queue: lib and one daemon).
	InOrder int `json:"in_order"`
	// OutOfOrder lists the rounds (from 1) that another waiter won, and
	// OutOfOrderPos its place in the queue (0: the longest waiting).
	OutOfOrder    []int `json:"out_of_order_rounds,omitempty"`
	OutOfOrderPos []int `json:"out_of_order_positions,omitempty"`
	// OtherReplica counts rounds won by a waiter on the daemon the release
	// did not go through (http2 only).
	OtherReplica int `json:"won_on_other_replica,omitempty"`
	// Requeued counts waits that ended without the lock (a redlockd wait
	// running out, go-redsync's 32 tries running out); the waiter joined
	// again at the tail.
	Requeued int            `json:"requeued"`
	Errors   map[string]int `json:"errors,omitempty"`
	WallS    float64        `json:"wall_s"`
}

// masterLoad is the masters' command rate over a window.
type masterLoad struct {
	Target  string  `json:"target"` // "idle": no waiter, no holder
	Waiters int     `json:"waiters"`
	WindowS float64 `json:"window_s"`
	// PerMasterPerS is the sum of total_commands_processed deltas over the
	// five masters ÷ 5 ÷ WindowS.
	PerMasterPerS float64   `json:"commands_per_s_per_master"`
	ByMaster      []float64 `json:"commands_per_s_by_master"`
	// AboveIdlePerS is PerMasterPerS minus the idle window's.
	AboveIdlePerS float64 `json:"above_idle_per_s"`
}

// handoffTarget takes the lock on one key for one waiter: acquire waits
// (or, for go-redsync, polls) for it. waiting says how many waiters are
// queued (ok false: unknown, go-redsync). replica says which daemon waiter
// i uses.
type handoffTarget struct {
	name    string
	acquire func(ctx context.Context, key string, waiter int, wait bool) (release func(context.Context) error, err error)
	waiting func(ctx context.Context) (n int, ok bool)
	replica func(waiter int) int
	// settle is the pause between the queue reaching K and the release: a
	// daemon counts a waiter from its first attempt, before it queues.
	settle time.Duration
}

func libHandoff(c *redlock.Client) handoffTarget {
	return handoffTarget{
		name: "lib",
		acquire: func(ctx context.Context, key string, _ int, wait bool) (func(context.Context) error, error) {
			var opts []redlock.AcquireOption
			if wait {
				opts = append(opts, redlock.WithWait(handoffWait))
			}
			l, err := c.Acquire(ctx, key, lockTTL, opts...)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		waiting: func(context.Context) (int, bool) { return c.Waiting(), true },
		replica: func(int) int { return 0 },
		settle:  time.Millisecond,
	}
}

// httpHandoff: waiters spread over the daemons (waiter i on daemon i mod
// n); every release goes through the first daemon.
func httpHandoff(name string, ds []*daemonProc, client *http.Client) handoffTarget {
	ttlS := strconv.FormatInt(int64(lockTTL/time.Second), 10)
	waitMS := strconv.FormatInt(handoffWait.Milliseconds(), 10)
	return handoffTarget{
		name: name,
		acquire: func(ctx context.Context, key string, waiter int, wait bool) (func(context.Context) error, error) {
			d := ds[waiter%len(ds)]
			body := `{"key":"` + key + `","action":"acquire","ttl":` + ttlS
			if wait {
				body += `,"wait_ms":` + waitMS
			}
			lr, err := lockCall(ctx, client, d, body+"}")
			if err != nil {
				return nil, err
			}
			if !lr.Data.Acquired {
				return nil, errNotAcquired
			}
			rel := `{"key":"` + key + `","action":"release","token":"` + lr.Data.Token + `"}`
			return func(ctx context.Context) error {
				lr, err := lockCall(ctx, client, ds[0], rel)
				if err == nil && !lr.Data.Released {
					err = errors.New("http 200 released:false")
				}
				return err
			}, nil
		},
		waiting: func(ctx context.Context) (int, bool) {
			n := 0
			for _, d := range ds {
				w, err := d.waiting(ctx, client)
				if err != nil {
					return -1, true
				}
				n += w
			}
			return n, true
		},
		replica: func(waiter int) int { return waiter % len(ds) },
		settle:  10 * time.Millisecond,
	}
}

// redsyncHandoff: go-redsync with its default retry settings (32 tries,
// 50–250 ms apart); expiry as every other target's TTL.
func redsyncHandoff(rdbs []*redis.Client) handoffTarget {
	pools := make([]rsredis.Pool, len(rdbs))
	for i, r := range rdbs {
		pools[i] = goredis.NewPool(r)
	}
	rs := redsync.New(pools...)
	return handoffTarget{
		name: "redsync",
		acquire: func(ctx context.Context, key string, _ int, wait bool) (func(context.Context) error, error) {
			opts := []redsync.Option{redsync.WithExpiry(lockTTL)}
			if !wait {
				opts = append(opts, redsync.WithTries(1))
			}
			m := rs.NewMutex(key, opts...)
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if !ok && err == nil {
					err = errors.New("redsync: unlock reported not released")
				}
				return err
			}, nil
		},
		waiting: func(context.Context) (int, bool) { return 0, false },
		replica: func(int) int { return 0 },
		settle:  20 * time.Millisecond,
	}
}

var errNotAcquired = errors.New("http 200 acquired:false")

func lockCall(ctx context.Context, client *http.Client, d *daemonProc, body string) (*lockResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/lock", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", d.apiKey)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var lr lockResponse
	if err := json.NewDecoder(resp.Body).Decode(&lr); err != nil {
		return nil, fmt.Errorf("http %d: bad JSON: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK || lr.Ret != "ok" {
		return nil, fmt.Errorf("http %d %s", resp.StatusCode, lr.Code)
	}
	return &lr, nil
}

// waiting reads how many acquires wait in the daemon (/readyz "waiting").
func (d *daemonProc) waiting(ctx context.Context, client *http.Client) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/readyz", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Waiting *int `json:"waiting"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if body.Waiting == nil {
		return 0, errors.New("/readyz has no waiting field")
	}
	return *body.Waiting, nil
}

// outcome is one waiter's wait ending.
type outcome struct {
	waiter  int
	at      time.Time
	release func(context.Context) error
	err     error
}

// handoffRun is one target with k waiters on one key.
type handoffRun struct {
	tg      handoffTarget
	k       int
	key     string
	ctx     context.Context
	results chan outcome
	wg      sync.WaitGroup
	queue   []int // waiter ids in the order they joined
	res     handoffResult
}

// join starts waiter id's waiting acquire and, where the target can tell,
// waits until it is queued (and settle more, for a daemon's waiter to
// queue after its first attempt), so that the join order is the queue
// order.
func (h *handoffRun) join(id int, queued int) error {
	h.queue = append(h.queue, id)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		rel, err := h.tg.acquire(h.ctx, h.key, id, true)
		select {
		case h.results <- outcome{waiter: id, at: time.Now(), release: rel, err: err}:
		case <-h.ctx.Done():
			if rel != nil {
				_ = rel(context.Background())
			}
		}
	}()
	if err := h.awaitQueued(queued); err != nil {
		return err
	}
	if _, ok := h.tg.waiting(h.ctx); ok {
		time.Sleep(h.tg.settle)
	}
	return nil
}

// awaitQueued waits until n waiters are queued, handling waits that end
// meanwhile (requeued at the tail); a wait that ends with the lock while it
// is held is an error.
func (h *handoffRun) awaitQueued(n int) error {
	if _, ok := h.tg.waiting(h.ctx); !ok {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case o := <-h.results:
			if err := h.requeue(o); err != nil {
				return err
			}
			continue
		default:
		}
		if w, _ := h.tg.waiting(h.ctx); w == n {
			return nil
		}
		if h.ctx.Err() != nil {
			return h.ctx.Err()
		}
		if time.Now().After(deadline) {
			w, _ := h.tg.waiting(h.ctx)
			return fmt.Errorf("handoff %s k=%d: %d waiters queued after 10s, want %d", h.tg.name, h.k, w, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// requeue handles a wait that ended while the lock was held: the waiter
// joins again at the tail. A wait that ended with the lock (two holders at
// once, or the holder's TTL outrun) is counted as an error.
func (h *handoffRun) requeue(o outcome) error {
	if o.err == nil {
		// Counted, not fatal: a holder's lock can run out on a machine
		// loaded beyond its TTL. The waiter gives it back and queues again.
		h.res.Errors["acquired while the lock was held"]++
		_ = o.release(context.Background())
	} else {
		h.res.Errors[errClass(o.err)]++
	}
	h.res.Requeued++
	h.remove(o.waiter)
	h.queue = append(h.queue, o.waiter)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		rel, err := h.tg.acquire(h.ctx, h.key, o.waiter, true)
		select {
		case h.results <- outcome{waiter: o.waiter, at: time.Now(), release: rel, err: err}:
		case <-h.ctx.Done():
			if rel != nil {
				_ = rel(context.Background())
			}
		}
	}()
	return nil
}

// release gives the lock back, retrying (the compare-and-delete is
// idempotent) while the masters cannot answer, e.g. a 503 from a daemon
// whose per-master timeout a loaded machine outran; a retry that finds the
// lock gone counts as done.
func (h *handoffRun) release(rel func(context.Context) error) error {
	var err error
	for try := range 20 {
		if err = rel(h.ctx); err == nil {
			return nil
		}
		h.res.Errors["release: "+errClass(err)]++
		if try > 0 && isNotHeld(err) {
			return nil
		}
		select {
		case <-h.ctx.Done():
			return h.ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("handoff %s k=%d: release: %w", h.tg.name, h.k, err)
}

func isNotHeld(err error) bool {
	return errors.Is(err, redlock.ErrNotHeld) || strings.Contains(err.Error(), "released:false")
}

func (h *handoffRun) remove(id int) {
	for i, x := range h.queue {
		if x == id {
			h.queue = append(h.queue[:i], h.queue[i+1:]...)
			return
		}
	}
}

// runHandoff measures up to rounds hand-offs of tg with k waiters, for at
// most limit.
func runHandoff(ctx context.Context, tg handoffTarget, k, rounds int, limit time.Duration) (handoffResult, error) {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	h := &handoffRun{
		tg: tg, k: k, ctx: ctx,
		key:     "bench:handoff:" + tg.name + ":" + strconv.FormatUint(rand.Uint64(), 36),
		results: make(chan outcome, k+1),
		res:     handoffResult{Target: tg.name, Waiters: k, Errors: map[string]int{}},
	}
	defer func() {
		cancel()
		h.wg.Wait()
	}()
	release, err := tg.acquire(ctx, h.key, 0, false)
	if err != nil {
		return h.res, fmt.Errorf("handoff %s: first acquire: %w", tg.name, err)
	}
	holder := 0
	for i := 1; i <= k; i++ {
		if err := h.join(i, i); err != nil {
			return h.res, err
		}
	}
	var lat []time.Duration
	for len(lat) < rounds && time.Since(start) < limit {
		if err := h.awaitQueued(k); err != nil {
			return h.res, err
		}
		time.Sleep(tg.settle)
		if err := h.release(release); err != nil {
			return h.res, err
		}
		relAt := time.Now()
		var won outcome
		for {
			select {
			case o := <-h.results:
				won = o
			case <-time.After(handoffWait + 5*time.Second):
				return h.res, fmt.Errorf("handoff %s k=%d: no waiter got the released lock in %v", tg.name, k, handoffWait+5*time.Second)
			}
			if won.err == nil {
				break
			}
			// A wait that ran out meanwhile: back to the tail.
			if err := h.requeue(won); err != nil {
				return h.res, err
			}
		}
		lat = append(lat, won.at.Sub(relAt))
		if d := won.at.Sub(relAt); d > slowHandoff && tg.name != "redsync" {
			progress("handoff  k=%-3d %-8s round %d: %v from the release to the next holder", k, tg.name, len(lat), d.Round(time.Millisecond))
		}
		if len(h.queue) > 0 && h.queue[0] == won.waiter {
			h.res.InOrder++
		} else {
			h.res.OutOfOrder = append(h.res.OutOfOrder, len(lat))
			h.res.OutOfOrderPos = append(h.res.OutOfOrderPos, slices.Index(h.queue, won.waiter))
		}
		if tg.replica(won.waiter) != 0 {
			h.res.OtherReplica++
		}
		h.remove(won.waiter)
		release = won.release
		prev := holder
		holder = won.waiter
		// The old holder joins at the tail once the new one holds the lock.
		h.queue = append(h.queue, prev)
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			rel, err := tg.acquire(ctx, h.key, prev, true)
			select {
			case h.results <- outcome{waiter: prev, at: time.Now(), release: rel, err: err}:
			case <-ctx.Done():
				if rel != nil {
					_ = rel(context.Background())
				}
			}
		}()
	}
	_ = release(ctx)
	h.res.Rounds = len(lat)
	h.res.P50MS, h.res.P99MS = pct(lat) // sorts lat
	if len(lat) > 0 {
		h.res.MaxMS = float64(lat[len(lat)-1]) / float64(time.Millisecond)
	}
	h.res.WallS = time.Since(start).Seconds()
	return h.res, nil
}

// measureLoad holds a key with n waiters of tg on it (n = 0, tg zero: no
// holder, no waiter) and returns the masters' command rate over window.
func measureLoad(ctx context.Context, tg handoffTarget, n int, window time.Duration, rdbs []*redis.Client) (masterLoad, error) {
	name := tg.name
	if n == 0 {
		name = "idle"
	}
	ml := masterLoad{Target: name, Waiters: n}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	h := &handoffRun{
		tg: tg, k: n, ctx: ctx,
		key:     "bench:load:" + tg.name + ":" + strconv.FormatUint(rand.Uint64(), 36),
		results: make(chan outcome, n+1),
		res:     handoffResult{Errors: map[string]int{}},
	}
	var release func(context.Context) error
	defer func() {
		cancel()
		wg.Wait()
		h.wg.Wait()
		if release != nil {
			_ = release(context.Background())
		}
	}()
	if n > 0 {
		var err error
		if release, err = tg.acquire(ctx, h.key, 0, false); err != nil {
			return ml, fmt.Errorf("load %s: first acquire: %w", tg.name, err)
		}
		for i := 1; i <= n; i++ {
			if err := h.join(i, i); err != nil {
				return ml, err
			}
		}
		time.Sleep(tg.settle + 100*time.Millisecond)
		// go-redsync's waiters give up after their 32 tries and are
		// started again, as a caller looping on Lock would.
		wg.Go(func() {
			for {
				select {
				case o := <-h.results:
					if err := h.requeue(o); err != nil {
						progress("warning: %v", err)
					}
				case <-ctx.Done():
					return
				}
			}
		})
	}
	before, err := commandCounts(ctx, rdbs)
	if err != nil {
		return ml, err
	}
	t0 := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return ml, ctx.Err()
	}
	after, err := commandCounts(ctx, rdbs)
	if err != nil {
		return ml, err
	}
	secs := time.Since(t0).Seconds()
	ml.WindowS = secs
	var sum int64
	for i := range before {
		d := after[i] - before[i]
		sum += d
		ml.ByMaster = append(ml.ByMaster, float64(d)/secs)
	}
	ml.PerMasterPerS = float64(sum) / float64(len(before)) / secs
	return ml, nil
}

// commandCounts reads total_commands_processed of every master.
func commandCounts(ctx context.Context, rdbs []*redis.Client) ([]int64, error) {
	out := make([]int64, len(rdbs))
	for i, r := range rdbs {
		s, err := r.Info(ctx, "stats").Result()
		if err != nil {
			return nil, fmt.Errorf("INFO stats on master %d: %w", i, err)
		}
		found := false
		for line := range strings.SplitSeq(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				if out[i], err = strconv.ParseInt(v, 10, 64); err != nil {
					return nil, err
				}
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("INFO stats on master %d: no total_commands_processed", i)
		}
	}
	return out, nil
}

// runHandoff runs the hand-off cell for every selected target that has
// one (lib; http, one daemon, and http2, two replicas; redsync), then the
// load windows: idle, then 64 waiters on a held key per target.
func (e *env) runHandoff(ctx context.Context, addrs []string, rep *report) error {
	if len(e.cfg.handoff) == 0 {
		return nil
	}
	var tgs []handoffTarget
	var cleanup []func()
	defer func() {
		for _, f := range slices.Backward(cleanup) {
			f()
		}
	}()
	for _, name := range e.cfg.targets {
		switch name {
		case "lib":
			tgs = append(tgs, libHandoff(e.lib))
		case "http":
			hc := newHTTPClient(max(slices.Max(e.cfg.handoff), handoffLoadWaiters) + 16)
			cleanup = append(cleanup, hc.CloseIdleConnections)
			progress("starting a second daemon replica for the hand-off cell")
			b, err := startDaemon(e.daemonBin, e.dir, "redlockd-b", e.daemon.apiKey, addrs, noLimits...)
			if err != nil {
				return err
			}
			cleanup = append(cleanup, b.stop)
			tgs = append(tgs,
				httpHandoff("http", []*daemonProc{e.daemon}, hc),
				httpHandoff("http2", []*daemonProc{e.daemon, b}, hc))
		case "redsync":
			tgs = append(tgs, redsyncHandoff(e.rdbs))
		}
	}
	if len(tgs) == 0 {
		return nil
	}
	for _, tg := range tgs {
		for _, k := range e.cfg.handoff {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := runHandoff(ctx, tg, k, e.cfg.handoffRounds, e.cfg.handoffLimit)
			if err != nil {
				return err
			}
			progress("handoff  k=%-3d %-8s %4d rounds  p50 %s ms  p99 %s ms  max %s ms  in order %d  other replica %d  requeued %d  (%.1fs)",
				k, tg.name, r.Rounds, fmtMS(r.P50MS), fmtMS(r.P99MS), fmtMS(r.MaxMS), r.InOrder, r.OtherReplica, r.Requeued, r.WallS)
			rep.Handoff = append(rep.Handoff, r)
			waitStrays(time.Second)
		}
	}

	stats := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		stats[i] = redis.NewClient(&redis.Options{Addr: a})
		defer stats[i].Close()
	}
	idle, err := measureLoad(ctx, handoffTarget{}, 0, e.cfg.loadWindow, stats)
	if err != nil {
		return err
	}
	progress("load     idle              %7.1f commands/s per master", idle.PerMasterPerS)
	rep.Load = append(rep.Load, idle)
	for _, tg := range tgs {
		l, err := measureLoad(ctx, tg, handoffLoadWaiters, e.cfg.loadWindow, stats)
		if err != nil {
			return err
		}
		l.AboveIdlePerS = l.PerMasterPerS - idle.PerMasterPerS
		progress("load     %-8s %d waiters %7.1f commands/s per master (%+.1f above idle)", tg.name, l.Waiters, l.PerMasterPerS, l.AboveIdlePerS)
		rep.Load = append(rep.Load, l)
	}
	return nil
}

// oldPollPerWaiter is the measure of redlockd's waiting before
// waiters were woken by releases: about 25 commands per second per waiter
// per master.
const oldPollPerWaiter = 25

// handoffChecks adds the hand-off cell's targets to r.Checks: for
// redlockd's targets, median ≤ 10 ms and p99 ≤ 50 ms; with 64 waiters on a
// held key, at least 10× fewer commands per master than go-redsync's
// polling and than the old polling.
func (r *report) handoffChecks() {
	for _, h := range r.Handoff {
		if h.Target == "redsync" || h.Rounds == 0 {
			continue
		}
		r.Checks = append(r.Checks,
			check{fmt.Sprintf("hand-off, %s, %d waiter(s): median ≤ 10 ms", handoffTitles[h.Target], h.Waiters), fmtMS(h.P50MS) + " ms", h.P50MS <= 10},
			check{fmt.Sprintf("hand-off, %s, %d waiter(s): p99 ≤ 50 ms (%d rounds)", handoffTitles[h.Target], h.Waiters, h.Rounds), fmtMS(h.P99MS) + " ms", h.P99MS <= 50})
	}
	var rs *masterLoad
	for i := range r.Load {
		if r.Load[i].Target == "redsync" {
			rs = &r.Load[i]
		}
	}
	for _, l := range r.Load {
		if l.Target == "idle" || l.Target == "redsync" || l.PerMasterPerS <= 0 {
			continue
		}
		// Everything counted in the window, the idle health probes
		// included: a bound on what the waiters cost.
		old := float64(oldPollPerWaiter * l.Waiters)
		r.Checks = append(r.Checks, check{
			fmt.Sprintf("%d waiters on a held key, %s: ≥ 10× fewer commands per master than the old polling (%d/s per waiter per master = %.0f/s)", l.Waiters, handoffTitles[l.Target], oldPollPerWaiter, old),
			fmt.Sprintf("%.1f/s (%.0f× fewer)", l.PerMasterPerS, old/l.PerMasterPerS), old/l.PerMasterPerS >= 10})
		if rs != nil && rs.AboveIdlePerS > 0 {
			x := rs.AboveIdlePerS / l.PerMasterPerS
			r.Checks = append(r.Checks, check{
				fmt.Sprintf("%d waiters on a held key, %s: ≥ 10× fewer commands per master than go-redsync's waiters (%.0f/s)", l.Waiters, handoffTitles[l.Target], rs.AboveIdlePerS),
				fmt.Sprintf("%.1f/s (%.0f× fewer)", l.PerMasterPerS, x), x >= 10})
		}
	}
}

var handoffTitles = map[string]string{
	"lib":     "library",
	"http":    "one daemon",
	"http2":   "two daemons",
	"redsync": "go-redsync",
}

func (r *report) handoffMarkdown(p func(string, ...any)) {
	if len(r.Handoff) > 0 {
		p("### hand-off: a holder releases while K waiters wait on the key\n\n")
		p("| target | waiters | rounds | median | p99 | max | first-come first-served | won on replica b | waits requeued |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, h := range r.Handoff {
			order, other := "—", "—"
			if h.Target == "lib" || h.Target == "http" {
				order = fmt.Sprintf("%d/%d", h.InOrder, h.Rounds)
			}
			if h.Target == "http2" {
				other = fmt.Sprintf("%d/%d", h.OtherReplica, h.Rounds)
			}
			p("| %s | %d | %d | %s | %s | %s | %s | %s | %d |\n", handoffTitles[h.Target], h.Waiters, h.Rounds,
				fmtMS(h.P50MS), fmtMS(h.P99MS), fmtMS(h.MaxMS), order, other, h.Requeued)
		}
		var errLines []string
		for _, h := range r.Handoff {
			if len(h.Errors) > 0 {
				errLines = append(errLines, fmt.Sprintf("- %s, %d waiter(s): %s", handoffTitles[h.Target], h.Waiters, fmtErrors(h.Errors)))
			}
		}
		if len(errLines) > 0 {
			p("\nErrors:\n\n%s\n", strings.Join(errLines, "\n"))
		}
		p("\nMilliseconds from the release's answer to the next holder's acquire answer (negative: the acquire answered first). ")
		p("Each round the holder releases (through the first daemon for two daemons, whose waiters alternate between them), ")
		p("the winner holds, the old holder joins again at the tail; the next release comes once K waiters are queued ")
		p("(the library's Waiting, the daemons' /readyz waiting, plus 10 ms for a daemon's waiter to queue after its first attempt; go-redsync: 20 ms). ")
		p("redlockd waiters wait with %v; go-redsync's use its defaults (32 tries 50–250 ms apart) and start again when they run out (requeued).\n\n", handoffWait)
	}
	if len(r.Load) > 0 {
		p("### masters' load while waiters wait on a held key\n\n")
		p("| target | waiters | commands/s per master | above idle | window |\n|---|---:|---:|---:|---:|\n")
		for _, l := range r.Load {
			name := handoffTitles[l.Target]
			if l.Target == "idle" {
				name = "idle (no holder, no waiter)"
			}
			p("| %s | %d | %.1f | %+.1f | %.1f s |\n", name, l.Waiters, l.PerMasterPerS, l.AboveIdlePerS, l.WindowS)
		}
		p("\nSum of the five masters' `INFO stats` total_commands_processed deltas ÷ 5 ÷ window; ")
		p("idle counts the health probes of the library and both daemons (the http target's and the hand-off's second replica; the httpq daemon, whose account's held-lock sync would add about 130/s, is stopped after its cells), which run in every window. ")
		p("The issue's figure for redlockd's old polling waiters: about %d commands/s per waiter per master.\n\n", oldPollPerWaiter)
	}
}

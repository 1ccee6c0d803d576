package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/redlock"
)

// Matrix returns the drill matrix, in the order the report
// lists it. Workload rows run M clients × K keys for Config.Duration with
// the fault in force over its middle half. Arranged rows (the negative
// controls and their protected twins) place faults so that the outcome is
// certain, not probable: the same arrangement with the protection on must
// be safe, and with it off the checker must see the violation.
func Matrix() []*Scenario {
	return []*Scenario{
		{
			Name: "baseline", Summary: "no fault: contention only",
			Workload: true, Script: func(context.Context, *Drill) error { return nil },
		},
		window("kill-1", "SIGKILL one master; restart it empty", []int{0}, FaultKill, kill, restart),
		window("kill-2", "SIGKILL two masters; restart them empty", []int{0, 1}, FaultKill, kill, restart),
		window("kill-3", "SIGKILL three masters: no quorum, zero grants, fast errors; restart them empty", []int{0, 1, 2}, FaultKill, kill, restart),
		window("pause-1", "SIGSTOP one master beyond the TTL", []int{1}, FaultPause, pause, resume),
		window("pause-2", "SIGSTOP two masters beyond the TTL", []int{1, 3}, FaultPause, pause, resume),
		window("pause-3", "SIGSTOP three masters: no quorum, zero grants, fast errors", []int{0, 2, 4}, FaultPause, pause, resume),
		window("partition-2", "partition two masters away from every client and daemon", []int{3, 4}, FaultPartition, partition(AllViews, true), partition(AllViews, false)),
		splitView(),
		window("latency-2", "latency of 3× the per-master timeout on two masters", []int{0, 4}, FaultLatency, latency(true), latency(false)),
		resetScenario(),
		restartPivot(true),
		restartPivot(false),
		clockFast(true),
		clockFast(false),
		dataWipe(true),
		dataWipe(false),
		multiKeyRestart(true),
		multiKeyRestart(false),
		clockJumpContender(true),
		clockJumpContender(false),
		clockJumpRestart(true),
		clockJumpRestart(false),
		rollback(true),
		rollback(false),
		pauseHolder(),
		semaphoreKill(),
		semaphoreSplit(true),
		semaphoreSplit(false),
		lockDelay(true),
		lockDelay(false),
		lockDelayRestart(),
		randomMix(),
	}
}

// Find returns the scenarios named (all for "all"), in matrix order.
func Find(names ...string) ([]*Scenario, error) {
	all := Matrix()
	if len(names) == 1 && names[0] == "all" {
		return all, nil
	}
	var out []*Scenario
	for _, n := range names {
		var found *Scenario
		for _, s := range all {
			if s.Name == n {
				found = s
			}
		}
		if found == nil {
			return nil, fmt.Errorf("chaos: no scenario %q (have: %s)", n, scenarioNames(all))
		}
		out = append(out, found)
	}
	return out, nil
}

func scenarioNames(ss []*Scenario) string {
	s := ""
	for i, sc := range ss {
		if i > 0 {
			s += ", "
		}
		s += sc.Name
	}
	return s + ", all"
}

type masterFn = func(ctx context.Context, d *Drill, m int) error

func kill(ctx context.Context, d *Drill, m int) error    { return d.T.Kill(ctx, m) }
func restart(ctx context.Context, d *Drill, m int) error { return d.T.RestartEmpty(ctx, m) }
func pause(ctx context.Context, d *Drill, m int) error   { return d.T.Pause(ctx, m) }
func resume(ctx context.Context, d *Drill, m int) error  { return d.T.Resume(ctx, m) }

func partition(view int, on bool) masterFn {
	return func(ctx context.Context, d *Drill, m int) error { return d.T.Partition(ctx, view, m, on) }
}

func latency(on bool) masterFn {
	return func(ctx context.Context, d *Drill, m int) error {
		var lat time.Duration
		if on {
			lat = 3 * d.Cfg.Client.PerMasterTimeout
		}
		return d.T.Latency(ctx, m, lat)
	}
}

func bind(d *Drill, f masterFn) func(context.Context, int) error {
	return func(ctx context.Context, m int) error { return f(ctx, d, m) }
}

// window is a workload row: the fault is applied to masters at a quarter of
// the duration and healed at three quarters.
func window(name, summary string, masters []int, kind FaultKind, apply, heal masterFn) *Scenario {
	return &Scenario{
		Name: name, Summary: summary, Needs: []FaultKind{kind}, Workload: true,
		Script: func(ctx context.Context, d *Drill) error {
			if err := d.SleepUntil(ctx, d.Cfg.Duration/4); err != nil {
				return err
			}
			what := fmt.Sprintf("%s masters %v", kind, masters)
			if err := d.Fault(ctx, what, AllViews, masters, bind(d, apply)); err != nil {
				return err
			}
			if err := d.SleepUntil(ctx, 3*d.Cfg.Duration/4); err != nil {
				return err
			}
			return d.Heal(ctx, "undo "+what, AllViews, masters, bind(d, heal))
		},
	}
}

// splitView: view a (daemon a, library clients a) reaches masters 0–2
// only, view b reaches 2–4 only: both keep a quorum, which share master 2.
func splitView() *Scenario {
	return &Scenario{
		Name: "split-view", Summary: "daemon a reaches masters 0-2 only, daemon b 2-4 only (two quorums sharing master 2)",
		Needs: []FaultKind{FaultViewPartition}, Workload: true,
		Script: func(ctx context.Context, d *Drill) error {
			if err := d.SleepUntil(ctx, d.Cfg.Duration/4); err != nil {
				return err
			}
			if err := d.Fault(ctx, "view a cut off from masters 3,4", 0, []int{3, 4}, bind(d, partition(0, true))); err != nil {
				return err
			}
			if err := d.Fault(ctx, "view b cut off from masters 0,1", 1, []int{0, 1}, bind(d, partition(1, true))); err != nil {
				return err
			}
			for _, dm := range d.T.Daemons() {
				if dm.View >= d.T.Views() {
					d.Notef("on the %s target only the library views are split: daemon %s reaches the masters on a network of its own", d.T.Name(), dm.Name)
				}
			}
			if err := d.SleepUntil(ctx, 3*d.Cfg.Duration/4); err != nil {
				return err
			}
			return errors.Join(
				d.Heal(ctx, "view a reaches masters 3,4 again", 0, []int{3, 4}, bind(d, partition(0, false))),
				d.Heal(ctx, "view b reaches masters 0,1 again", 1, []int{0, 1}, bind(d, partition(1, false))),
			)
		},
	}
}

// resetScenario resets every connection to two masters every 100ms.
func resetScenario() *Scenario {
	masters := []int{2, 3}
	return &Scenario{
		Name: "reset-2", Summary: "reset every connection to two masters, ten times a second",
		Needs: []FaultKind{FaultReset}, Workload: true,
		Script: func(ctx context.Context, d *Drill) error {
			if err := d.SleepUntil(ctx, d.Cfg.Duration/4); err != nil {
				return err
			}
			at := d.rec.Now()
			for d.rec.Now() < 3*d.Cfg.Duration/4 {
				if err := eachMaster(ctx, masters, func(ctx context.Context, m int) error { return d.T.Reset(ctx, m) }); err != nil {
					return err
				}
				if err := d.Sleep(ctx, 100*time.Millisecond); err != nil {
					return err
				}
			}
			d.rec.Faulted(fmt.Sprintf("reset masters %v every 100ms", masters), AllViews, at, at, masters...)
			return d.Heal(ctx, "stop resetting", AllViews, masters, nil)
		},
	}
}

// arrangeHolder makes client A (library, view a) hold key on masters 0, 1
// and 2 only: view a is cut off from masters 3 and 4 while A acquires, so
// master 2 is pivotal — with 3 and 4 free, master 2 decides whether
// another client can win a quorum while A's lock is valid. A writes
// "begin" to the Resource at once. granted, when not nil, runs as soon as
// A holds the lock, before view a reaches masters 3 and 4 again.
func arrangeHolder(ctx context.Context, d *Drill, key string, ttl time.Duration, granted func() error) (grant, int, error) {
	if err := d.Fault(ctx, "view a cut off from masters 3,4 while A acquires", 0, []int{3, 4}, bind(d, partition(0, true))); err != nil {
		return grant{}, 0, err
	}
	// Retrying for a while: with two masters cut off, one slow answer
	// from 0, 1 or 2 on a loaded machine fails an attempt.
	g, id, err := d.Acquire(ctx, d.Lib(0), 0, key, ttl, 2*time.Second)
	if err != nil {
		return grant{}, 0, fmt.Errorf("arrangement failed: A could not acquire %s on masters 0-2: %w", key, err)
	}
	if granted != nil {
		if err := granted(); err != nil {
			return grant{}, 0, err
		}
	}
	d.Write(key, g, 0, id, "begin")
	if err := d.Lift(ctx, "view a reaches masters 3,4 again", 0, []int{3, 4}, bind(d, partition(0, false))); err != nil {
		return grant{}, 0, err
	}
	return g, id, nil
}

// contend makes client B (library, view b) try key with single attempts
// until A's validity has ended (plus a margin); a grant makes B write,
// commit and release. Meanwhile A, a careful holder, commits just before
// its validity ends and lets its lock expire. Whether B was granted while
// A's lease ran is for the checker (I1) to say.
func contend(ctx context.Context, d *Drill, key string, ttl time.Duration, a grant, aID int) error {
	holder := make(chan error, 1)
	go func() {
		err := d.Sleep(ctx, time.Until(a.validUntil)-50*time.Millisecond)
		if err == nil && time.Now().Before(a.validUntil) {
			d.Write(key, a, 0, aID, "commit")
		}
		holder <- err
	}()
	var err error
	for time.Now().Before(a.validUntil.Add(100 * time.Millisecond)) {
		g, id, aerr := d.Acquire(ctx, d.Lib(1), 1, key, ttl, 0)
		if aerr == nil {
			d.Write(key, g, 1, id, "begin")
			d.Write(key, g, 1, id, "commit")
			_ = d.Release(ctx, d.Lib(1), 1, key, g, id)
			break
		}
		if err = d.Sleep(ctx, 10*time.Millisecond); err != nil {
			break
		}
	}
	return errors.Join(err, <-holder)
}

// restartPivot: A holds the lock on masters 0–2; master 2 restarts empty;
// B then tries the key on masters 2–4. With the delayed-restart quarantine
// master 2's vote does not count and B is refused until A's lock is over;
// without it, B wins 2, 3, 4 while A's lock is valid (I1), and the fence,
// whose counter master 2 lost, may go backwards (I2).
func restartPivot(quarantine bool) *Scenario {
	sc := &Scenario{
		Name:    "restart-empty",
		Summary: "master 2, pivotal for a held lock, restarts empty; quarantine on: B is refused",
		Needs:   []FaultKind{FaultRestart, FaultViewPartition},
	}
	if !quarantine {
		sc.Name = "restart-empty-noquarantine"
		sc.Summary = "negative control: the same with the quarantine and the vote scripts' data-loss check off: B is granted while A holds the lock"
		sc.Options = []redlock.Option{guardOff(guardswitch.Quarantine), guardOff(guardswitch.DataLossCheck), guardOff(guardswitch.GrantedLock)}
		sc.Must, sc.May = []string{I1}, []string{I2}
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		const key = "pivot"
		// As long as the clients allow (a container is replaced in a
		// second or two on the compose target, and B must see it).
		ttl := d.Cfg.Client.MaxTTL
		a, id, err := arrangeHolder(ctx, d, key, ttl, nil)
		if err != nil {
			return err
		}
		oldRun := d.Client(1).Masters()[2].RunID
		if err := d.Fault(ctx, "master 2 restarts empty", AllViews, []int{2}, bind(d, restart)); err != nil {
			return err
		}
		if !time.Now().Before(a.validUntil) {
			return fmt.Errorf("arrangement failed: master 2 took longer to restart than A's lease (%v) lasted", ttl)
		}
		// B learns of the restart from a health probe or, at the latest,
		// from the run_id check on its new connection to master 2, which
		// runs before that connection's first vote counts. Give the probe
		// a moment, not more: A's lease is running.
		for wait := time.Now().Add(1500 * time.Millisecond); d.Client(1).Masters()[2].RunID == oldRun; {
			if time.Now().After(wait) || time.Now().After(a.validUntil.Add(-time.Second)) {
				d.Notef("client B had not probed master 2 since its restart when it tried; its new connection checks the run_id")
				break
			}
			if err := d.Sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
		}
		if err := contend(ctx, d, key, ttl, a, id); err != nil {
			return err
		}
		return d.Heal(ctx, "master 2 trusted again", AllViews, []int{2}, nil)
	}
	return sc
}

// clockFast: master 2's clock runs 10% fast from just after A acquires,
// so A's key on master 2 expires after about TTL/1.1 of real time, before
// A's validity (TTL − 1% − 2ms) ends. (Started just before A acquired, as
// it once was, the fault raced A: on a loaded machine A's first attempt
// failed, and by its retry the guard had — rightly — quarantined master 2,
// so the arrangement failed.) With the clock guard the drift is seen
// within a second and master 2 is quarantined, so B is refused; without
// it B wins 2, 3, 4 while A's lock is valid (I1).
func clockFast(guard bool) *Scenario {
	sc := &Scenario{
		Name:    "clock-fast",
		Summary: "master 2's clock runs at rate 1.1 (drift factor 0.01); clock guard on: B is refused",
		Needs:   []FaultKind{FaultClock, FaultViewPartition},
	}
	if !guard {
		sc.Name = "clock-fast-noguard"
		sc.Summary = "negative control: the same with the clock guard and the data-loss check off (either stops master 2 alone): B is granted while A holds the lock"
		sc.Options = []redlock.Option{guardOff(guardswitch.ClockGuard), guardOff(guardswitch.DataLossCheck), guardOff(guardswitch.GrantedLock)}
		sc.Must = []string{I1}
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		const key = "clock"
		ttl := 4 * time.Second // keys on master 2 die 364ms early; the guard needs <1s to see it
		// The guard judges drift over at least 3s of samples: let it
		// gather two seconds of the true rate first, so that it sees the
		// fast clock one or two seconds after the change (at a 150ms or
		// a 1s health interval), well before A's key on master 2 expires
		// about 3.6s after it.
		if err := d.SleepUntil(ctx, 2*time.Second); err != nil {
			return err
		}
		rate := func() error {
			// Not an availability fault (master 2 answers and votes), so
			// it is marked with no master: I5 and I6 do not count it.
			return d.Mark(ctx, "master 2's clock runs at rate 1.1", func(ctx context.Context) error { return d.T.ClockRate(ctx, 2, 1.1) })
		}
		a, id, err := arrangeHolder(ctx, d, key, ttl, rate)
		if err != nil {
			return err
		}
		if err := contend(ctx, d, key, ttl, a, id); err != nil {
			return err
		}
		// The guard sees a fast clock as drift (samples close together) or
		// as a forward jump (a 1s health interval: 100ms per sample).
		if st := d.Client(1).Masters()[2]; guard && !st.Drifting && !strings.Contains(st.QuarantineReason, "clock") {
			return fmt.Errorf("arrangement failed: client B's clock guard never flagged master 2 (state %s, drift ratio %.4f)", st.State, st.DriftRatio)
		} else if guard {
			d.Notef("client B's clock guard: master 2 %s (%s)", st.State, st.QuarantineReason)
		}
		// Back to the real rate (the skew stays: a real clock that ran
		// fast does not step back either).
		if err := d.Unmark(ctx, "master 2's clock at rate 1 again", func(ctx context.Context) error { return d.T.ClockRate(ctx, 2, 1) }); err != nil {
			return err
		}
		// Quarantined for drift (with the guard): wait till it counts.
		return d.settle(ctx, AllViews, []int{2})
	}
	return sc
}

// pauseHolder: the holder is frozen past its TTL in the middle of its
// critical section, and writes when it wakes up; the fence must make the
// Resource reject that write. Two holders: one over HTTP whose daemon's
// answer (the grant) is frozen on its way, as if the daemon had been
// paused right after it took the lock; and one library client paused
// (like a GC pause) between its grant and its write.
func pauseHolder() *Scenario {
	return &Scenario{
		Name:    "pause-holder",
		Summary: "the lock holder (daemon a's answer; a library client) is paused past the TTL mid-critical-section: the fence rejects its stale write",
		Must:    []string{StaleRejected},
		Script: func(ctx context.Context, d *Drill) error {
			ttl := d.Cfg.TTL
			var errs []error
			if h := d.HTTP(0); h != nil {
				errs = append(errs, pauseHTTPHolder(ctx, d, h, ttl))
			}
			errs = append(errs, pauseLibHolder(ctx, d, ttl))
			return errors.Join(errs...)
		},
	}
}

func pauseHTTPHolder(ctx context.Context, d *Drill, h locker, ttl time.Duration) error {
	const key = "holder-http"
	front := d.Front(0)
	front.HoldReplies(true)
	defer front.HoldReplies(false)
	type result struct {
		g   grant
		id  int
		err error
	}
	got := make(chan result, 1)
	go func() {
		g, id, err := d.Acquire(ctx, h, 0, key, ttl, 0)
		got <- result{g, id, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for front.Held() == 0 {
		if time.Now().After(deadline) {
			front.HoldReplies(false)
			<-got
			return errors.New("arrangement failed: daemon a did not answer the acquire")
		}
		if err := d.Sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	at := d.rec.Now()
	d.rec.Faulted("daemon a's grant frozen on its way (daemon paused after taking the lock)", AllViews, at, at)
	if err := d.Sleep(ctx, ttl+300*time.Millisecond); err != nil {
		return err
	}
	b := d.HTTP(1)
	if b == nil {
		b = d.Lib(1)
	}
	g2, id2, err := d.Acquire(ctx, b, 1, key, ttl, 2*ttl)
	if err != nil {
		return fmt.Errorf("arrangement failed: B could not acquire %s after A's lease ran out: %w", key, err)
	}
	d.Write(key, g2, 1, id2, "begin")
	d.Write(key, g2, 1, id2, "commit")
	_ = d.Release(ctx, b, 1, key, g2, id2)
	front.HoldReplies(false)
	d.rec.Healing("daemon a's answer released", AllViews, d.rec.Now(), d.rec.Now())
	r := <-got
	if r.err != nil {
		return fmt.Errorf("arrangement failed: A's acquire failed: %w", r.err)
	}
	d.Excuse(r.id)
	d.ExpectStaleRejections(1)
	// A naive holder: it does not compare its lease with its clock.
	if d.Write(key, r.g, 0, r.id, "begin") {
		d.Write(key, r.g, 0, r.id, "commit")
	}
	_ = d.Release(ctx, h, 0, key, r.g, r.id)
	return nil
}

func pauseLibHolder(ctx context.Context, d *Drill, ttl time.Duration) error {
	const key = "holder-lib"
	a, id, err := d.Acquire(ctx, d.Lib(0), 2, key, ttl, 0)
	if err != nil {
		return fmt.Errorf("arrangement failed: A could not acquire %s: %w", key, err)
	}
	at := d.rec.Now()
	d.rec.Faulted("library holder paused past its TTL between grant and write", AllViews, at, at)
	if err := d.Sleep(ctx, ttl+300*time.Millisecond); err != nil {
		return err
	}
	g2, id2, err := d.Acquire(ctx, d.Lib(1), 3, key, ttl, 2*ttl)
	if err != nil {
		return fmt.Errorf("arrangement failed: B could not acquire %s after A's lease ran out: %w", key, err)
	}
	d.Write(key, g2, 3, id2, "begin")
	d.Write(key, g2, 3, id2, "commit")
	_ = d.Release(ctx, d.Lib(1), 3, key, g2, id2)
	d.rec.Healing("library holder resumes", AllViews, d.rec.Now(), d.rec.Now())
	d.ExpectStaleRejections(1)
	if d.Write(key, a, 2, id, "begin") {
		d.Write(key, a, 2, id, "commit")
	}
	_ = d.Release(ctx, d.Lib(0), 2, key, a, id)
	return nil
}

// randomMix injects random faults (kill, pause, latency, blackhole,
// restart-empty) on random masters over the middle half of the duration,
// never more than N − quorum masters at once (a restarted master counts
// until it is trusted again), and heals them. Clock jumps are left out: a
// jump breaks Redlock's bounded-drift assumption, and the guard only
// quarantines the master after it has seen the jump, so a violation in
// between would be real but outside the guarantee.
func randomMix() *Scenario {
	return &Scenario{
		Name: "random-mix", Summary: "random faults, at most two masters at a time",
		Workload: true,
		Script: func(ctx context.Context, d *Drill) error {
			if err := d.SleepUntil(ctx, d.Cfg.Duration/4); err != nil {
				return err
			}
			tolerated := d.T.Masters() - (d.T.Masters()/2 + 1)
			type broken struct {
				what string
				heal masterFn
			}
			faulty := map[int]broken{}
			kinds := []struct {
				kind  FaultKind
				apply masterFn
				heal  masterFn
			}{
				{FaultKill, kill, restart},
				{FaultPause, pause, resume},
				{FaultLatency, latency(true), latency(false)},
				{FaultBlackhole, blackhole(true), blackhole(false)},
				{FaultRestart, restart, nil},
			}
			step := max(d.Cfg.Duration/12, 200*time.Millisecond)
			for d.rec.Now() < 3*d.Cfg.Duration/4 {
				if n := d.Script.IntN(3); len(faulty) > 0 && (len(faulty) >= tolerated || n == 0) {
					for _, m := range slices.Sorted(maps.Keys(faulty)) { // heal the lowest
						b := faulty[m]
						var fn func(context.Context, int) error
						if b.heal != nil {
							fn = bind(d, b.heal)
						}
						if err := d.Heal(ctx, "undo "+b.what, AllViews, []int{m}, fn); err != nil {
							return err
						}
						delete(faulty, m)
						break
					}
				} else {
					m := d.Script.IntN(d.T.Masters())
					k := kinds[d.Script.IntN(len(kinds))]
					if _, ok := faulty[m]; ok || !d.T.Supports(k.kind) {
						continue
					}
					what := fmt.Sprintf("%s master %d", k.kind, m)
					if err := d.Fault(ctx, what, AllViews, []int{m}, bind(d, k.apply)); err != nil {
						return err
					}
					faulty[m] = broken{what, k.heal}
				}
				if err := d.Sleep(ctx, step); err != nil {
					return err
				}
			}
			for _, m := range slices.Sorted(maps.Keys(faulty)) {
				b := faulty[m]
				var fn func(context.Context, int) error
				if b.heal != nil {
					fn = bind(d, b.heal)
				}
				if err := d.Heal(ctx, "undo "+b.what, AllViews, []int{m}, fn); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func blackhole(on bool) masterFn {
	return func(ctx context.Context, d *Drill, m int) error { return d.T.Blackhole(ctx, m, on) }
}

// guardOff returns the redlock.Option that turns protection g off, for a
// negative control (internal/guardswitch: no user of redlock can import it).
func guardOff(g guardswitch.Guard) redlock.Option {
	return guardswitch.Disable(g).(redlock.Option)
}

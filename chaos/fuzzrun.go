package chaos

// The fault fuzzer's runner: a FuzzSchedule executed step by step against
// a ProcessTarget while a light contention workload runs, with the drill's
// recorder and checker (Run) watching the history.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

// FuzzControl is a negative control of the fuzzer: protections turned off
// in the drill's library clients (the daemons keep every one), as the
// matrix row named Row turns them off. A control turns off the guard it is
// named for and every other guard that would also stop the same attack
// (defence in depth: with only one off, another catches it, which is the
// point of having several).
type FuzzControl struct {
	Name   string
	Row    string // the matrix row with the same guards off ("" if none)
	Guards []guardswitch.Guard
	// Options are added to the drill's library clients with the guards.
	Options []redlock.Option
	// Via is how the workload takes locks ("": mixed, as with every guard
	// on; see Config.Via).
	Via string
	// Unreached, when not empty, says why the fuzzer does not reach this
	// control's hole: its matrix row arranges what a schedule cannot.
	Unreached string
	// Catches are the faults (and "extend-shorter") whose attacks the
	// guards stop. A finding is the control's only in an episode with one
	// of them and otherwise only fuzzNeutral faults: every control also
	// turns the granted-lock check off, so a lost lock key, say, makes a
	// second holder in every control, and that finding is the granted-lock
	// check's. Nil: any finding (nogranted: every other guard is on).
	Catches []string
}

// fuzzNeutral are the faults that never make a second holder with every
// guard on or off (the masters that suffer them do not answer, or answer
// truthfully): they may share an episode with a control's finding.
var fuzzNeutral = []string{"kill", "pause", "blackhole", "latency", "daemon-restart", "extend-longer", "extend-shorter"}

// Attributes reports whether a finding in an episode with these faults is
// the control's (see Catches).
func (c *FuzzControl) Attributes(faults []string) bool {
	if c == nil || c.Catches == nil {
		return true
	}
	caught := false
	for _, f := range faults {
		switch {
		case slices.Contains(c.Catches, f):
			caught = true
		case !slices.Contains(fuzzNeutral, f):
			return false
		}
	}
	return caught
}

// FuzzControls returns the fuzzer's negative controls.
func FuzzControls() []FuzzControl {
	q, dl, g := guardswitch.Quarantine, guardswitch.DataLossCheck, guardswitch.GrantedLock
	dataLoss := []string{"restart-empty", "restart-rdb", "flushall", "flushdb", "swapdb", "del-marker", "del-horizon", "del-fence", "evict", "resetstat", "rollback", "debug-reload", "replicaof-old"}
	clock := []string{"clock-jump", "clock-rate", opUnwatchedJump}
	return []FuzzControl{
		{Name: "noquarantine", Row: "restart-empty-noquarantine", Guards: []guardswitch.Guard{q, dl, g}, Catches: dataLoss},
		{Name: "noclockguard", Row: "clock-fast-noguard", Guards: []guardswitch.Guard{guardswitch.ClockGuard, dl, g}, Catches: clock},
		// As clock-jump-contender-novoteclock: view b's library client
		// probes once a minute, so only the vote's own clock reading can
		// see a jump between its readings and its vote.
		{Name: "novoteclock", Row: "clock-jump-contender-novoteclock", Guards: []guardswitch.Guard{guardswitch.VoteClock, g}, Options: []redlock.Option{redlock.WithHealthInterval(time.Minute)}, Catches: clock,
			// The daemons keep the vote clock check: their workload
			// traffic would see a jump within milliseconds and write a
			// repair marker that B's votes then carry, racing B's first
			// try (under -race they won it).
			Via: "lib"},
		// The comparison with the other masters' clocks is the last guard
		// only for a client that starts after a jump nobody saw: a client
		// watching across a jump sees it with its probes and writes a
		// repair marker that later clients obey. The unwatched-jump fault
		// (every daemon and library client stopped across the jump) is
		// what reaches it.
		{Name: "noreference", Row: "clock-jump-restart-noreference", Guards: []guardswitch.Guard{guardswitch.ClockReference, g}, Catches: []string{opUnwatchedJump}},
		{Name: "nogranted", Row: "rollback-nogranted", Guards: []guardswitch.Guard{g}},
		{Name: "noextendshortens", Guards: []guardswitch.Guard{guardswitch.ExtendNeverShortens, g}, Catches: []string{"extend-shorter"}},
	}
}

// FindFuzzControl returns the control named name ("" or "none": nil).
func FindFuzzControl(name string) (*FuzzControl, error) {
	if name == "" || name == "none" {
		return nil, nil
	}
	var names []string
	for _, c := range FuzzControls() {
		if c.Name == name {
			return &c, nil
		}
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("chaos: no fuzz control %q (have: none, %s)", name, strings.Join(names, ", "))
}

// FuzzConfig is one fuzz run.
type FuzzConfig struct {
	// Schedule to run; its episodes run in order until Duration is spent.
	Schedule FuzzSchedule
	// Duration is the whole run's budget: the target's start, the
	// episodes, the final heal, the sweep and the check. An episode starts
	// only if the longest so far fits in what is left; one slower than
	// every earlier one (a stalled machine) overruns by the difference.
	Duration time.Duration
	// Control turns guards off (nil: every guard on).
	Control *FuzzControl
	// StopAtFind: end the run after the first episode in whose history
	// the checker finds a safety violation (I1, I2), instead of running
	// the schedule to its end or the budget.
	StopAtFind bool
	// Out, if not empty, receives the timeline.
	Out string
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// FuzzResult is what a fuzz run found.
type FuzzResult struct {
	Seed uint64 `json:"seed"`
	// Found lists the safety violations (I1: a second holder, I2: a fence
	// going backwards or a stale write accepted). Liveness findings (I3,
	// I5, I6) and leftovers (I4) are in Result but are not findings: a
	// fuzzer's clock jumps and data faults make them expected.
	Found []Violation `json:"found,omitempty"`
	// FirstFound is when the first violation came to be (its later grant
	// returned), from the start of RunFuzz: the time to find it, target
	// start included (0 if none).
	FirstFound time.Duration `json:"first_found_ns,omitempty"`
	// Episodes run to their end, of those scheduled.
	Episodes, Scheduled int
	// FoundEpisodes are the episodes whose keys the violations name.
	FoundEpisodes []int `json:"found_episodes,omitempty"`
	// ControlFound: the run's negative control found what it is for (a
	// finding in an episode it Attributes; with every guard on, any).
	// FirstFound is then the first such finding.
	ControlFound bool `json:"control_found"`
	// EpisodeFaults are each episode's faults, in order.
	EpisodeFaults map[int][]string `json:"episode_faults"`
	Faults        int              `json:"faults"`
	// Pairs are the distinct pairs of fault kinds one episode combined.
	Pairs   []string      `json:"pairs"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// EpisodeErrors are episodes cut short (an arrangement that did not
	// happen on a loaded machine): noted, and the run goes on.
	EpisodeErrors []string `json:"episode_errors,omitempty"`
	Result        *Result  `json:"result"`
}

// Summary is the run's closing line: schedules (episodes) per minute,
// faults per minute and the distinct fault pairs covered.
func (r *FuzzResult) Summary() string {
	mins := r.Elapsed.Minutes()
	if mins <= 0 {
		mins = 1
	}
	verdict := "no safety violation"
	if len(r.Found) > 0 {
		verdict = fmt.Sprintf("FOUND %d safety violation(s) in episode(s) %v", len(r.Found), r.FoundEpisodes)
		if r.ControlFound {
			verdict += fmt.Sprintf(", the first %v into the run", r.FirstFound.Round(time.Millisecond))
		} else {
			verdict += ", none of them in an episode the control's guards are about"
		}
	}
	return fmt.Sprintf("fuzz seed %d: %s; %d/%d episodes in %v: %.1f schedules/min, %.1f faults/min, %d distinct fault pairs",
		r.Seed, verdict, r.Episodes, r.Scheduled, r.Elapsed.Round(time.Second), float64(r.Episodes)/mins, float64(r.Faults)/mins, len(r.Pairs))
}

// fuzzOverhead is what a run spends outside its episodes: the target's
// start and the drill's warm-up (a few seconds), and fuzzTail.
const fuzzOverhead = 15 * time.Second

// fuzzTail is kept for the end of a run: the final heal, the sweep (which
// waits out the longest TTL after the last call) and the check.
const fuzzTail = 10 * time.Second

// fuzzEpisodeBudget is the longest an episode may need: a hold and
// contend over a lease of at most max TTL, and a heal waiting out a
// quarantine of max TTL. The shrinker gives each episode that much.
func fuzzEpisodeBudget(maxTTL time.Duration) time.Duration { return 3*maxTTL + 5*time.Second }

// EpisodesFor is how many episodes a run of duration can hold at most
// (at the fastest, about 4s each); the schedule printed up front.
func EpisodesFor(duration time.Duration) int {
	return max(int((duration-fuzzOverhead)/(4*time.Second)), 1)
}

// RunFuzz runs a schedule on a fresh ProcessTarget with the clock shim and
// checks its history. The target is closed (every redis-server stopped)
// before it returns.
func RunFuzz(ctx context.Context, fc FuzzConfig) (_ *FuzzResult, err error) {
	started := time.Now()
	if fc.Logf == nil {
		fc.Logf = func(string, ...any) {}
	}
	masters := max(fc.Schedule.Masters, 3)
	ctx, cancel := context.WithTimeout(ctx, fc.Duration+time.Minute) // a hard stop past the budget
	defer cancel()
	target, err := NewProcessTarget(ProcessOptions{
		Masters: masters, ClockShim: true, Logf: fc.Logf,
		// DEBUG RELOAD is refused unless enabled (Redis 7), and only for
		// loopback connections here.
		RedisArgs: []string{"--enable-debug-command", "local"},
	})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, target.Close()) }()
	// The spare serves full syncs at once (no diskless-sync delay).
	spare, err := redisproc.Start(redisproc.Options{ExtraArgs: []string{"--repl-diskless-sync-delay", "0"}})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, spare.Stop()) }()
	otherCfg := DaemonConfig{
		// A second daemon with other settings: a longer per-master
		// timeout, a larger drift factor, a slower health loop.
		PerMasterTimeout: 250 * time.Millisecond, HealthInterval: 400 * time.Millisecond, DriftFactor: 0.02, MaxTTL: target.opts.Daemon.MaxTTL,
	}
	other, err := startLocalDaemon("c", 1, target.MasterAddrs(1), otherCfg, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var fr *fuzzRunner
	defer func() {
		if fr != nil {
			other = fr.other // unwatchedJump starts it again as a new one
		}
		err = errors.Join(err, other.close())
	}()

	res := &FuzzResult{Seed: fc.Schedule.Seed, Scheduled: len(fc.Schedule.Episodes())}
	cfg := Config{
		Duration: max(fc.Duration-fuzzTail-time.Since(started), 10*time.Second),
		TTL:      time.Second, Clients: 2, Keys: 2, Seed: fc.Schedule.Seed,
		Slack: 2 * time.Second, FastSlack: time.Second, Logf: fc.Logf,
	}
	sc := &Scenario{
		Name:     fmt.Sprintf("fuzz-%d", fc.Schedule.Seed),
		Summary:  "fault fuzzer: a seeded schedule of client operations and faults",
		Workload: true, ScriptEnds: true,
		// Not findings of the fuzzer (see FuzzResult.Found): tolerated so
		// that the run's verdict is about safety.
		May: []string{I3, I4, I5, I6},
	}
	if fc.Control != nil {
		sc.Name += "-" + fc.Control.Name
		for _, g := range fc.Control.Guards {
			sc.Options = append(sc.Options, guardOff(g))
		}
		sc.Options = append(sc.Options, fc.Control.Options...)
		if fc.Control.Via != "" {
			cfg.Via = fc.Control.Via
		}
	}
	fr = &fuzzRunner{fc: fc, t: target, spare: spare, other: other, otherCfg: otherCfg, res: res, pairs: map[string]bool{}}
	res.EpisodeFaults = map[int][]string{}
	sc.Script = fr.script
	r := Run(ctx, target, cfg, sc, fc.Out)
	res.Result = r
	res.Pairs = slices.Sorted(maps.Keys(fr.pairs))
	for _, v := range r.Violations {
		if v.Invariant != I1 && v.Invariant != I2 {
			continue
		}
		res.Found = append(res.Found, v)
		e, ok := episodeOfKey(v.Key)
		if ok && !slices.Contains(res.FoundEpisodes, e) {
			res.FoundEpisodes = append(res.FoundEpisodes, e)
		}
		// A violation on a workload key belongs to no episode: with every
		// guard on it is a finding; a control needs one of its episodes.
		if fc.Control != nil && !(ok && fc.Control.Attributes(res.EpisodeFaults[e])) {
			continue
		}
		res.ControlFound = true
		// The violation exists from when the later of its grants
		// returned (Op IDs count from 1).
		if r.History != nil {
			var at time.Duration
			for _, id := range v.Ops {
				if id >= 1 && id <= len(r.History.Ops) {
					at = max(at, r.History.Ops[id-1].Return)
				}
			}
			if at > 0 {
				at += fr.drillStart.Sub(started)
				if res.FirstFound == 0 || at < res.FirstFound {
					res.FirstFound = at
				}
			}
		}
	}
	sort.Ints(res.FoundEpisodes)
	res.Elapsed = time.Since(started)
	if r.Error != "" {
		return res, fmt.Errorf("chaos: fuzz run: %s", r.Error)
	}
	return res, nil
}

// episodeOfKey returns e for the key "fz<e>" of an episode.
func episodeOfKey(key string) (int, bool) {
	var e int
	if _, err := fmt.Sscanf(key, "fz%d", &e); err != nil {
		return 0, false
	}
	return e, true
}

type fuzzRunner struct {
	fc    FuzzConfig
	t     *ProcessTarget
	spare *redisproc.Server
	other *localDaemon // the second daemon, with otherCfg
	// otherCfg: the second daemon's settings, to start it again.
	otherCfg DaemonConfig
	res      *FuzzResult
	pairs    map[string]bool
	// drillStart is the wall time of the drill clock's zero.
	drillStart time.Time
}

// episode is the state of the episode running.
type episode struct {
	n      int
	key    string
	a      holder
	held   bool
	long   *holder
	faults []string // the fault kinds, in order
	broken map[int][]func(context.Context) error
	flags  map[int]bool // masters faulted, for the heal
}

func (fr *fuzzRunner) script(ctx context.Context, d *Drill) error {
	fr.drillStart = time.Now().Add(-d.rec.Now())
	dm, err := openDirect(ctx, d)
	if err != nil {
		return err
	}
	defer dm.Close()
	d.Logf("%s", fr.fc.Schedule.String())
	// An episode starts only when the longest one so far (at least 6s:
	// about a lease and a quarantine), and a second, fit in what is left
	// of the budget. On a machine that stalls, an episode may still run
	// past it by what it takes longer than the longest before.
	longest := 5 * time.Second
	steps := fr.fc.Schedule.Steps
	for i := 0; i < len(steps); {
		j := i
		for j < len(steps) && steps[j].Episode == steps[i].Episode {
			j++
		}
		if d.rec.Now()+longest+time.Second > d.Cfg.Duration {
			d.Notef("budget spent: %d of %d episodes run", fr.res.Episodes, fr.res.Scheduled)
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		began := d.rec.Now()
		fr.runEpisode(ctx, d, dm, steps[i:j])
		longest = max(longest, d.rec.Now()-began)
		i = j
		if fr.fc.StopAtFind && fr.found(d) {
			break
		}
	}
	return nil
}

// found reports whether the history so far holds a safety violation that
// the run's control attributes to one of its episodes (with every guard
// on: any).
func (fr *fuzzRunner) found(d *Drill) bool {
	h := d.rec.History(d.res.Writes())
	for _, v := range append(checkI1(h, CheckParams{}), checkI2(h, CheckParams{})...) {
		e, ok := episodeOfKey(v.Key)
		if fr.fc.Control == nil || ok && fr.fc.Control.Attributes(fr.res.EpisodeFaults[e]) {
			d.Notef("a safety violation (%s) found: the run stops here", v.Detail)
			return true
		}
	}
	return false
}

func (fr *fuzzRunner) runEpisode(ctx context.Context, d *Drill, dm direct, steps []FuzzStep) {
	ep := &episode{n: steps[0].Episode, key: fmt.Sprintf("fz%d", steps[0].Episode), broken: map[int][]func(context.Context) error{}, flags: map[int]bool{}}
	d.Logf("episode %d: %d steps", ep.n, len(steps))
	var failed error
	for _, st := range steps {
		if st.Op == opHeal {
			break
		}
		if failed == nil {
			if err := fr.step(ctx, d, dm, ep, st); err != nil {
				failed = fmt.Errorf("episode %d, step %s: %w", ep.n, st, err)
			}
		}
	}
	fr.res.EpisodeFaults[ep.n] = ep.faults
	if err := fr.heal(ctx, d, ep); err != nil {
		failed = errors.Join(failed, fmt.Errorf("episode %d heal: %w", ep.n, err))
	}
	if failed != nil {
		fr.res.EpisodeErrors = append(fr.res.EpisodeErrors, failed.Error())
		d.Notef("%v", failed)
		return
	}
	fr.res.Episodes++
	kinds := slices.Compact(slices.Sorted(slices.Values(ep.faults)))
	for i, a := range kinds {
		for _, b := range kinds[i+1:] {
			fr.pairs[a+"+"+b] = true
		}
	}
}

// fault records a fault on master m and remembers how to undo it.
func (fr *fuzzRunner) fault(ctx context.Context, d *Drill, ep *episode, st FuzzStep, fn func(ctx context.Context) error, undo func(context.Context) error) error {
	m := st.Master
	ep.faults = append(ep.faults, st.Op)
	ep.flags[m] = true
	fr.res.Faults++
	if undo != nil {
		ep.broken[m] = append(ep.broken[m], undo)
	}
	return d.Fault(ctx, fmt.Sprintf("e%d %s master %d", ep.n, faultWhat(st), m), AllViews, []int{m}, func(ctx context.Context, _ int) error { return fn(ctx) })
}

func faultWhat(st FuzzStep) string {
	switch {
	case st.D != 0:
		return fmt.Sprintf("%s %v", st.Op, st.D)
	case st.Rate != 0:
		return fmt.Sprintf("%s %g", st.Op, st.Rate)
	}
	return st.Op
}

// fillScript writes n filler keys of size bytes with a TTL, under a
// prefix outside the lock keys, to push a master over its maxmemory.
var fillScript = redis.NewScript(`
local n, size = tonumber(ARGV[1]), tonumber(ARGV[2])
local v = string.rep('x', size)
for i = 1, n do
  local ok = pcall(redis.call, 'SET', KEYS[1] .. i, v, 'PX', 10000)
  if not ok then return i end
end
return n`)

func (fr *fuzzRunner) step(ctx context.Context, d *Drill, dm direct, ep *episode, st FuzzStep) error {
	m := st.Master
	lockKey := d.T.Space().LockKey(ep.key)
	rdb := func() *redis.Client { return dm[m] }
	switch st.Op {
	case opHold:
		on := make([]int, 0, d.T.Masters())
		for i := range d.T.Masters() {
			if !slices.Contains(st.Lost, i) {
				on = append(on, i)
			}
		}
		a, err := placeOnly(ctx, d, dm, ep.key, st.TTL, on)
		if err != nil {
			return err
		}
		ep.a, ep.held = a, true
		return nil
	case opHoldLong:
		h := holder{client: d.NewClientID()}
		var err error
		h.g, h.id, err = d.Acquire(ctx, d.Lib(0), h.client, ep.key+"-long", st.TTL, 2*time.Second)
		if err != nil {
			return fmt.Errorf("arrangement failed: the longer lock: %w", err)
		}
		ep.long = &h
		return settle(ctx, d, ep.key+"-long", time.Now().Add(5*time.Second))
	case opExtend:
		kind := "extend-longer"
		if st.TTL < time.Until(ep.a.g.validUntil) {
			kind = "extend-shorter"
		}
		ep.faults = append(ep.faults, kind)
		g, err := d.Extend(ctx, 0, ep.a.client, ep.key, ep.a.g, ep.a.id, st.TTL)
		ep.a.g = g // a failed extend leaves the validity A was last told
		if err != nil {
			d.Logf("e%d extend to %v failed: %v", ep.n, st.TTL, err)
		}
		return nil
	case opStatus:
		s, err := d.Client(1).Status(ctx, lockKey)
		d.rec.Note(fmt.Sprintf("e%d status of %s through view b: %+v (err %v)", ep.n, ep.key, s, err))
		return nil
	case opCheck:
		return d.Client(1).CheckMasters(ctx)
	case opContend:
		var ls []locker
		for _, v := range st.Via {
			switch v {
			case "lib":
				ls = append(ls, d.Lib(1))
			case "http":
				if h := d.HTTP(1); h != nil {
					ls = append(ls, h)
				}
			case "other":
				ls = append(ls, &httpLocker{name: "http/c", url: fr.other.info.URL, apiKey: fr.other.info.APIKey, ns: d.T.Space().Namespace, pmt: fr.other.info.PerMasterTimeout, hc: d.hc})
			case "fresh":
				// A library client started now, with no earlier reading
				// of any master, and the run's options.
				c, err := newClient(d.T.MasterAddrs(1), d.Cfg.Client.clientOptions(d.T.Space(), d.Sc.Options...))
				if err != nil {
					return err
				}
				defer c.Close()
				ls = append(ls, newLibLocker("lib/b-fresh", c, d.T.Space(), d.Cfg.Client.PerMasterTimeout))
			}
		}
		for _, l := range ls {
			d.setView(l.Name(), 1)
		}
		if !time.Now().Before(ep.a.g.validUntil) {
			d.Logf("e%d: A's lease was over before B could contend", ep.n)
			return nil
		}
		first, err := contendVia(ctx, d, ep.key, d.Cfg.TTL, ep.a, ls...)
		d.Logf("e%d contend: first try: %v", ep.n, first)
		for _, l := range ls {
			if ll, ok := l.(*libLocker); ok {
				for i, st := range ll.client().Masters() {
					if !st.Counting {
						d.Logf("e%d %s: master %d %s (%s)", ep.n, l.Name(), i, st.State, st.QuarantineReason)
					}
				}
			}
		}
		return err
	case opRelease:
		if ep.held {
			ep.held = false
			_ = d.Release(ctx, d.Lib(0), ep.a.client, ep.key, ep.a.g, ep.a.id)
		}
		return nil
	case opSleep:
		return d.Sleep(ctx, st.D)
	case opDaemonRestart:
		ep.faults = append(ep.faults, st.Op)
		fr.res.Faults++
		if err := d.Mark(ctx, fmt.Sprintf("e%d daemons stopped", ep.n), fr.t.StopDaemons); err != nil {
			return errors.Join(err, fr.t.StartDaemons(ctx))
		}
		err := d.Unmark(ctx, fmt.Sprintf("e%d daemons started again", ep.n), fr.t.StartDaemons)
		d.hc.CloseIdleConnections()
		return err
	case opUnwatchedJump:
		return fr.unwatchedJump(ctx, d, dm, ep, st)
	case opSnapshot:
		_, err := copyScript.Run(ctx, rdb(), nil).Int()
		return err
	case opSave:
		return rdb().Save(ctx).Err()
	case opReplicaSnapshot:
		return copyToSpare(ctx, rdb(), fr.spare)
	}
	if !isFault(st.Op) {
		return fmt.Errorf("chaos: unknown fuzz step %q", st.Op)
	}
	if m < 0 || m >= d.T.Masters() {
		return fmt.Errorf("chaos: fuzz step %s: master %d out of range", st, m)
	}
	do := func(fn func(ctx context.Context) error, undo func(context.Context) error) error {
		return fr.fault(ctx, d, ep, st, fn, undo)
	}
	t := fr.t
	switch st.Op {
	case "kill":
		return do(func(ctx context.Context) error { return t.Kill(ctx, m) }, func(ctx context.Context) error { return t.RestartEmpty(ctx, m) })
	case "restart-empty":
		return do(func(ctx context.Context) error { return t.RestartEmpty(ctx, m) }, nil)
	case "pause":
		return do(func(ctx context.Context) error { return t.Pause(ctx, m) }, func(ctx context.Context) error { return t.Resume(ctx, m) })
	case "blackhole":
		return do(func(ctx context.Context) error { return t.Blackhole(ctx, m, true) }, func(ctx context.Context) error { return t.Blackhole(ctx, m, false) })
	case "latency":
		return do(func(ctx context.Context) error { return t.Latency(ctx, m, st.D) }, func(ctx context.Context) error { return t.Latency(ctx, m, 0) })
	case "flushall":
		return do(func(ctx context.Context) error { return rdb().FlushAll(ctx).Err() }, nil)
	case "flushdb":
		return do(func(ctx context.Context) error { return rdb().FlushDB(ctx).Err() }, nil)
	case "swapdb":
		return do(func(ctx context.Context) error {
			if err := dropCopyScript.Run(ctx, rdb(), nil).Err(); err != nil {
				return err
			}
			return rdb().Do(ctx, "SWAPDB", 0, 1).Err()
		}, func(ctx context.Context) error { return dropCopyScript.Run(ctx, rdb(), nil).Err() })
	case "del-marker", "del-horizon", "del-fence":
		key := map[string]string{
			"del-marker":  d.T.Space().MarkerKey(),
			"del-horizon": d.T.Space().MarkerKey() + ":horizon",
			"del-fence":   d.T.Space().FenceKey(),
		}[st.Op]
		return do(func(ctx context.Context) error { return rdb().Del(ctx, key).Err() }, nil)
	case "lose-lock":
		return do(func(ctx context.Context) error { return rdb().Del(ctx, lockKey).Err() }, nil)
	case "evict":
		return do(func(ctx context.Context) error { return evict(ctx, rdb(), ep.n) }, func(ctx context.Context) error {
			return rdb().ConfigSet(ctx, "maxmemory", "0").Err()
		})
	case "resetstat":
		return do(func(ctx context.Context) error { return rdb().ConfigResetStat(ctx).Err() }, nil)
	case "rollback":
		return do(func(ctx context.Context) error {
			if err := rdb().Do(ctx, "SWAPDB", 0, 1).Err(); err != nil {
				return err
			}
			return dropCopyScript.Run(ctx, rdb(), nil).Err()
		}, nil)
	case "debug-reload":
		return do(func(ctx context.Context) error { return rdb().Do(ctx, "DEBUG", "RELOAD", "NOSAVE").Err() }, nil)
	case "restart-rdb":
		return do(func(ctx context.Context) error { return t.RestartFromDisk(ctx, m) }, nil)
	case "replicaof-old":
		return do(func(ctx context.Context) error { return replicaOfOld(ctx, rdb(), fr.spare) }, func(ctx context.Context) error {
			return rdb().ReplicaOf(ctx, "NO", "ONE").Err()
		})
	case "clock-jump":
		return do(func(ctx context.Context) error { return t.ClockJump(ctx, m, st.D) }, func(ctx context.Context) error { return t.clocks[m].Reset() })
	case "clock-rate":
		return do(func(ctx context.Context) error { return t.ClockRate(ctx, m, st.Rate) }, func(ctx context.Context) error { return t.clocks[m].Reset() })
	}
	return fmt.Errorf("chaos: fuzz fault %q has no injector", st.Op)
}

// unwatchedJump jumps master st.Master's wall clock st.D forward while no
// client watches any master: every daemon (a, b and the second daemon c)
// and every library client of the drill stops first, and all start again
// after it, with no earlier reading of the master's clock. A client that
// watched across the jump would see it with its probes and write a repair
// marker that quarantines the master for every later client; here the
// only guard left is the clock reference (each client compares every
// master's clock with the median of the masters'). The master still
// answers and votes; A's key on it expires at once (st.D is past A's TTL).
// The heal steps the clock back.
func (fr *fuzzRunner) unwatchedJump(ctx context.Context, d *Drill, dm direct, ep *episode, st FuzzStep) error {
	m := st.Master
	if m < 0 || m >= d.T.Masters() || st.D <= 0 {
		return fmt.Errorf("chaos: fuzz step %s: needs a master and a forward jump", st)
	}
	ep.faults = append(ep.faults, st.Op)
	ep.flags[m] = true
	fr.res.Faults++
	ep.broken[m] = append(ep.broken[m], func(context.Context) error { return fr.t.clocks[m].Reset() })
	stopAll := func(ctx context.Context) error {
		return errors.Join(fr.t.StopDaemons(ctx), fr.other.close(), d.closeClients(ctx))
	}
	startAll := func(ctx context.Context) error {
		err := fr.t.StartDaemons(ctx)
		if fr.other.stopped() {
			addr := strings.TrimPrefix(fr.other.info.URL, "http://")
			o, oerr := startLocalDaemon(fr.other.info.Name, fr.other.info.View, fr.t.MasterAddrs(fr.other.info.View), fr.otherCfg, addr)
			if oerr == nil {
				fr.other = o
			}
			err = errors.Join(err, oerr)
		}
		return errors.Join(err, d.replaceClients(ctx))
	}
	err := d.Mark(ctx, fmt.Sprintf("e%d every daemon and library client stopped", ep.n), stopAll)
	if err == nil {
		err = d.Fault(ctx, fmt.Sprintf("e%d %s master %d", ep.n, faultWhat(st), m), AllViews, []int{m}, func(ctx context.Context, _ int) error {
			return fr.t.ClockJump(ctx, m, st.D)
		})
	}
	if err == nil {
		err = keyGone(ctx, d, dm, m, ep.key, "after its clock jumped (is the clock shim preloaded?)")
	}
	// Started again even after a failure: the rest of the run needs them.
	err = errors.Join(err, d.Unmark(context.WithoutCancel(ctx), fmt.Sprintf("e%d every daemon and library client started again, with no reading of master %d from before its jump", ep.n, m), startAll))
	d.hc.CloseIdleConnections() // connections to the stopped daemons are gone
	return err
}

// evict sets a maxmemory just above what master rdb uses, with the
// volatile-ttl policy (keys nearest their expiry go first: lock keys), and
// writes filler keys until the master has evicted some.
func evict(ctx context.Context, rdb *redis.Client, e int) error {
	used, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		return err
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(used+64*1024)).Err(); err != nil {
		return err
	}
	// Fillers expire before the run's sweep; they are not lock keys.
	return fillScript.Run(ctx, rdb, []string{fmt.Sprintf("fuzz-fill:%d:", e)}, 64, 4096).Err()
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			var n int64
			_, err := fmt.Sscan(v, &n)
			return n, err
		}
	}
	return 0, errors.New("chaos: INFO memory has no used_memory")
}

// copyToSpare makes the spare server hold a copy of master rdb's data now
// (DUMP and RESTORE of every key, TTLs kept): the old snapshot a
// replicaof-old rolls the master back to.
func copyToSpare(ctx context.Context, rdb *redis.Client, spare *redisproc.Server) error {
	sp := redis.NewClient(&redis.Options{Addr: spare.Addr(), MaxRetries: -1})
	defer sp.Close()
	if err := sp.FlushAll(ctx).Err(); err != nil {
		return err
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		return err
	}
	for _, k := range keys {
		dump, err := rdb.Dump(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		} else if err != nil {
			return err
		}
		pttl := rdb.PTTL(ctx, k).Val()
		if pttl == -2*time.Nanosecond || pttl == -2*time.Millisecond {
			continue
		}
		if pttl < 0 {
			pttl = 0
		}
		if err := sp.RestoreReplace(ctx, k, pttl, dump).Err(); err != nil {
			return err
		}
	}
	return nil
}

// replicaOfOld makes master rdb a replica of the spare until the full sync
// has replaced its data with the spare's old snapshot (bounded), then
// promotes it back with REPLICAOF NO ONE.
func replicaOfOld(ctx context.Context, rdb *redis.Client, spare *redisproc.Server) error {
	host, port, _ := strings.Cut(spare.Addr(), ":")
	if err := rdb.ReplicaOf(ctx, host, port).Err(); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			_ = rdb.ReplicaOf(ctx, "NO", "ONE").Err()
			return fmt.Errorf("replica of the old snapshot did not sync in 5s: %v", errOr(err, "link down"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rdb.ReplicaOf(ctx, "NO", "ONE").Err()
}

// heal ends an episode: A's release, the longer lock's release, every
// fault undone, and a wait (Heal's settle) until every client counts the
// faulted masters again.
func (fr *fuzzRunner) heal(ctx context.Context, d *Drill, ep *episode) error {
	if ep.held {
		_ = d.Release(ctx, d.Lib(0), ep.a.client, ep.key, ep.a.g, ep.a.id)
	}
	if ep.long != nil {
		_ = d.Release(ctx, d.Lib(0), ep.long.client, ep.key+"-long", ep.long.g, ep.long.id)
	}
	if len(ep.flags) == 0 {
		return nil
	}
	masters := slices.Sorted(maps.Keys(ep.flags))
	// The drill's library clients probe every master while the heal
	// waits: a control's clients may probe once a minute only, and the
	// next episode should not start with masters they have not seen back.
	probing, probed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probed)
		for {
			for v := range d.T.Views() {
				_ = d.Client(v).CheckMasters(ctx)
			}
			select {
			case <-probing:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { close(probing); <-probed }()
	var mu sync.Mutex
	var errs []error
	return errors.Join(d.Heal(ctx, fmt.Sprintf("e%d healed", ep.n), AllViews, masters, func(ctx context.Context, m int) error {
		for _, undo := range slices.Backward(ep.broken[m]) {
			if err := undo(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}
		return nil
	}), errors.Join(errs...))
}

// RestartFromDisk restarts master m from what its data dir holds (an RDB
// an earlier SAVE wrote): a restart from an older snapshot, with a new
// run_id.
func (t *ProcessTarget) RestartFromDisk(_ context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	t.remember(fmt.Sprintf("kill %d", m), nil)
	t.remember(fmt.Sprintf("pause %d", m), nil)
	return t.servers[m].RestartKeepingData()
}

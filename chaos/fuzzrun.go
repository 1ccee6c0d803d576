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
	// LoneJump: a forward clock jump on one of A's masters, past A's key
	// there, is seen by one contender alone (fuzzRunner.loneJump): every
	// other client is held off the master from just before the jump until
	// that contender is done.
	LoneJump bool
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
	// Requires are steps that must all be in the episode as well: a
	// masking attack is a combination, the loss and what hides it.
	Requires []string
	// Finds is the invariant the control's finding violates: I1 (a second
	// holder; ""), I2 (a fence issued again, for a fence guard), or I9 (a
	// status that called a held lock free).
	Finds string
}

// fuzzNeutral are the faults that never make a second holder with every
// guard on or off (the masters that suffer them do not answer, or answer
// truthfully): they may share an episode with a control's finding.
var fuzzNeutral = []string{"kill", "pause", "blackhole", "latency", "daemon-restart", "extend-longer", "extend-shorter", opReload}

// Attributes reports whether a finding in an episode with these faults is
// the control's (see Catches).
func (c *FuzzControl) Attributes(faults []string) bool {
	if c == nil {
		return true
	}
	for _, r := range c.Requires {
		if !slices.Contains(faults, r) {
			return false
		}
	}
	if c.Catches == nil {
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
			Via: "lib",
			// Their health probes (every 150–400 ms) and their votes for
			// the drill's HTTP probes still saw the jump 10–150 ms after
			// it and wrote that marker, racing B's tries: under load the
			// marker came first (a `make test` run found nothing in 8
			// episodes). So the jump is B's alone (loneJump).
			LoneJump: true},
		// The comparison with the other masters' clocks is the last guard
		// only for a client that starts after a jump nobody saw: a client
		// watching across a jump sees it with its probes and writes a
		// repair marker that later clients obey. The unwatched-jump fault
		// (every daemon and library client stopped across the jump) is
		// what reaches it.
		{Name: "noreference", Row: "clock-jump-restart-noreference", Guards: []guardswitch.Guard{guardswitch.ClockReference, g}, Catches: []string{opUnwatchedJump}},
		{Name: "nogranted", Row: "rollback-nogranted", Guards: []guardswitch.Guard{g}},
		{Name: "noextendshortens", Guards: []guardswitch.Guard{guardswitch.ExtendNeverShortens, g}, Catches: []string{"extend-shorter"}},
		// The masking attacks: losses that leave the master's own state
		// as it was, so the data-loss check and quarantine (both on here)
		// cannot see them; the granted-lock check is their fix.
		//
		// An extend rolled back: the copy the master goes back to has A's
		// key with its TTL from before the extend, and its lease horizon
		// and fencing counter as they are (a longer lock's horizon
		// dominates the extend's).
		{Name: "nogranted-rolledbackextend", Row: "rollback-nogranted", Guards: []guardswitch.Guard{g}, Catches: []string{"debug-reload", "rollback"}, Requires: []string{"extend-longer"}},
		// An eviction hidden by CONFIG RESETSTAT and traffic that refills
		// total_commands_processed before any client reads the master.
		{Name: "nogranted-resetstat", Guards: []guardswitch.Guard{g}, Catches: []string{opEvictResetStat}},
		// A rollback of A's lock itself, its fencing counter caught up by
		// a peer that never read it higher (another daemon's health loop).
		{Name: "nogranted-catchup", Guards: []guardswitch.Guard{g}, Catches: []string{opRollbackCatchUp}},
		// A rollback of an extend just before the operator's
		// repair-fences, which finds the master intact: its repair
		// marker without a quarantine must not reset what a Client read
		// (adoptRepair), or the horizon going down is never seen. The
		// workload runs through the library clients alone, as for
		// novoteclock: the daemons keep the fix, and their votes reading
		// m's horizon after the extend would see the rollback and write
		// a repair marker with a quarantine that B then obeys.
		{Name: "nogranted-repairfences", Guards: []guardswitch.Guard{g, guardswitch.RepairKeepsBaselines}, Catches: []string{opRollbackRepairFences}, Requires: []string{"extend-longer"}, Via: "lib"},
		// Mixed drift settings: a clock jump larger than A's drift budget
		// and smaller than what a contender with a ten times larger drift
		// factor misses (drift-jump). With the clock bounds shared, the
		// contender judges clocks by A's factor (and A budgets for the
		// loosest client registered before its lock). The clock
		// reference stays on: the contender takes no probe after the
		// jump, and every other client is held off the master, so
		// nothing compares its clock with the others' before the vote.
		// The library's default per-master timeout (50 ms, not the
		// drill's 150 ms) keeps A's allowance at 61 ms, so that the jump
		// fits between the two with room for the contender's grant.
		{Name: "noclockbounds", Guards: []guardswitch.Guard{guardswitch.SharedClockBounds, g}, Options: []redlock.Option{redlock.WithPerMasterTimeout(50 * time.Millisecond)}, Catches: []string{opDriftJump}},
		// A rollback of the one master a contender's votes needed share
		// with the last holder's fence write-back, seen by no running
		// client: its fence must be above the counters of every master
		// that answered, not only of those votes
		// (rollback-unwatched-fence). The finding is a fence issued
		// again (I2), not a second holder: the lock had ended. The
		// granted-lock check stays on: A's lock is released, so no fence
		// record is left to refuse the contender.
		// Status's quorum rule, with the granted records off too (they
		// alone keep status from calling a held lock free where fewer
		// than a quorum of its holders answer): one or two of A's
		// masters killed, paused or cut off leave a quorum answering and
		// fewer than a quorum holding, and status through the library
		// says free while A holds (I9). Only those faults attribute: a
		// lost key would let B in (I1), which is nogranted's.
		{Name: "nostatusquorum", Guards: []guardswitch.Guard{guardswitch.StatusQuorum, g}, Catches: []string{"kill", "pause", "blackhole"}, Finds: I9},
		{Name: "nofenceevery", Guards: []guardswitch.Guard{guardswitch.FenceAboveEveryAnswer}, Catches: []string{opRollbackFence}, Finds: I2},
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
	// the checker finds a safety violation (I1, I2, I7), instead of running
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
	// going backwards or a stale write accepted, I7: more holders of a
	// semaphore than its permits). Liveness findings (I3,
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
		// A control's holder keeps its lock on the masters it was placed
		// on: its extends do not set it again where a fault took it
		// (guardswitch.ExtendRestores), as those extends would not have
		// reached the masters that were off then.
		sc.Options = append(sc.Options, guardOff(guardswitch.ExtendRestores))
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
		if v.Invariant != I1 && v.Invariant != I2 && v.Invariant != I7 && v.Invariant != I9 {
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
	// otherAccount: the last reload gave the daemons a second account.
	otherAccount bool
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
	for _, v := range slices.Concat(checkI1(h, CheckParams{}), checkI2(h, CheckParams{}), checkI7(h, CheckParams{}), checkI9(h, CheckParams{})) {
		e, ok := episodeOfKey(v.Key)
		if fr.fc.Control == nil || ok && fr.fc.Control.Attributes(fr.res.EpisodeFaults[e]) {
			d.Notef("a safety violation (%s) found: the run stops here", v.Detail)
			return true
		}
	}
	return false
}

// statusVia asks each locker in ls (nil ones skipped) for the status of
// the episode's key while A's lease runs, recorded for I9.
func (fr *fuzzRunner) statusVia(ctx context.Context, d *Drill, ep *episode, ls ...locker) {
	for _, l := range ls {
		if l == nil || !time.Now().Before(ep.a.g.validUntil) {
			continue
		}
		held, err := d.Status(ctx, l, d.NewClientID(), ep.key)
		d.Logf("e%d status through %s: held %v (err %v)", ep.n, l.Name(), held, err)
	}
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
	// Placeholders still standing (an episode of holds and extends only)
	// go with the episode.
	if err := ep.a.dropPlaceholders(context.WithoutCancel(ctx)); err != nil {
		failed = errors.Join(failed, fmt.Errorf("episode %d: placeholders: %w", ep.n, err))
	}
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
	switch st.Op {
	case opHold, opHoldLong, opExtend, opStatus:
	default:
		// A's placeholders stay through its extends (holder.dropPlaceholders),
		// and go before any fault or contender.
		if err := ep.a.dropPlaceholders(ctx); err != nil {
			return err
		}
	}
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
		// Judged by I9 (a status never calls a held lock free), through
		// view b's library client and daemon.
		s, err := d.Client(1).Status(ctx, lockKey)
		d.rec.Note(fmt.Sprintf("e%d status of %s through view b: %+v (err %v)", ep.n, ep.key, s, err))
		fr.statusVia(ctx, d, ep, d.Lib(1), d.HTTP(1))
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
				ls = append(ls, newLibLocker("lib/b-fresh", clientPath(c), d.T.Space(), d.Cfg.Client.PerMasterTimeout))
			}
		}
		for _, l := range ls {
			d.setView(l.Name(), 1)
		}
		if !time.Now().Before(ep.a.g.validUntil) {
			d.Logf("e%d: A's lease was over before B could contend", ep.n)
			return nil
		}
		// Each contender's status of the key, judged by I9: it must not
		// call A's lock free while A's lease runs. Beside B's tries, not
		// before them: the controls' seeds time B's tries against A's
		// lease, and after them A's lease is often over.
		var asked sync.WaitGroup
		asked.Go(func() { fr.statusVia(ctx, d, ep, ls...) })
		first, err := contendVia(ctx, d, ep.key, d.Cfg.TTL, ep.a, ls...)
		asked.Wait()
		d.Logf("e%d contend: first try: %v", ep.n, first)
		for _, l := range ls {
			if ll, ok := l.(*libLocker); ok {
				for i, st := range ll.client().Masters() {
					if !st.Counting {
						d.Logf("e%d %s: master %d %s (%s)", ep.n, l.Name(), i, st.State, st.QuarantineReason)
					}
				}
				for kind, n := range ll.client().DataLosses() {
					if n > 0 {
						d.Logf("e%d %s: data losses seen so far: %s %d", ep.n, l.Name(), kind, n)
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
	case opMulti:
		return fr.multiOp(ctx, d, ep, st)
	case opPermits:
		return fr.permitsOp(ctx, d, ep, st)
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
	case opRollbackFence:
		return fr.rollbackFence(ctx, d, dm, ep, st)
	case opReload:
		ep.faults = append(ep.faults, st.Op)
		fr.otherAccount = !fr.otherAccount
		what := "removed"
		if fr.otherAccount {
			what = "added"
		}
		return d.Mark(ctx, fmt.Sprintf("e%d config reload of every daemon: a second account's API key %s", ep.n, what), func(context.Context) error {
			var errs []error
			for _, ld := range append(slices.Clone(fr.t.daemons), fr.other) {
				if !ld.stopped() {
					errs = append(errs, ld.reload(fr.otherAccount))
				}
			}
			return errors.Join(errs...)
		})
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
	case opEvictResetStat:
		return do(func(ctx context.Context) error {
			if err := fr.evictResetStat(ctx, rdb(), m, ep.n); err != nil {
				return err
			}
			return keyGone(ctx, d, dm, m, ep.key, "after its eviction")
		}, func(ctx context.Context) error { return rdb().ConfigSet(ctx, "maxmemory", "0").Err() })
	case "rollback":
		return do(func(ctx context.Context) error {
			if err := rdb().Do(ctx, "SWAPDB", 0, 1).Err(); err != nil {
				return err
			}
			return dropCopyScript.Run(ctx, rdb(), nil).Err()
		}, nil)
	case opRollbackCatchUp:
		return do(func(ctx context.Context) error { return fr.rollbackCatchUp(ctx, d, dm, m) }, nil)
	case opRollbackRepairFences:
		// Every daemon (a, b and c) stops before A's extend and starts
		// again after the repair, knowing nothing of either: they take
		// no control's options, so one that read m after the extend
		// would see the rollback with the fix and write a repair marker
		// with a quarantine that every library client then obeys, and
		// the control would measure the daemons' probes racing the
		// step, not the fix of the library clients.
		if err := d.Mark(ctx, fmt.Sprintf("e%d every daemon stopped", ep.n), func(context.Context) error {
			return errors.Join(fr.t.StopDaemons(ctx), fr.other.close())
		}); err != nil {
			return errors.Join(err, fr.startDaemons(context.WithoutCancel(ctx)))
		}
		err := fr.step(ctx, d, dm, ep, FuzzStep{Episode: ep.n, Op: opExtend, Master: -1, TTL: st.TTL})
		if err == nil {
			err = do(func(ctx context.Context) error { return fr.rollbackRepairFences(ctx, d, dm, m, ep.n) }, nil)
		}
		err = errors.Join(err, d.Unmark(context.WithoutCancel(ctx), fmt.Sprintf("e%d every daemon started again, with no reading of master %d from before the repair", ep.n, m), fr.startDaemons))
		d.hc.CloseIdleConnections() // connections to the stopped daemons are gone
		return err
	case opDriftJump:
		return fr.driftJump(ctx, d, dm, ep, st)
	case "debug-reload":
		return do(func(ctx context.Context) error { return rdb().Do(ctx, "DEBUG", "RELOAD", "NOSAVE").Err() }, nil)
	case "restart-rdb":
		return do(func(ctx context.Context) error { return t.RestartFromDisk(ctx, m) }, nil)
	case "replicaof-old":
		return do(func(ctx context.Context) error { return replicaOfOld(ctx, rdb(), fr.spare) }, func(ctx context.Context) error {
			return rdb().ReplicaOf(ctx, "NO", "ONE").Err()
		})
	case "clock-jump":
		if fr.fc.Control != nil && fr.fc.Control.LoneJump && st.D > 0 && ep.held {
			pttl, err := dm[m].PTTL(ctx, lockKey).Result()
			if err != nil {
				return err
			}
			if pttl > 0 && pttl <= st.D && time.Now().Before(ep.a.g.validUntil) {
				return fr.loneJump(ctx, d, dm, ep, st)
			}
		}
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
// master's clock with the other masters'). The master still
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
		return errors.Join(fr.startDaemons(ctx), d.replaceClients(ctx))
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

// fenceLate is how long rollbackFence's contender does not hear A's other
// masters (SIGSTOP): long enough for its votes needed to come from the
// rolled-back master and the masters A's SET never reached, well inside
// fenceContenderTimeout, so that they answer it (as in
// redlock.TestFenceAboveEveryCounterHeard).
const (
	fenceLate             = 150 * time.Millisecond
	fenceContenderTimeout = 500 * time.Millisecond
)

// rollbackFence is the unwatched-rollback fence attack on master m, one of
// A's masters (the fuzz finding docs/findings/fuzz-seed-1452374815532617200;
// redlock/fence.go, "Counters of every master heard"):
//
//  1. no client reaches the masters of st.Lost (every view's proxies to
//     them reject), so that no write-back, workload grant or fence
//     catch-up (every client's health loop copies the highest counter to
//     the masters below it) brings their counters up to A's next fence;
//  2. A releases the lock of the hold; m SAVEs (a copy with no lock on
//     the key: one taken while A held it would bring A's lock back with
//     the rollback, and the granted-lock check would refuse B); A takes
//     the key again through view a's library client: its votes and its
//     fence f1 reach m and A's other masters only (the direct connections
//     check f1 there and that the masters of st.Lost are below it), and
//     A releases it;
//  3. every daemon (a, b and c) and library client of the drill stops, as
//     for unwatched-jump; the masters of st.Lost are reachable again;
//  4. DEBUG RELOAD NOSAVE takes m back to the save: its counter below f1,
//     seen by no running client;
//  5. a contender B, a library client started now with the run's options
//     (the control's included), a 500 ms per-master timeout and an hourly
//     health interval, connected to the masters directly, acquires the
//     key once while A's other masters are paused for fenceLate: its
//     first answers, the votes needed, are m's and those of st.Lost, all
//     below f1; A's other masters answer later, with counters at or above
//     f1. With the fix B's fence is above theirs; without it (guard
//     FenceAboveEveryAnswer off) it is at most f1, which the checker's
//     I2 reports;
//  6. B releases, and every daemon and library client starts again,
//     knowing nothing of it.
//
// Why each part: B must have no earlier reading of m (one would show the
// counter going back: the data-loss check), and its first probe round (in
// New) copies no counter (a master counts only after it), so B is the only
// client running from the rollback until its grant; any other client's
// second probe round would catch m and st.Lost up to f1. A's lock of the
// hold is not the attack's: its fence reached every master (catch-up)
// before the step began. A's other masters answer B within its
// per-master timeout: had they not answered at all, more than N − quorum
// masters would have failed B, beyond what the fence's proof covers.
func (fr *fuzzRunner) rollbackFence(ctx context.Context, d *Drill, dm direct, ep *episode, st FuzzStep) (err error) {
	m, n := st.Master, d.T.Masters()
	if m < 0 || m >= n || !ep.held || len(st.Lost) == 0 || slices.Contains(st.Lost, m) {
		return fmt.Errorf("chaos: fuzz step %s: needs A's lock, a master of A's and the masters A's SET never reached", st)
	}
	var late []int // A's masters but m
	for i := range n {
		if i != m && !slices.Contains(st.Lost, i) {
			late = append(late, i)
		}
	}
	t := fr.t
	fenceKey := d.T.Space().FenceKey()
	counter := func(i int) (int64, error) {
		c, err := dm[i].Get(ctx, fenceKey).Int64()
		if err != nil {
			return 0, fmt.Errorf("master %d's fencing counter: %w", i, err)
		}
		return c, nil
	}
	if err := d.Mark(ctx, fmt.Sprintf("e%d no client reaches masters %v", ep.n, st.Lost), func(ctx context.Context) error {
		for _, u := range st.Lost {
			if err := t.Partition(ctx, AllViews, u, true); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	isolated := true
	reach := func(ctx context.Context) error {
		var errs []error
		for _, u := range st.Lost {
			errs = append(errs, t.Partition(ctx, AllViews, u, false))
		}
		isolated = false
		return errors.Join(errs...)
	}
	defer func() {
		if isolated {
			err = errors.Join(err, reach(context.WithoutCancel(ctx)))
		}
	}()
	ep.held = false
	_ = d.Release(ctx, d.Lib(0), ep.a.client, ep.key, ep.a.g, ep.a.id)
	if err := keyGone(ctx, d, dm, m, ep.key, "after A's release"); err != nil {
		return err
	}
	if err := dm[m].Save(ctx).Err(); err != nil {
		return err
	}
	a := holder{client: d.NewClientID()}
	a.g, a.id, err = d.Acquire(ctx, d.Lib(0), a.client, ep.key, st.TTL, 2*time.Second)
	if err != nil {
		return fmt.Errorf("arrangement failed: A could not take %s again: %w", ep.key, err)
	}
	ep.a = a
	f1 := a.g.fence
	for _, i := range append([]int{m}, late...) {
		c, err := counter(i)
		if err != nil {
			return err
		}
		if c < f1 {
			return fmt.Errorf("arrangement failed: A's fence %d not written back to master %d (its counter %d)", f1, i, c)
		}
	}
	for _, u := range st.Lost {
		c, err := counter(u)
		if err != nil {
			return err
		}
		if c >= f1 {
			return fmt.Errorf("arrangement failed: master %d's counter %d already at A's fence %d (written before no client reached it)", u, c, f1)
		}
	}
	_ = d.Release(ctx, d.Lib(0), a.client, ep.key, a.g, a.id)
	ep.a.g.validUntil = time.Now() // released: the contend step finds A's lease over

	stopAll := func(ctx context.Context) error {
		return errors.Join(fr.t.StopDaemons(ctx), fr.other.close(), d.closeClients(ctx))
	}
	startAll := func(ctx context.Context) error {
		return errors.Join(fr.startDaemons(ctx), d.replaceClients(ctx))
	}
	err = d.Mark(ctx, fmt.Sprintf("e%d every daemon and library client stopped", ep.n), stopAll)
	if err == nil {
		err = reach(ctx)
	}
	if err == nil {
		err = fr.fault(ctx, d, ep, st, func(ctx context.Context) error { return dm[m].Do(ctx, "DEBUG", "RELOAD", "NOSAVE").Err() }, nil)
	}
	if err == nil {
		err = fr.fenceContender(ctx, d, dm, ep, m, late, st.Lost, f1)
	}
	// Started again even after a failure: the rest of the run needs them.
	err = errors.Join(err, d.Unmark(context.WithoutCancel(ctx), fmt.Sprintf("e%d every daemon and library client started again, with no reading of master %d from before its rollback", ep.n, m), startAll))
	d.hc.CloseIdleConnections() // connections to the stopped daemons are gone
	return err
}

// fenceContender is rollbackFence's contender B (step 5).
func (fr *fuzzRunner) fenceContender(ctx context.Context, d *Drill, dm direct, ep *episode, m int, late, lost []int, f1 int64) error {
	fenceKey := d.T.Space().FenceKey()
	read := make([]int64, d.T.Masters())
	for i := range read {
		c, err := dm[i].Get(ctx, fenceKey).Int64()
		if err != nil {
			return fmt.Errorf("master %d's fencing counter: %w", i, err)
		}
		read[i] = c
	}
	if read[m] >= f1 {
		return fmt.Errorf("arrangement failed: master %d's counter %d after its rollback is not below A's fence %d (was the save taken after A's lock?)", m, read[m], f1)
	}
	opts := append(slices.Clone(d.Sc.Options), redlock.WithPerMasterTimeout(fenceContenderTimeout), redlock.WithHealthInterval(time.Hour))
	c, err := newClient(d.T.DirectAddrs(), d.Cfg.Client.clientOptions(d.T.Space(), opts...))
	if err != nil {
		return err
	}
	defer c.Close()
	b := newLibLocker("lib/b-fence", clientPath(c), d.T.Space(), fenceContenderTimeout)
	d.setView(b.Name(), 1)
	type result struct {
		g   grant
		id  int
		err error
	}
	t := fr.t
	for k, i := range late {
		if err := t.Pause(ctx, i); err != nil {
			for _, j := range late[:k] {
				err = errors.Join(err, t.Resume(context.WithoutCancel(ctx), j))
			}
			return err
		}
	}
	paused := time.Now()
	client := d.NewClientID()
	done := make(chan result, 1)
	go func() {
		g, id, err := d.Acquire(ctx, b, client, ep.key, d.Cfg.TTL, 0)
		done <- result{g, id, err}
	}()
	var errs []error
	if err := d.Sleep(ctx, fenceLate); err != nil {
		errs = append(errs, err)
	}
	for _, i := range late {
		errs = append(errs, t.Resume(context.WithoutCancel(ctx), i))
	}
	resumed := time.Since(paused)
	res := <-done
	d.Logf("e%d rollback-unwatched-fence: counters %v before the contender (A's fence %d on masters %d and %v; masters %v never had it); masters %v paused %v; the contender: fence %d (rewrites %d), err %v",
		ep.n, read, f1, m, late, lost, late, resumed.Round(time.Millisecond), res.g.fence, c.FenceRewrites(), res.err)
	if resumed >= fenceContenderTimeout {
		errs = append(errs, fmt.Errorf("arrangement failed: masters %v paused %v, past the contender's per-master timeout", late, resumed))
	}
	if res.err == nil {
		_ = d.Release(ctx, b, client, ep.key, res.g, res.id)
	}
	return errors.Join(errs...)
}

// driftContenderFactor is the drift-jump contender's drift factor: the
// largest New accepts, ten times the run's.
const driftContenderFactor = redlock.MaxDriftFactor

// driftRefAge is how old the drift-jump contender's reference readings of
// the masters' clocks are when A's key on the jumped master expires: the
// middle of what lets its vote check miss a jump of driftJumpD at drift
// factor 0.1 (older than (driftJumpD − 1 ms) / 0.1 = 1.49 s) and what it
// still compares a vote with (its max reference age: 2 s at an hourly
// health interval; older, it would not count the vote).
const driftRefAge = 1750 * time.Millisecond

// driftJump is the mixed-drift-settings masking attack on master m, one
// of the masters of A's lock: A (view a's library client, at the run's
// drift factor) holds the key; a contender B, a library client started
// for the step with the run's options (the control's included) but drift
// factor 0.1 and an hourly health interval, connected to the masters
// directly, takes its only clock readings of the masters (New probes
// them) driftRefAge before A's key on m will expire once m's clock has
// jumped; then, while m's proxies hold every other client's traffic, m's
// wall clock jumps st.D forward: more than A's drift budget (so A's key
// on m expires while A's lock is still valid), less than B's vote check
// misses at 0.1 with readings that old. As soon as the key is gone B
// contends alone, until A's validity has ended. B wins m's vote and those
// of the masters A's SET never reached: a second holder, unless B judges
// m's clock by A's drift factor (the shared clock bounds registry: B
// reads A's registration when it starts and judges by the strictest
// factor registered, so it sees the jump) or A budgets for B's blind spot
// (had B registered first).
//
// Why each part: B probes once, at New, and never again in the step: a
// probe after the jump would compare m's clock with the other masters'
// (the clock reference) and see it. Every other client is held off m
// (a blackhole of m's proxies, from just before the jump until B is
// done; B and the drill reach m directly): the drill's library clients
// and the daemons probe every 150–400 ms at drift factors 0.01 and 0.02,
// so one reading of m after the jump would see it, quarantine m and
// write a repair marker that B's votes then obey, and the find would be
// a race against their probes. B's references must be old (its vote
// check allows 0.1 × their age) but within 2 s (else it does not count
// m's vote at all); A's lock is driftJumpTTL long so that B can start
// after A's hold and still be driftRefAge old when the key expires. The
// heal steps m's clock back.
func (fr *fuzzRunner) driftJump(ctx context.Context, d *Drill, dm direct, ep *episode, st FuzzStep) (err error) {
	m := st.Master
	if m < 0 || m >= d.T.Masters() || st.D <= 0 || !ep.held {
		return fmt.Errorf("chaos: fuzz step %s: needs A's lock, a master and a forward jump", st)
	}
	lockKey := d.T.Space().LockKey(ep.key)
	sent := time.Now()
	pttl, err := dm[m].PTTL(ctx, lockKey).Result()
	if err != nil {
		return err
	}
	if pttl <= 0 {
		return fmt.Errorf("arrangement failed: master %d does not hold A's key (PTTL %v)", m, pttl)
	}
	// When A's key on m expires once m's clock has jumped st.D.
	gone := sent.Add(pttl - st.D)
	if !gone.Before(ep.a.g.validUntil) {
		// With the clock bounds shared (every guard on), A budgets for
		// the loosest client registered (the second daemon's 0.02, the
		// daemons' 150 ms per-master timeout): the fix's other half. The
		// step goes on, so that every run makes the same faults.
		d.Logf("e%d drift-jump: a jump of %v on master %d does not outrun A's drift budget (clock bounds %+v): its key there expires %v after A's validity ends", ep.n, st.D, m, d.Client(0).ClockBounds(), gone.Sub(ep.a.g.validUntil).Round(time.Millisecond))
	}
	start := gone.Add(-driftRefAge)
	if time.Until(start) < 0 {
		return fmt.Errorf("arrangement failed: A's key on master %d expires in %v after the jump, too soon for the contender's readings to be %v old then", m, time.Until(gone).Round(time.Millisecond), driftRefAge)
	}
	if err := d.Sleep(ctx, time.Until(start)); err != nil {
		return err
	}
	opts := append(slices.Clone(d.Sc.Options), redlock.WithDriftFactor(driftContenderFactor), redlock.WithHealthInterval(time.Hour))
	c, err := newClient(d.T.DirectAddrs(), d.Cfg.Client.clientOptions(d.T.Space(), opts...))
	if err != nil {
		return err
	}
	defer c.Close()
	probed := time.Now()
	d.Logf("e%d drift-jump: contender at drift factor %g started %v before A's key on master %d expires after the jump (New took %v); its clock bounds %+v",
		ep.n, driftContenderFactor, time.Until(gone).Round(time.Millisecond), m, probed.Sub(start).Round(time.Millisecond), c.ClockBounds())
	return fr.contendAlone(ctx, d, dm, ep, st, c, "lib/b-drift", "drift-jump", d.Cfg.Client.PerMasterTimeout, func() string {
		return fmt.Sprintf("; the contender's readings are %v old", time.Since(start).Round(time.Millisecond))
	})
}

// contendAlone is what driftJump and loneJump end with: while every
// other client is held off master m (a blackhole of m's proxies, until
// the step is done; c and the drill reach m directly), m's wall clock
// jumps st.D forward; once A's key there is gone, c alone contends for it
// (contendVia, as name, with per-master timeout pmt) until A's validity
// has ended. what names the step in the log, and about() adds to the log
// line before the contention.
func (fr *fuzzRunner) contendAlone(ctx context.Context, d *Drill, dm direct, ep *episode, st FuzzStep, c *redlock.Client, name, what string, pmt time.Duration, about func() string) (err error) {
	m, t := st.Master, fr.t
	if err := t.Blackhole(ctx, m, true); err != nil {
		return err
	}
	held := time.Now()
	defer func() {
		err = errors.Join(err, t.Blackhole(context.WithoutCancel(ctx), m, false))
		d.Logf("e%d %s: master %d's traffic held for %v", ep.n, what, m, time.Since(held).Round(time.Millisecond))
	}()
	if err := fr.fault(ctx, d, ep, st, func(ctx context.Context) error { return t.ClockJump(ctx, m, st.D) }, func(context.Context) error { return t.clocks[m].Reset() }); err != nil {
		return err
	}
	if err := keyGone(ctx, d, dm, m, ep.key, "after its clock jumped (is the clock shim preloaded?)"); err != nil {
		return err
	}
	b := newLibLocker(name, clientPath(c), d.T.Space(), pmt)
	d.setView(b.Name(), 1)
	d.Logf("e%d %s: A's key on master %d gone %v after the jump; A's validity ends in %v%s", ep.n, what, m, time.Since(held).Round(time.Millisecond), time.Until(ep.a.g.validUntil).Round(time.Millisecond), about())
	first, err := contendVia(ctx, d, ep.key, d.Cfg.TTL, ep.a, b)
	d.Logf("e%d %s: the contender's first try: %v", ep.n, what, first)
	if ms := c.Masters()[m]; !ms.Counting {
		d.Logf("e%d %s: the contender: master %d %s (%s)", ep.n, what, m, ms.State, ms.QuarantineReason)
	}
	return err
}

// loneContenderTimeout is loneJump's contender's per-master timeout: an
// acquire that more than N − quorum masters fail kicks the Client's
// health loop (redlock/acquire.go), whose probe of the jumped master
// would see the jump (the clock guard) and quarantine it; on a loaded
// machine 150 ms answers are not sure, 500 ms are (as fenceContender's).
const loneContenderTimeout = 500 * time.Millisecond

// loneJump is a forward clock jump of master m, one of the masters of
// A's lock, that one contender alone sees (FuzzControl.LoneJump): B, a
// library client started for the step with the run's options (the
// control's included), an hourly health interval and
// loneContenderTimeout, connected to the masters directly, takes its
// clock readings of the masters (New probes them) just before the jump;
// then, while m's proxies hold every other client's traffic, m's wall
// clock jumps st.D forward (past A's key there); as soon as the key is
// gone B contends alone, until A's validity has ended. B's vote from m
// carries m's clock: with the vote clock check on, B compares it with
// its reading of a moment before, sees the jump and refuses the vote;
// without it, B wins m's vote and those of the masters A's SET never
// reached: a second holder. The later contend step finds A's lease over.
//
// Why each part: every other client would read m's clock after the jump
// and write a repair marker with a quarantine that B's votes then carry:
// the daemons (a, b and c) keep every guard and probe every 150–400 ms
// (their health loops, and the drill's HTTP probes through them), so they
// saw the jump 10–150 ms after it, and a library client probes when a
// failed acquire kicks its health loop (the clock guard is on in every
// control but noclockguard). The find was a race against their probes,
// lost under load (a `make test` run found nothing in 8 episodes). So
// every other client is held off m (a blackhole of m's proxies, from just
// before the jump until B is done; B and the drill reach m directly), as
// for driftJump. B's own health loop would see the jump too: it runs
// hourly, and its per-master timeout keeps a loaded machine from kicking
// it. The heal steps m's clock back.
func (fr *fuzzRunner) loneJump(ctx context.Context, d *Drill, dm direct, ep *episode, st FuzzStep) (err error) {
	opts := append(slices.Clone(d.Sc.Options), redlock.WithPerMasterTimeout(loneContenderTimeout), redlock.WithHealthInterval(time.Hour))
	// New's one probe round must reach every master: one it missed (a
	// probe slower than the health timeout on a loaded machine) would not
	// count until the next round, an hour away, and B would lose a vote
	// it needs. Another contender then, while A's lease leaves time.
	var c *redlock.Client
	for {
		c, err = newClient(d.T.DirectAddrs(), d.Cfg.Client.clientOptions(d.T.Space(), opts...))
		if err != nil {
			return err
		}
		var out []int
		for i, ms := range c.Masters() {
			if !ms.Counting {
				out = append(out, i)
			}
		}
		if len(out) == 0 {
			break
		}
		c.Close()
		if time.Until(ep.a.g.validUntil) < time.Second {
			return fmt.Errorf("arrangement failed: the lone-jump contender's first probe round left masters %v not counting", out)
		}
		d.Notef("e%d lone jump: the contender's first probe round left masters %v not counting (slow machine): another contender", ep.n, out)
	}
	defer c.Close()
	return fr.contendAlone(ctx, d, dm, ep, st, c, "lib/b-lone", "lone jump", loneContenderTimeout, func() string { return "" })
}

// startDaemons starts daemons a and b again, and the second daemon (c) as a
// new one on its address if it was stopped.
func (fr *fuzzRunner) startDaemons(ctx context.Context) error {
	err := fr.t.StartDaemons(ctx)
	if fr.other.stopped() {
		addr := strings.TrimPrefix(fr.other.info.URL, "http://")
		o, oerr := startLocalDaemon(fr.other.info.Name, fr.other.info.View, fr.t.MasterAddrs(fr.other.info.View), fr.otherCfg, addr)
		if oerr == nil {
			fr.other = o
		}
		err = errors.Join(err, oerr)
	}
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

// refillScript runs ARGV[1] EXISTS calls: each counts in INFO stats
// total_commands_processed, as a client's command would.
var refillScript = redis.NewScript(`
for i = 1, tonumber(ARGV[1]) do redis.call('EXISTS', KEYS[1]) end
return 1`)

// evictResetStat evicts keys on master m (see evict), then hides the
// eviction from every statistic the data-loss check reads: CONFIG
// RESETSTAT sets evicted_keys back to zero, and traffic (refillScript)
// takes total_commands_processed past what it was before. All of it
// happens while m's proxies hold every client's traffic, so no client
// reads the statistics in between: what a client reads next is an
// evicted_keys no higher than before (zero, if m had never evicted) and a
// command count that grew. Only the lock keys it evicted are gone.
func (fr *fuzzRunner) evictResetStat(ctx context.Context, rdb *redis.Client, m, e int) (err error) {
	if err := fr.t.Blackhole(ctx, m, true); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, fr.t.Blackhole(context.WithoutCancel(ctx), m, false)) }()
	if err := evict(ctx, rdb, e); err != nil {
		return err
	}
	// INFO is a command: the eviction the filler pushed past maxmemory
	// happens before it runs.
	evicted, err := infoStat(ctx, rdb, "evicted_keys")
	if err != nil {
		return err
	}
	if evicted == 0 {
		return errors.New("arrangement failed: the filler evicted nothing")
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		return err
	}
	commands, err := infoStat(ctx, rdb, "total_commands_processed")
	if err != nil {
		return err
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	return refillScript.Run(ctx, rdb, []string{fmt.Sprintf("fuzz-fill:%d:", e)}, commands+100).Err()
}

// rollbackCatchUp rolls master m back to its snapshot (SWAPDB 0 1: the
// snapshot was taken before A's hold, so A's key and fence record are
// gone and m's fencing counter goes back below A's fence), and a peer
// hides it: a library client of the deployment started now (every guard
// on, connected to the masters directly) reads m's counter behind the
// others' and catches it up to the highest, as every client's health
// loop does. All of it happens while m's proxies hold every client's
// traffic, so the drill's clients next read m with its marker, lease
// horizon (the longer lock's, from before the snapshot) and fencing
// counter no lower than before.
func (fr *fuzzRunner) rollbackCatchUp(ctx context.Context, d *Drill, dm direct, m int) (err error) {
	if err := fr.t.Blackhole(ctx, m, true); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, fr.t.Blackhole(context.WithoutCancel(ctx), m, false)) }()
	fenceKey := d.T.Space().FenceKey()
	if err := dm[m].Do(ctx, "SWAPDB", 0, 1).Err(); err != nil {
		return err
	}
	if err := dropCopyScript.Run(ctx, dm[m], nil).Err(); err != nil {
		return err
	}
	var highest int64
	for i, rdb := range dm {
		if i == m {
			continue
		}
		n, err := rdb.Get(ctx, fenceKey).Int64()
		if err != nil {
			return fmt.Errorf("master %d's fencing counter: %w", i, err)
		}
		highest = max(highest, n)
	}
	peer, err := newClient(d.T.DirectAddrs(), d.Cfg.Client.clientOptions(d.T.Space()))
	if err != nil {
		return err
	}
	defer peer.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := dm[m].Get(ctx, fenceKey).Int64()
		if err == nil && n >= highest {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("arrangement failed: the peer did not catch master %d's fencing counter up to %d in 5s (it reads %d: %v)", m, highest, n, err)
		}
		if err := d.Sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}

// rollbackRepairFences is the repair-fences masking attack on master m,
// run just after A's extend while every daemon is stopped (see the step).
// View b's library client first reads every master (CheckMasters: its
// health loop would within 150 ms), so it knows m's lease horizon after
// A's extend. Then, while every master's proxies hold every client's
// traffic: m goes back to its snapshot (SWAPDB 0 1: the snapshot was
// taken after A's hold and before the extend, so A's key has its earlier
// TTL and m's lease horizon goes down, while the marker and fencing
// counter stay); a peer (a library client of the deployment started now,
// every guard on, connected to the masters directly) catches every
// master's fencing counter up to the highest, as the clients' health
// loops do, if the workload moved it since the snapshot; and the
// operator's repair-fences (redlock.RepairFences with the run's max TTL)
// reads every master, finds each intact (none lags), raises the counters
// and writes each a repair marker without a quarantine.
//
// Every master's traffic is held, not m's alone: a grant through the
// others between the catch-up and repair-fences' read would leave m's
// counter below the highest, and repair-fences quarantines a master whose
// counter lags (the other fix of this attack), which is then what stops
// it. What a client reads next is a repair marker it adopts; with the fix
// it still compares m's horizon with what it read before and sees the
// rollback, without it (guard RepairKeepsBaselines off) it takes m as it
// is now.
func (fr *fuzzRunner) rollbackRepairFences(ctx context.Context, d *Drill, dm direct, m, e int) (err error) {
	if err := d.Client(1).CheckMasters(ctx); err != nil {
		return err
	}
	n := d.T.Masters()
	held := time.Now()
	for i := range n {
		if err := fr.t.Blackhole(ctx, i, true); err != nil {
			return err
		}
	}
	defer func() {
		for i := range n {
			err = errors.Join(err, fr.t.Blackhole(context.WithoutCancel(ctx), i, false))
		}
		d.Logf("e%d rollback-repairfences: every master's traffic held for %v", e, time.Since(held).Round(time.Millisecond))
	}()
	if err := dm[m].Do(ctx, "SWAPDB", 0, 1).Err(); err != nil {
		return err
	}
	if err := dropCopyScript.Run(ctx, dm[m], nil).Err(); err != nil {
		return err
	}
	fenceKey := d.T.Space().FenceKey()
	counters := func() ([]int64, int64, error) {
		out := make([]int64, len(dm))
		var highest int64
		for i, rdb := range dm {
			c, err := rdb.Get(ctx, fenceKey).Int64()
			if err != nil {
				return nil, 0, fmt.Errorf("master %d's fencing counter: %w", i, err)
			}
			out[i], highest = c, max(highest, c)
		}
		return out, highest, nil
	}
	read, highest, err := counters()
	if err != nil {
		return err
	}
	if slices.Min(read) < highest {
		peer, err := newClient(d.T.DirectAddrs(), d.Cfg.Client.clientOptions(d.T.Space()))
		if err != nil {
			return err
		}
		defer peer.Close()
		deadline := time.Now().Add(5 * time.Second)
		for slices.Min(read) < highest {
			if time.Now().After(deadline) {
				return fmt.Errorf("arrangement failed: the peer did not catch every fencing counter up to %d in 5s (read %v)", highest, read)
			}
			if err := d.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
			if read, _, err = counters(); err != nil {
				return err
			}
		}
	}
	masters := make([]*redis.Options, n)
	for i, addr := range d.T.DirectAddrs() {
		masters[i] = &redis.Options{Addr: addr}
	}
	res, err := redlock.RepairFences(ctx, masters, redlock.RepairOptions{FenceKey: fenceKey, MarkerKey: d.T.Space().MarkerKey(), MaxTTL: fr.t.opts.Daemon.MaxTTL})
	if err != nil {
		return fmt.Errorf("repair-fences: %w", err)
	}
	for _, mr := range res.Masters {
		if mr.Lost != "" {
			return fmt.Errorf("arrangement failed: repair-fences quarantined master %d (%s)", mr.Index, mr.Lost)
		}
	}
	d.Logf("e%d rollback-repairfences: repair-fences found every master intact, counters %v raised to %d", e, read, res.Target)
	return nil
}

// infoStat reads one counter of INFO stats.
func infoStat(ctx context.Context, rdb *redis.Client, field string) (int64, error) {
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var n int64
			_, err := fmt.Sscan(v, &n)
			return n, err
		}
	}
	return 0, fmt.Errorf("chaos: INFO stats has no %s", field)
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

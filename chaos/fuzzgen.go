package chaos

// The fault fuzzer's schedule: a list of steps drawn from a seed before
// anything runs, so that a seed names one schedule and a schedule can be
// printed, replayed, shrunk and written out as a test.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// FuzzStep is one step of a fuzz schedule. Steps run in order, one at a
// time; Episode groups the steps of one episode (one key: "fz<episode>"),
// which starts with a hold (or with a longer lock and a snapshot taken
// before the hold) and ends with a heal of every fault it made.
type FuzzStep struct {
	Episode int    `json:"episode"`
	Op      string `json:"op"`
	// Master is the master a fault or a preparation acts on (-1: none).
	Master int `json:"master"`
	// Lost: for a hold, the masters A's SET never reaches (its key is
	// deleted there at once: a lost message, not a faulty master).
	Lost []int `json:"lost,omitempty"`
	// TTL of a hold, hold-long or extend.
	TTL time.Duration `json:"ttl,omitempty"`
	// D: a clock jump (signed), a latency, a sleep.
	D time.Duration `json:"d,omitempty"`
	// Rate of a clock-rate fault.
	Rate float64 `json:"rate,omitempty"`
	// Via: a contend's contenders, in the order they take turns; a
	// multi's or permits' holders, one path each ("lib", "http",
	// "other").
	Via []string `json:"via,omitempty"`
	// Sets: a multi's sets of workload keys, one per holder.
	Sets [][]string `json:"sets,omitempty"`
	// Permits: a permits step's semaphore size.
	Permits int `json:"permits,omitempty"`
	// ExtendTTL: a multi's or permits' holders extend to this TTL from
	// now while they hold (0: no extend).
	ExtendTTL time.Duration `json:"extend_ttl,omitempty"`
}

// The operations of a schedule.
//
// Client operations: hold (A, the library client of view a, acquires the
// episode's key with wait; Lost names the masters its SET never
// reached), hold-long (another key, on every master, for the longest TTL:
// it keeps the lease horizon up), extend (A, to TTL from now: longer or
// shorter than what is left), status (a status call on the key through
// view b), contend (B tries the key through each of Via in turn until A's
// validity has ended), release, check (view b's library client takes fresh
// clock readings of every master).
//
// Preparations, which break nothing by themselves: snapshot (master's data
// copied into its database 1, for rollback), save (SAVE: an RDB of now,
// for debug-reload and restart-rdb), replica-snapshot (the master's data
// copied to a spare redis-server, for replicaof-old).
//
// Faults, each on one master (at most N − quorum masters per episode):
// kill, restart-empty, pause, blackhole, latency (D), flushall, flushdb,
// swapdb (SWAPDB 0 1 with an empty database 1), del-marker, del-horizon,
// del-fence (DEL of a bookkeeping key), lose-lock (A's key alone deleted,
// as a targeted eviction would), evict (a temporary maxmemory with
// volatile-ttl, filled until it evicts), resetstat (CONFIG RESETSTAT),
// rollback (SWAPDB back to the snapshot), debug-reload (DEBUG RELOAD
// NOSAVE: back to the saved RDB), restart-rdb (restart from the saved
// RDB, with a new run_id), replicaof-old (REPLICAOF the spare holding the
// old snapshot until synced, then REPLICAOF NO ONE), clock-jump (D),
// clock-rate (Rate), unwatched-jump (D: every daemon and library client
// of the run stops, master's clock jumps D forward, and they all start
// again, knowing nothing of it), evict-resetstat (while the master's
// proxies hold every client's traffic: an eviction, CONFIG RESETSTAT, and
// traffic that refills total_commands_processed past what it was, so
// that no statistic a client reads shows the eviction), rollback-catchup
// (while the master's proxies hold every client's traffic: SWAPDB back to
// a snapshot from before A's hold, which loses A's key and fence record
// and takes the fencing counter back, then a peer, a library client of
// the deployment started now with every guard on, catches the counter up
// to the other masters'), drift-jump (D: a contender at drift factor 0.1,
// whose only clock readings are about 1.75 s old, asks the moment A's key
// on the master is gone after its clock jumped D forward, more than A
// budgets and less than the contender misses, while the master's proxies
// hold every other client's traffic; see fuzzRunner.driftJump),
// rollback-unwatched-fence (Lost: the masters A's SET never reached; while
// no client reaches Lost, A releases its lock, the master SAVEs, A takes
// the key again, so that its fence f1 is written to the master and A's
// other masters only, and releases it; every daemon and library client stops, DEBUG
// RELOAD NOSAVE takes the master back to the save, and a contender
// started then acquires while A's other masters are paused briefly, so
// that its first answers are the master's and Lost's, all below f1; see
// fuzzRunner.rollbackFence). Faults on no master: daemon-restart (both daemons stop and start again, knowing
// nothing), sleep (D).
//
// Operator actions: reload (every daemon applies its configuration read
// again, as on SIGHUP: its API keys replaced, a second account's key
// added by one reload and removed by the next, while lock traffic runs),
// and repair-fences, only as rollback-repairfences, a fault on one
// master: every daemon stops, A extends to TTL (longer), view b's library
// client reads every master (its lease horizon after the extend), then,
// while every master's proxies hold every
// client's traffic, the master goes back to its snapshot (SWAPDB: A's key
// with its TTL from before the extend, the lease horizon down, the
// fencing counter where it was), a peer catches the fencing counters up
// as the health loops do, and the operator's `redlockd repair-fences`
// (redlock.RepairFences, with the run's max TTL) finds every master
// intact and writes each a repair marker without a quarantine; the
// daemons start again, knowing nothing of it. Drawn
// where nothing else could hide the rollback from a client that read the
// master after the extend: no longer lock holds the lease horizon up, and
// B contends through view b's library client alone (see
// rollbackRepairFences). The README has an operator run repair-fences
// after more than N − quorum masters lost their data; this runs it on a
// deployment that did not need it, which the tool does not refuse.
//
// Multi-key and semaphore operations, drawn from a source of their own
// (see clientOps) just before A's release, while the episode's faults
// still hold: multi (two holders, each through its own path, take
// overlapping sets of workload keys at once, as one lock each, with wait,
// optionally extend, and release) and permits (Permits + 1 holders take
// permits of the episode's semaphore "fz<e>-sem" at once, with wait,
// optionally extend, and release).
//
// heal ends an episode: A's release, every fault undone, and a wait until
// every client counts every master again.
const (
	opHold, opHoldLong, opExtend, opStatus, opContend, opRelease, opCheck = "hold", "hold-long", "extend", "status", "contend", "release", "check"
	opSnapshot, opSave, opReplicaSnapshot                                 = "snapshot", "save", "replica-snapshot"
	opHeal, opSleep, opDaemonRestart                                      = "heal", "sleep", "daemon-restart"
	opUnwatchedJump, opEvictResetStat, opRollbackCatchUp                  = "unwatched-jump", "evict-resetstat", "rollback-catchup"
	opReload, opRollbackRepairFences, opDriftJump                         = "reload", "rollback-repairfences", "drift-jump"
	opRollbackFence                                                       = "rollback-unwatched-fence"
)

// The multi-key and semaphore operations (see clientOps).
const opMulti, opPermits = "multi", "permits"

// unwatchedSalt seeds genEpisode's side source (any constant apart from 0).
const unwatchedSalt = 0x756e77617463688e

// clientOpsSalt seeds clientOps' source (any constant apart from 0 and
// unwatchedSalt).
const clientOpsSalt = 0x6d756c7469736d70

// fuzzFaults are the master faults, with the preparation each needs.
var fuzzFaults = []struct {
	op, prep string
	// data: the fault loses data (a rollback or a wipe), as opposed to
	// availability (kill, pause, network) or clock.
	data bool
}{
	{"kill", "", false}, {"restart-empty", "", true}, {"pause", "", false},
	{"blackhole", "", false}, {"latency", "", false},
	{"flushall", "", true}, {"flushdb", "", true}, {"swapdb", "", true},
	{"del-marker", "", true}, {"del-horizon", "", true}, {"del-fence", "", true},
	{"lose-lock", "", true}, {"evict", "", true}, {"resetstat", "", false},
	{"rollback", opSnapshot, true}, {"debug-reload", opSave, true},
	{"restart-rdb", opSave, true}, {"replicaof-old", opReplicaSnapshot, true},
	{"clock-jump", "", false}, {"clock-rate", "", false},
	// Not drawn from here (only from the side source, which keeps the
	// draws of every schedule as they were): opUnwatchedJump, by its
	// theme, opEvictResetStat, in place of an eviction followed by a
	// RESETSTAT, opRollbackCatchUp and opRollbackRepairFences, in place
	// of an extend's rollback (see rollbackCatchUp and
	// rollbackRepairFences), opDriftJump, in place of a clock jump
	// (driftJump), and opRollbackFence, in place of a lone debug-reload
	// (rollbackFence).
}

func isFault(op string) bool {
	return op == opUnwatchedJump || op == opEvictResetStat || op == opRollbackFence || op == opRollbackCatchUp || op == opRollbackRepairFences || op == opDriftJump || slices.ContainsFunc(fuzzFaults, func(f struct {
		op, prep string
		data     bool
	}) bool {
		return f.op == op
	})
}

// FuzzSchedule is what a seed names: the episodes, in order.
type FuzzSchedule struct {
	Seed    uint64     `json:"seed"`
	Masters int        `json:"masters"`
	Steps   []FuzzStep `json:"steps"`
}

// Episodes returns the episode numbers in the schedule, in order.
func (s FuzzSchedule) Episodes() []int {
	var out []int
	for _, st := range s.Steps {
		if len(out) == 0 || out[len(out)-1] != st.Episode {
			out = append(out, st.Episode)
		}
	}
	return out
}

// Only returns the schedule with the episodes given, and of those only the
// steps keep reports true for (nil: all).
func (s FuzzSchedule) Only(episodes []int, keep func(i int, st FuzzStep) bool) FuzzSchedule {
	out := FuzzSchedule{Seed: s.Seed, Masters: s.Masters}
	for i, st := range s.Steps {
		if slices.Contains(episodes, st.Episode) && (keep == nil || keep(i, st)) {
			out.Steps = append(out.Steps, st)
		}
	}
	return out
}

// GenerateFuzzSchedule draws episodes episodes for masters masters from
// seed, for the ProcessTarget's default timing (TTLs up to its max TTL). It is a pure function of its arguments, and episode e's steps
// depend on (seed, e) only: a longer run replays a shorter one's episodes
// first.
func GenerateFuzzSchedule(seed uint64, masters, episodes int) FuzzSchedule {
	maxTTL := DaemonConfig{}.withDefaults().MaxTTL
	s := FuzzSchedule{Seed: seed, Masters: masters}
	for e := range episodes {
		steps := genEpisode(rand.New(rand.NewPCG(seed, uint64(e)+1)), rand.New(rand.NewPCG(seed^unwatchedSalt, uint64(e)+1)), e, masters, maxTTL)
		s.Steps = append(s.Steps, clientOps(rand.New(rand.NewPCG(seed^clientOpsSalt, uint64(e)+1)), steps)...)
	}
	return s
}

// genEpisode draws one episode. The draw is biased toward the
// combinations that found every masking attack so far: A's lock on just a
// quorum (its SET lost elsewhere), so that one master's lie decides, and a
// data or clock fault on that master, with an extend before or after it.
// Themes:
//
//   - pivot: SET lost on N − quorum masters, one fault of any kind on one
//     of A's masters, optionally noise on one more master;
//   - extend-under-faults: SET lost on up to one master, availability
//     faults (kill, pause, blackhole, latency) on up to N − quorum of A's
//     masters, then an extend (more often shorter);
//   - rollback-extend: SET lost on N − quorum masters, a snapshot, save or
//     replica snapshot of one of A's masters, an extend (longer), then the
//     rollback it prepared;
//   - clock: SET lost on N − quorum masters, a clock jump (mostly forward)
//     or a clock rate (mostly 10% fast) on one of A's masters;
//   - mixed: anything on any masters, within the budget;
//   - unwatched-jump (drawn from side, one episode in eight, in place of
//     the others): SET lost on N − quorum masters, then an unwatched-jump
//     on one of A's masters: every daemon and library client stops, the
//     master's clock jumps forward past A's TTL, and every one starts
//     again with no earlier reading of it.
//
// Four masking attacks are drawn from side in place of what the themes
// drew: evict-resetstat for half the eviction+RESETSTAT pairs,
// rollback-catchup for half the rollback-extend episodes that roll back a
// SWAPDB copy under a longer lock (rollbackCatchUp),
// rollback-repairfences for half of those with no longer lock
// (rollbackRepairFences), and drift-jump for one in eight clock episodes
// whose one fault is a clock jump (driftJump; drawn last, after
// rollback-repairfences, so that every other draw of side is as it was).
// A fence attack is drawn the same way, after drift-jump:
// rollback-unwatched-fence for half the episodes whose one fault is a
// debug-reload of one of A's masters, A's SET lost on N − quorum masters
// (rollbackFence).
//
// side is a source of its own (seed, e) stream, so that adding the
// unwatched-jump theme and these five left every other episode of a
// seed as it was.
func genEpisode(r, side *rand.Rand, e, n int, maxTTL time.Duration) []FuzzStep {
	budget := n - (n/2 + 1)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	step := func(op string, m int) FuzzStep { return FuzzStep{Episode: e, Op: op, Master: m} }
	pickFault := func(filter func(op string, data bool) bool) (string, string) {
		for {
			f := fuzzFaults[r.IntN(len(fuzzFaults))]
			if filter == nil || filter(f.op, f.data) {
				return f.op, f.prep
			}
		}
	}
	themes := []string{"pivot", "pivot", "pivot", "extend-under-faults", "extend-under-faults", "rollback-extend", "rollback-extend", "clock", "clock", "clock", "mixed"}
	theme := themes[r.IntN(len(themes))]
	if side.IntN(8) == 0 {
		theme = "unwatched-jump"
	}
	lostN := budget
	switch theme {
	case "extend-under-faults":
		lostN = min(budget, 1)
		if r.IntN(4) == 0 {
			lostN = 0
		}
	case "mixed":
		lostN = r.IntN(budget + 1)
	}
	perm := r.Perm(n)
	lost := slices.Sorted(slices.Values(perm[:lostN]))
	aMasters := slices.Sorted(slices.Values(perm[lostN:]))
	ttl := time.Duration(2+r.IntN(3)) * time.Second
	ttl = min(ttl, maxTTL-time.Second)
	if theme == "unwatched-jump" {
		// The longest: A's lease must outlast every daemon's and client's
		// stop and start.
		ttl = maxTTL - time.Second
	}

	var steps []FuzzStep
	hold := step(opHold, -1)
	hold.Lost, hold.TTL = lost, ttl
	steps = append(steps, hold)
	if r.IntN(3) == 0 || theme == "rollback-extend" && r.IntN(2) == 0 {
		hl := step(opHoldLong, -1)
		hl.TTL = maxTTL
		steps = append(steps, hl)
	}
	type fault struct {
		op, prep string
		m        int
	}
	var faults []fault
	used := map[int]bool{}
	pickMaster := func(from []int) int {
		var free []int
		for _, m := range from {
			if !used[m] {
				free = append(free, m)
			}
		}
		if len(free) == 0 {
			return -1
		}
		m := free[r.IntN(len(free))]
		used[m] = true
		return m
	}
	switch theme {
	case "pivot":
		op, prep := pickFault(nil)
		faults = append(faults, fault{op, prep, pickMaster(aMasters)})
		if budget > 1 && r.IntN(3) == 0 {
			op, prep := pickFault(nil)
			if m := pickMaster(all); m >= 0 {
				faults = append(faults, fault{op, prep, m})
			}
		}
	case "extend-under-faults":
		n := budget
		if r.IntN(4) == 0 {
			n = 1
		}
		for range n {
			op, prep := pickFault(func(op string, _ bool) bool {
				return op == "kill" || op == "pause" || op == "blackhole" || op == "latency"
			})
			if m := pickMaster(aMasters); m >= 0 {
				faults = append(faults, fault{op, prep, m})
			}
		}
	case "clock":
		op := "clock-rate"
		if r.IntN(100) < 65 {
			op = "clock-jump"
		}
		faults = append(faults, fault{op, "", pickMaster(aMasters)})
	case "unwatched-jump":
		faults = append(faults, fault{opUnwatchedJump, "", pickMaster(aMasters)})
	case "rollback-extend":
		op, prep := pickFault(func(_ string, data bool) bool { return data })
		for prep == "" && r.IntN(4) != 0 {
			op, prep = pickFault(func(_ string, data bool) bool { return data })
		}
		faults = append(faults, fault{op, prep, pickMaster(aMasters)})
	default:
		for range 1 + r.IntN(budget) {
			op, prep := pickFault(nil)
			if m := pickMaster(all); m >= 0 {
				faults = append(faults, fault{op, prep, m})
			}
		}
	}
	// A RESETSTAT after an eviction hides the evicted_keys count the
	// data-loss check reads: a known masking pair, drawn often. Half of
	// those pairs (a side draw) become evict-resetstat, the pair made
	// while no client reads the master and followed by the traffic that
	// hides the RESETSTAT too.
	for i, f := range faults {
		if f.op == "evict" && r.IntN(2) == 0 {
			if side.IntN(2) == 0 {
				faults[i].op = opEvictResetStat
			} else {
				faults = slices.Insert(faults, i+1, fault{"resetstat", "", f.m})
			}
			break
		}
	}
	for _, f := range faults {
		if f.prep != "" {
			steps = append(steps, step(f.prep, f.m))
		}
	}
	extend := func() {
		x := step(opExtend, -1)
		shorter := 2 // in 5
		if theme == "extend-under-faults" {
			shorter = 3
		}
		if r.IntN(5) < shorter {
			x.TTL = time.Second // shorter than what is left
		} else {
			x.TTL = min(ttl+time.Duration(1+r.IntN(2))*time.Second, maxTTL)
		}
		if theme == "rollback-extend" {
			x.TTL = min(ttl+2*time.Second, maxTTL)
		}
		steps = append(steps, x)
	}
	extendAt := r.IntN(4) // 0: before the faults, 1: after, 2: both, 3: none
	if theme == "rollback-extend" {
		extendAt = 0
	}
	if theme == "extend-under-faults" {
		extendAt = 1
	}
	if extendAt == 0 || extendAt == 2 {
		extend()
	}
	if r.IntN(6) == 0 {
		steps = append(steps, step(opDaemonRestart, -1))
	}
	for _, f := range faults {
		if f.op == "clock-jump" {
			steps = append(steps, step(opCheck, -1))
		}
		st := step(f.op, f.m)
		switch f.op {
		case "clock-jump":
			// Past any lease the fuzzer grants (max TTL), so A's key on the
			// master expires at once; no further, because undoing it steps
			// the clock back as far, and a master whose clock went back is
			// kept out about that long.
			st.D = maxTTL + time.Second
			if r.IntN(5) == 0 {
				st.D = -st.D
			}
		case opUnwatchedJump:
			st.D = maxTTL + time.Second // forward only: see unwatchedJump
		case "clock-rate":
			st.Rate = []float64{1.1, 1.1, 1.25, 2, 0.5}[r.IntN(5)]
		case "latency":
			st.D = time.Duration(100+r.IntN(400)) * time.Millisecond
		}
		steps = append(steps, st)
	}
	if extendAt == 1 || extendAt == 2 {
		extend()
	}
	if r.IntN(3) == 0 {
		steps = append(steps, step(opStatus, -1))
	}
	via := []string{"lib"}
	for _, v := range []string{"http", "other", "fresh"} {
		if r.IntN(2) == 0 {
			via = append(via, v)
		}
	}
	r.Shuffle(len(via)-1, func(i, j int) { via[i+1], via[j+1] = via[j+1], via[i+1] })
	c := step(opContend, -1)
	c.Via = via
	steps = append(steps, c, step(opRelease, -1), step(opHeal, -1))
	if theme == "rollback-extend" && len(faults) == 1 && faults[0].op == "rollback" && slices.ContainsFunc(steps, func(st FuzzStep) bool { return st.Op == opHoldLong }) && side.IntN(2) == 0 {
		steps = rollbackCatchUp(steps, faults[0].m)
	}
	// A config reload, one episode in four, just before B contends.
	if side.IntN(4) == 0 {
		i := slices.IndexFunc(steps, func(st FuzzStep) bool { return st.Op == opContend })
		steps = slices.Insert(steps, i, step(opReload, -1))
	}
	if theme == "rollback-extend" && len(faults) == 1 && faults[0].op == "rollback" && !slices.ContainsFunc(steps, func(st FuzzStep) bool { return st.Op == opHoldLong }) && side.IntN(2) == 0 {
		steps = rollbackRepairFences(steps, faults[0].m)
	}
	// Drawn after every other draw of side, so that every other episode
	// of a seed is as it was.
	if theme == "clock" && len(faults) == 1 && faults[0].op == "clock-jump" && side.IntN(8) == 0 {
		steps = driftJump(steps, faults[0].m)
	}
	// Drawn after drift-jump, for the same reason.
	if len(faults) == 1 && faults[0].op == "debug-reload" && budget > 0 && len(lost) == budget && slices.Contains(aMasters, faults[0].m) && side.IntN(2) == 0 {
		steps = rollbackFence(steps, faults[0].m)
	}
	return steps
}

// rollbackFence turns an episode whose one fault is a debug-reload of one
// of A's masters m (hold with its SET lost on N − quorum masters, save of
// m, …, debug-reload of m, …) into the unwatched-rollback fence attack:
// hold, rollback-unwatched-fence of m with the hold's Lost and TTL, and
// the rest (status, reload, contend, release, heal) as drawn. The save
// is dropped, the step takes its own once A's lock of the hold is
// released (a save while it is held would bring that lock back with the
// rollback, and the granted-lock check would rightly refuse the
// contender); so are the longer lock, the extends, the check and a
// daemon restart: the attack is the step alone (see
// fuzzRunner.rollbackFence). A's lock of the hold ends in the step, so
// the contend step finds its lease over.
func rollbackFence(steps []FuzzStep, m int) []FuzzStep {
	var hold FuzzStep
	out := make([]FuzzStep, 0, len(steps))
	for _, st := range steps {
		switch st.Op {
		case opHoldLong, opExtend, opCheck, opDaemonRestart, opSave:
			continue
		case opHold:
			hold = st
		case "debug-reload":
			st.Op, st.Lost, st.TTL = opRollbackFence, hold.Lost, hold.TTL
		}
		out = append(out, st)
	}
	return out
}

// clientOps adds an episode's multi-key and semaphore operations (each
// in half the episodes) just before A's release, drawn from r, a source
// of their own (seed, e) stream: genEpisode's two sources draw what they
// drew before, so every step of a seed's schedule is as it was, with
// these inserted. A multi's two sets overlap in one workload key (the
// single-key workload contends on k0 and k1 all along) and are asked for
// in either order; every holder's path is drawn from lib, http (a view's
// daemon) and other (the second daemon); an extend, in two draws of
// three, is longer or shorter than what is left.
func clientOps(r *rand.Rand, steps []FuzzStep) []FuzzStep {
	e := steps[0].Episode
	paths := []string{"lib", "http", "other"}
	extendTTL := func() time.Duration {
		return []time.Duration{0, time.Second, 3 * time.Second}[r.IntN(3)]
	}
	var ops []FuzzStep
	if r.IntN(2) == 0 {
		k := r.Perm(3)
		sets := [][]string{{workloadKey(k[0]), workloadKey(k[1])}, {workloadKey(k[1]), workloadKey(k[2])}}
		for _, set := range sets {
			if r.IntN(2) == 0 {
				set[0], set[1] = set[1], set[0]
			}
		}
		st := FuzzStep{Episode: e, Op: opMulti, Master: -1, TTL: 2 * time.Second, Sets: sets}
		for range sets {
			st.Via = append(st.Via, paths[r.IntN(len(paths))])
		}
		st.ExtendTTL = extendTTL()
		ops = append(ops, st)
	}
	if r.IntN(2) == 0 {
		st := FuzzStep{Episode: e, Op: opPermits, Master: -1, TTL: 2 * time.Second, Permits: 2}
		for range st.Permits + 1 {
			st.Via = append(st.Via, paths[r.IntN(len(paths))])
		}
		st.ExtendTTL = extendTTL()
		ops = append(ops, st)
	}
	i := slices.IndexFunc(steps, func(st FuzzStep) bool { return st.Op == opRelease })
	return slices.Insert(steps, i, ops...)
}

// driftJumpTTL is A's lease in a drift-jump episode: long enough that the
// contender's reference readings can be taken after A's hold and still be
// about driftRefAge old when A's key on the jumped master expires.
const driftJumpTTL = 3 * time.Second

// driftJumpD is the drift-jump's clock jump: larger than what A, at the
// run's drift factor 0.01 with the control's 50 ms per-master timeout,
// budgets for a 3 s lock (30 ms + 2 ms + 61 ms allowance = 93 ms), and
// smaller than what a contender at drift factor 0.1 misses with a
// reference reading 1.5–2 s old (0.1 × that + the readings' uncertainty +
// 1 ms). See fuzzRunner.driftJump.
const driftJumpD = 150 * time.Millisecond

// driftJump turns a clock episode (hold, a clock jump on one of A's
// masters m, …) into the mixed-drift-settings masking attack: hold for
// driftJumpTTL, drift-jump of m by driftJumpD, and the rest (status,
// reload, contend, release, heal) as drawn; the longer lock, extends,
// the check before the jump and a daemon restart are dropped, the attack
// is the jump and the contender alone. The drift-jump step contends
// itself (its contender must ask the moment A's key on m is gone); the
// contend step after it finds A's lease over.
func driftJump(steps []FuzzStep, m int) []FuzzStep {
	out := make([]FuzzStep, 0, len(steps))
	for _, st := range steps {
		switch st.Op {
		case opHoldLong, opExtend, opCheck, opDaemonRestart:
			continue
		case opHold:
			st.TTL = driftJumpTTL
		case "clock-jump":
			st.Op, st.D = opDriftJump, driftJumpD
		}
		out = append(out, st)
	}
	return out
}

// rollbackRepairFences turns a rollback-extend episode with no longer lock
// (hold, snapshot of m, extend longer, rollback of m, …) into the
// repair-fences masking attack: the extend and the rollback become
// rollback-repairfences of m with the extend's TTL (the step extends,
// with every daemon stopped), and B contends through view b's library
// client alone. That client reads every master after the extend (the
// step's first act), so it knows m's lease horizon from after it, and
// with the fix (adoptRepair keeps what a Client read when it adopts a
// marker without a quarantine) sees the horizon go down; a contender with
// no such reading (the fresh client, a daemon whose last probe of m came
// before the extend) could not see the rollback with any fix, and only
// the granted-lock check stops it: the nogranted control's finding, not
// this one's. The daemons keep every guard in every control, so they are
// never the fix's second holder either.
func rollbackRepairFences(steps []FuzzStep, m int) []FuzzStep {
	var ttl time.Duration
	for _, st := range steps {
		if st.Op == opExtend {
			ttl = st.TTL
		}
	}
	out := make([]FuzzStep, 0, len(steps))
	for _, st := range steps {
		switch st.Op {
		case opExtend:
			continue
		case "rollback":
			st.Op, st.TTL = opRollbackRepairFences, ttl
		case opContend:
			st.Via = []string{"lib"}
		}
		out = append(out, st)
	}
	return out
}

// rollbackCatchUp turns a rollback-extend episode (hold, hold-long,
// snapshot of m, extend, rollback of m, …) into one whose rollback loses
// A's lock itself and is hidden by a peer: hold-long, snapshot of m (its
// lease horizon already the longer lock's), hold, rollback-catchup of m,
// and the rest (status, contend, release, heal) as drawn. The extend and
// a daemon restart drawn with it are dropped: the attack is the rollback
// and the catch-up alone.
func rollbackCatchUp(steps []FuzzStep, m int) []FuzzStep {
	var hold, long, snap FuzzStep
	var rest []FuzzStep
	for _, st := range steps {
		switch st.Op {
		case opHold:
			hold = st
		case opHoldLong:
			long = st
		case opSnapshot:
			snap = st
		case opExtend, "rollback", opDaemonRestart:
		default:
			rest = append(rest, st)
		}
	}
	rb := FuzzStep{Episode: hold.Episode, Op: opRollbackCatchUp, Master: m}
	return append([]FuzzStep{long, snap, hold, rb}, rest...)
}

// String is one line per step.
func (s FuzzStep) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "e%d %s", s.Episode, s.Op)
	if s.Master >= 0 {
		fmt.Fprintf(&b, " m%d", s.Master)
	}
	if s.Op == opHold || s.Op == opRollbackFence {
		fmt.Fprintf(&b, " lost=%v", s.Lost)
	}
	if s.TTL > 0 {
		fmt.Fprintf(&b, " ttl=%v", s.TTL)
	}
	if s.D != 0 {
		fmt.Fprintf(&b, " d=%v", s.D)
	}
	if s.Rate != 0 {
		fmt.Fprintf(&b, " rate=%g", s.Rate)
	}
	if len(s.Via) > 0 {
		fmt.Fprintf(&b, " via=%s", strings.Join(s.Via, ","))
	}
	for _, set := range s.Sets {
		fmt.Fprintf(&b, " {%s}", strings.Join(set, ","))
	}
	if s.Permits > 0 {
		fmt.Fprintf(&b, " permits=%d", s.Permits)
	}
	if s.ExtendTTL > 0 {
		fmt.Fprintf(&b, " extend=%v", s.ExtendTTL)
	}
	return b.String()
}

// String prints the schedule, one step a line.
func (s FuzzSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule: seed %d, %d masters, %d episodes, %d steps\n", s.Seed, s.Masters, len(s.Episodes()), len(s.Steps))
	for _, st := range s.Steps {
		b.WriteString("  " + st.String() + "\n")
	}
	return b.String()
}

// GoLiteral returns the schedule as a Go expression of type FuzzSchedule
// (durations in whole milliseconds, as the generator draws them), for a
// test written out by the shrinker; it needs package time.
func (s FuzzSchedule) GoLiteral() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos.FuzzSchedule{Seed: %d, Masters: %d, Steps: []chaos.FuzzStep{\n", s.Seed, s.Masters)
	for _, st := range s.Steps {
		fmt.Fprintf(&b, "\t{Episode: %d, Op: %q, Master: %d", st.Episode, st.Op, st.Master)
		if len(st.Lost) > 0 {
			fmt.Fprintf(&b, ", Lost: %#v", st.Lost)
		}
		if st.TTL != 0 {
			fmt.Fprintf(&b, ", TTL: %d * time.Millisecond", st.TTL.Milliseconds())
		}
		if st.D != 0 {
			fmt.Fprintf(&b, ", D: %d * time.Millisecond", st.D.Milliseconds())
		}
		if st.Rate != 0 {
			fmt.Fprintf(&b, ", Rate: %g", st.Rate)
		}
		if len(st.Via) > 0 {
			fmt.Fprintf(&b, ", Via: %#v", st.Via)
		}
		if len(st.Sets) > 0 {
			fmt.Fprintf(&b, ", Sets: %#v", st.Sets)
		}
		if st.Permits != 0 {
			fmt.Fprintf(&b, ", Permits: %d", st.Permits)
		}
		if st.ExtendTTL != 0 {
			fmt.Fprintf(&b, ", ExtendTTL: %d * time.Millisecond", st.ExtendTTL.Milliseconds())
		}
		b.WriteString("},\n")
	}
	b.WriteString("}}")
	return b.String()
}

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
// which starts with a hold and ends with a heal of every fault it made.
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
	// Via: a contend's contenders, in the order they take turns.
	Via []string `json:"via,omitempty"`
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
// again, knowing nothing of it). Faults on no master: daemon-restart (both daemons
// stop and start again, knowing nothing), sleep (D).
//
// heal ends an episode: A's release, every fault undone, and a wait until
// every client counts every master again.
const (
	opHold, opHoldLong, opExtend, opStatus, opContend, opRelease, opCheck = "hold", "hold-long", "extend", "status", "contend", "release", "check"
	opSnapshot, opSave, opReplicaSnapshot                                 = "snapshot", "save", "replica-snapshot"
	opHeal, opSleep, opDaemonRestart                                      = "heal", "sleep", "daemon-restart"
	opUnwatchedJump                                                       = "unwatched-jump"
)

// unwatchedSalt seeds genEpisode's side source (any constant apart from 0).
const unwatchedSalt = 0x756e77617463688e

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
	// Not drawn from here (only by its theme, which keeps the draws of
	// the other themes as they were): opUnwatchedJump.
}

func isFault(op string) bool {
	return op == opUnwatchedJump || slices.ContainsFunc(fuzzFaults, func(f struct {
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
		s.Steps = append(s.Steps, genEpisode(rand.New(rand.NewPCG(seed, uint64(e)+1)), rand.New(rand.NewPCG(seed^unwatchedSalt, uint64(e)+1)), e, masters, maxTTL)...)
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
// side is a source of its own (seed, e) stream, so that adding the
// unwatched-jump theme left every other episode of a seed as it was.
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
	// data-loss check reads: a known masking pair, drawn often.
	for i, f := range faults {
		if f.op == "evict" && r.IntN(2) == 0 {
			faults = slices.Insert(faults, i+1, fault{"resetstat", "", f.m})
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
	return steps
}

// String is one line per step.
func (s FuzzStep) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "e%d %s", s.Episode, s.Op)
	if s.Master >= 0 {
		fmt.Fprintf(&b, " m%d", s.Master)
	}
	if s.Op == opHold {
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
		b.WriteString("},\n")
	}
	b.WriteString("}}")
	return b.String()
}

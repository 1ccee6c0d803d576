package chaos

import (
	"context"
	"fmt"
	"go/format"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFuzzScheduleIsAFunctionOfTheSeed: the same seed draws the same
// schedule, another seed another, and a longer schedule starts with the
// shorter one's episodes.
func TestFuzzScheduleIsAFunctionOfTheSeed(t *testing.T) {
	a, b := GenerateFuzzSchedule(42, 5, 20), GenerateFuzzSchedule(42, 5, 20)
	require.Equal(t, a, b)
	assert.NotEqual(t, a.Steps, GenerateFuzzSchedule(43, 5, 20).Steps)
	short := GenerateFuzzSchedule(42, 5, 5)
	assert.Equal(t, short.Steps, a.Steps[:len(short.Steps)])
	assert.Equal(t, []int{0, 1, 2, 3, 4}, short.Episodes())
	assert.Equal(t, a.String(), b.String())
}

// TestFuzzScheduleKeepsTheFaultBudget: over many seeds and cluster sizes,
// no episode faults more than N − quorum masters nor loses A's SET on more,
// every fault that needs a preparation (a snapshot, a save) comes after
// it, every episode starts with a hold and ends with contend, release and
// heal, and every fault kind is drawn.
func TestFuzzScheduleKeepsTheFaultBudget(t *testing.T) {
	drawn := map[string]bool{}
	for _, n := range []int{3, 5, 7} {
		budget := n - (n/2 + 1)
		for seed := range uint64(100) {
			s := GenerateFuzzSchedule(seed, n, 10)
			for _, e := range s.Episodes() {
				steps := s.Only([]int{e}, nil).Steps
				require.Equal(t, opHold, steps[0].Op, "seed %d episode %d", seed, e)
				assert.LessOrEqual(t, len(steps[0].Lost), budget)
				tail := steps[len(steps)-3:]
				assert.Equal(t, []string{opContend, opRelease, opHeal}, []string{tail[0].Op, tail[1].Op, tail[2].Op})
				masters := map[int]bool{}
				prepared := map[string]bool{}
				for _, st := range steps {
					if st.Master >= 0 {
						require.Less(t, st.Master, n)
					}
					switch st.Op {
					case opSnapshot, opSave, opReplicaSnapshot:
						prepared[fmt.Sprint(st.Op, st.Master)] = true
					}
					if !isFault(st.Op) {
						continue
					}
					drawn[st.Op] = true
					masters[st.Master] = true
					for _, f := range fuzzFaults {
						if f.op == st.Op && f.prep != "" {
							assert.True(t, prepared[fmt.Sprint(f.prep, st.Master)], "seed %d: %s without its %s first", seed, st, f.prep)
						}
					}
				}
				assert.LessOrEqual(t, len(masters), budget, "seed %d episode %d faults masters %v", seed, e, masters)
			}
		}
	}
	for _, f := range fuzzFaults {
		assert.True(t, drawn[f.op], "fault %s never drawn", f.op)
	}
}

// TestFuzzReproTestIsGo: the shrinker's output parses as a Go file, and
// the schedule's Go literal holds every field.
func TestFuzzReproTestIsGo(t *testing.T) {
	s := GenerateFuzzSchedule(7, 5, 2)
	ctl, err := FindFuzzControl("nogranted")
	require.NoError(t, err)
	src := ReproTest(s, ctl)
	_, err = parser.ParseFile(token.NewFileSet(), "repro_test.go", src, 0)
	require.NoError(t, err, src)
	formatted, err := format.Source([]byte(src))
	require.NoError(t, err)
	assert.Equal(t, string(formatted), src, "gofmt'ed")
	assert.Contains(t, src, "TTL: "+strconv.FormatInt(s.Steps[0].TTL.Milliseconds(), 10)+" * time.Millisecond")
	assert.Contains(t, src, `t.Run("control nogranted"`)
	assert.Contains(t, src, fmt.Sprintf("TestFuzzRepro%d", s.Seed))
	_, err = FindFuzzControl("nosuch")
	assert.ErrorContains(t, err, "noquarantine")
}

// fuzzSeed is the seed of the random run: CHAOS_FUZZ_SEED, or drawn.
func fuzzSeed(t *testing.T) uint64 {
	if s := os.Getenv("CHAOS_FUZZ_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		return n
	}
	return rand.Uint64() >> 1
}

// runFuzzTest runs one schedule and checks that the run left no process
// behind: every redis-server it started is gone.
func runFuzzTest(t *testing.T, fc FuzzConfig) *FuzzResult {
	t.Helper()
	before, err := childProcesses()
	require.NoError(t, err)
	fc.Logf = t.Logf
	if fc.Out == "" {
		fc.Out = t.TempDir()
	}
	res, err := RunFuzz(context.Background(), fc)
	require.NoError(t, err)
	after, err := childProcesses()
	require.NoError(t, err)
	assert.ElementsMatch(t, before, after, "processes the fuzz run left behind")
	for _, v := range res.Found {
		t.Logf("%s %s: %s", v.Invariant, v.Key, v.Detail)
	}
	for _, e := range res.EpisodeErrors {
		t.Logf("episode cut short: %s", e)
	}
	t.Log(res.Summary())
	t.Logf("fault pairs: %s", strings.Join(res.Pairs, " "))
	return res
}

// TestFuzz is the short fuzz run of `make test`: a fixed seed and a
// random one (printed; CHAOS_FUZZ_SEED replays it), every guard on, about
// a minute each. No second holder may be found, and each run must have
// run episodes and faults.
func TestFuzz(t *testing.T) {
	for _, seed := range []uint64{1, fuzzSeed(t)} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			t.Logf("fuzz seed %d (replay: CHAOS_FUZZ_SEED=%d, or redlock-chaos fuzz --seed %d --duration 55s)", seed, seed, seed)
			sched := GenerateFuzzSchedule(seed, 5, EpisodesFor(55*time.Second))
			res := runFuzzTest(t, FuzzConfig{Schedule: sched, Duration: 55 * time.Second})
			assert.Empty(t, res.Found, "a safety violation with every guard on (seed %d)", seed)
			assert.Positive(t, res.Episodes)
			assert.Positive(t, res.Faults)
		})
	}
}

// fuzzControlSeeds are, per negative control, a seed whose schedule found
// the control's hole within its first four episodes (5-20 s) when
// measured on a shared two-core machine (chaos/README.md, "Fault
// fuzzing"), so that the test is short. The schedule is the seed's;
// whether a given run finds the hole in exactly the same episode depends
// on timing, so each runs on (up to 8 episodes) until it does.
var fuzzControlSeeds = map[string]uint64{
	"noquarantine":     3,  // episode 1: an extend, then DEBUG RELOAD NOSAVE of a save from before it
	"noclockguard":     3,  // episode 0: a clock at rate 1.25 on one of A's masters
	"novoteclock":      23, // episode 0: a forward clock jump on one of A's masters, B contending through view b's library client alone
	"noextendshortens": 2,  // episode 3: pause and latency on two of A's masters, then an extend shorter
	"nogranted":        2,  // episode 1: A's lock key lost on one of its masters
	"noreference":      1,  // episode 0: an unwatched jump of one of A's masters (and again in episodes 7 and 8)
}

// TestFuzzControls: with each control's guards off, the fuzzer finds a
// second holder, starting from a fixed seed and stopping at the first
// finding.
func TestFuzzControls(t *testing.T) {
	for _, ctl := range FuzzControls() {
		if ctl.Unreached != "" {
			t.Logf("control %s: not run: %s", ctl.Name, ctl.Unreached)
			continue
		}
		t.Run(ctl.Name, func(t *testing.T) {
			seed, ok := fuzzControlSeeds[ctl.Name]
			require.True(t, ok, "no seed recorded for control %s", ctl.Name)
			sched := GenerateFuzzSchedule(seed, 5, 8)
			res := runFuzzTest(t, FuzzConfig{Schedule: sched, Duration: 2 * time.Minute, Control: &ctl, StopAtFind: true})
			assert.True(t, res.ControlFound, "control %s (as row %s): the fuzzer must find a second holder in an episode of the faults its guards are about", ctl.Name, ctl.Row)
			if len(res.Found) > 0 {
				assert.True(t, slices.ContainsFunc(res.Found, func(v Violation) bool { return v.Invariant == I1 }), "a second holder (I1)")
			}
		})
	}
}

// childProcesses lists the processes whose parent is this one, by name
// (for the test that a run leaves none behind).
func childProcesses() ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	me := fmt.Sprint(os.Getpid())
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) > 1 && fields[1] == me && fields[0] != "Z" {
			out = append(out, s[strings.IndexByte(s, '(')+1:i])
		}
	}
	return out, nil
}

// TestFuzzControlAttributes: a control owns a finding only in an episode
// of the faults its guards are about, with nothing else but neutral ones.
func TestFuzzControlAttributes(t *testing.T) {
	vote, err := FindFuzzControl("novoteclock")
	require.NoError(t, err)
	assert.True(t, vote.Attributes([]string{"clock-jump", "extend-longer"}))
	assert.True(t, vote.Attributes([]string{"kill", "clock-jump"}))
	assert.False(t, vote.Attributes([]string{"clock-jump", "lose-lock"}), "a lost lock key is the granted-lock check's")
	assert.False(t, vote.Attributes([]string{"kill", "pause"}))
	ext, err := FindFuzzControl("noextendshortens")
	require.NoError(t, err)
	assert.True(t, ext.Attributes([]string{"kill", "blackhole", "extend-shorter"}))
	assert.False(t, ext.Attributes([]string{"kill", "extend-longer"}))
	granted, err := FindFuzzControl("nogranted")
	require.NoError(t, err)
	assert.True(t, granted.Attributes([]string{"lose-lock"}))
	var none *FuzzControl
	assert.True(t, none.Attributes(nil))
}

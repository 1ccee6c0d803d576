package chaos

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/redlock"
)

// TestGroupDrills runs the rows of two master groups on the process
// back-end (ten masters, the daemons serving both groups). Safe rows must
// show no violation, and the untouched group must have served every
// acquire of its keys; the control must catch two holders.
func TestGroupDrills(t *testing.T) {
	only := os.Getenv("CHAOS_SCENARIO")
	for _, sc := range GroupMatrix() {
		if only != "" && !strings.Contains(","+only+",", ","+sc.Name+",") {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			// A 500ms per-master timeout for the daemons and the drill's
			// clients alike, as the daemon's end-to-end tests use: with
			// ten masters, 64 clients (groups-add) and -race on two
			// shared cores, the drill process itself is starved, and at
			// 150ms healthy masters' votes (the PING monitor sees them
			// answer in time) time out in the client by the dozen.
			timing := DaemonConfig{PerMasterTimeout: 500 * time.Millisecond}
			cfg := testConfig(t)
			cfg.Client = timing
			// The change of groups runs on groups of three (six masters,
			// as the daemon's own change-under-load test): what the
			// change adds is the same with five, and six fewer
			// redis-servers leave the 64 clients the CPU they need.
			masters := 5
			if strings.HasPrefix(sc.Name, "groups-add") {
				masters = 3
			}
			res := runLocalWith(t, sc, ProcessOptions{Masters: masters, Groups: 2, Daemon: timing, Logf: t.Logf}, cfg)
			require.Empty(t, res.Error, "the drill itself failed")
			assert.Zero(t, res.Unexpected, "unexpected violations: %v", res.Counts)
			assert.Empty(t, res.Missed, "a negative control must catch its violation")
			assert.Positive(t, res.Grants, "the workload must have run")
			assert.Zero(t, res.Counts[Untouched], "the untouched group must serve every call for its keys")
			assert.Zero(t, res.Counts[CallFailed], "no release may find its lock gone")
			if sc.Name == "groups-pause-majority" {
				// Fail-closed, not vacuous: g0's keys were refused for
				// want of a quorum while its majority was stopped.
				assert.Positive(t, refusedOnGroup(t, res.History, 0), "acquires of g0's keys refused for want of a quorum")
			}
		})
	}
}

// refusedOnGroup counts the acquires of keys on group g that failed for
// want of a quorum, placing keys as the target's daemons do.
func refusedOnGroup(t *testing.T, h *History, g int) int {
	t.Helper()
	require.NotNil(t, h)
	place, err := redlock.NewPlacement(groupNames(2)...)
	require.NoError(t, err)
	space := KeySpace{Prefix: "redlock:", Account: localAccount, Namespace: "chaos"}
	n := 0
	for _, op := range h.Ops {
		if op.Kind == "acquire" && !op.OK && op.Outcome == "quorum" && place.Group(space.LockKey(op.Key)) == g {
			n++
		}
	}
	return n
}

// TestCheckGroupScope: with two groups of five, three masters of g0
// faulty is beyond g0's tolerance but touches g1 not at all. A failed
// probe of a g1 key is an I5 violation, one of a g0 key is not; a grant of
// a g0 key is an I6 violation, one of a g1 key is not. Without the groups
// the same history reads as one group of ten with three faulty: tolerated.
func TestCheckGroupScope(t *testing.T) {
	rec := NewRecorder()
	rec.Faulted("pause g0's majority", AllViews, 1*sec, 1*sec, 0, 2, 4)
	rec.Healing("resume", AllViews, 5*sec, 5*sec, 0, 2, 4)
	rec.Settled(5*sec, AllViews, 0, 2, 4)
	h := rec.History(nil)
	probe := func(id int, key string) Op {
		op := failedProbe(id, 2*sec)
		op.Key = key
		return op
	}
	granted := Op{ID: 10, Client: 1, Via: "lib/a", Kind: "acquire", Key: "a0", OK: true, Fence: 7,
		Invoke: 3 * sec, Return: 3*sec + 10*time.Millisecond, ValidUntil: 4 * sec, Bound: sec, PMT: 50 * time.Millisecond}
	grantedG1 := granted
	grantedG1.ID, grantedG1.Key = 11, "b0"
	h.Ops = []Op{probe(1, "a1"), probe(2, "b1"), granted, grantedG1}
	p := CheckParams{
		Masters: 10, FastSlack: 300 * time.Millisecond,
		Groups:  [][]int{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}},
		GroupOf: func(key string) int { return map[byte]int{'a': 0, 'b': 1}[key[0]] },
	}
	vs := Check(h, p)
	var i5, i6 []string
	for _, v := range vs {
		switch v.Invariant {
		case I5:
			i5 = append(i5, v.Key)
		case I6:
			i6 = append(i6, v.Key)
		}
	}
	assert.Equal(t, []string{"b1"}, i5, "I5: only the probe of the untouched group must succeed")
	assert.Equal(t, []string{"a0"}, i6, "I6: only the grant on the group without a quorum is one")

	p.Groups, p.GroupOf = nil, nil
	flat := Count(Check(h, p))
	assert.Equal(t, 2, flat[I5], "one group of ten tolerates three faulty: both probes must succeed")
	assert.Zero(t, flat[I6])
}

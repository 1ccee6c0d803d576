package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdoptedMarkerIsPublishedQuarantined: adopting another daemon's
// repair marker on a master where this Client saw no loss (the other
// daemon repaired a FLUSHALL before this one looked) publishes the marker
// as the expected one only once the repair's quarantine is set. A vote
// that reads the marker passes the marker check as soon as it is the
// expected one, and nothing else keeps it out: with the quarantine set
// after the publication, another goroutine found the master counting with
// the repair's marker in place, while locks it lost were still valid (a
// review; without the fix this test sees it within a few hundred
// adoptions). Each round resets the master to an older marker and no
// quarantine, then adopts a new repair marker while a second goroutine
// watches for the new marker published on a counting master.
func TestAdoptedMarkerIsPublishedQuarantined(t *testing.T) {
	c := newClient(t, WithHealthInterval(time.Hour))
	warmUp(c)
	m := c.masters[4]
	require.True(t, m.counts(), "master 4 counts before the test")
	old := *m.st.inc.expectedMarker.Load()

	var (
		current    atomic.Pointer[string] // the round's marker value
		stop       atomic.Bool
		violations atomic.Int64
		wg         sync.WaitGroup
	)
	wg.Go(func() {
		for !stop.Load() {
			want := current.Load()
			e := m.st.inc.expectedMarker.Load()
			if want == nil || e == nil || *e != *want {
				continue
			}
			if m.counts() && m.st.inc.expectedMarker.Load() == e {
				violations.Add(1)
			}
		}
	})
	const rounds = 3000
	for i := range rounds {
		// Back to the state before a repair: the old marker, no
		// quarantine. The marker goes first: the watcher discards what
		// it read across the change.
		m.st.inc.expectedMarker.Store(&old)
		m.st.excludedUntil.Store(0)
		now := time.Now()
		value := fmt.Sprintf("repaired %d %016x %d %s", now.UnixMilli(), i, now.Add(5*time.Second).UnixMilli(), m.runID())
		mk, ok := parseMarker(value)
		require.True(t, ok)
		current.Store(&value)
		m.adoptRepair(value, mk, now)
		require.False(t, m.counts(), "round %d: quarantined after the adoption", i)
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, violations.Load(), "the adopted repair's marker was seen published on a counting master")
}

// TestRestartIsPublishedWithItsLoss: a master seen with a new run_id (a
// restart without durable persistence) is never shown counting as the new
// process. /readyz showed the new run_id with the master counting for the
// milliseconds between the run_id's store and the loss's judgment, and a
// test that waited for "new run_id, counting" went on while the master was
// still in its quarantine (CI: TestRollingMasterRestartsKeepTheGateOpen).
// Each round resets the master to counting under its last run_id, then
// observes a new one while a second goroutine reads Masters.
func TestRestartIsPublishedWithItsLoss(t *testing.T) {
	c := newClient(t, WithHealthInterval(time.Hour))
	warmUp(c)
	m := c.masters[4]
	require.True(t, m.counts(), "master 4 counts before the test")

	var (
		current    atomic.Pointer[string] // the round's new run_id
		stop       atomic.Bool
		violations atomic.Int64
		wg         sync.WaitGroup
	)
	wg.Go(func() {
		for !stop.Load() {
			cur := current.Load()
			if cur == nil {
				continue
			}
			s := c.Masters()[4]
			if s.RunID == *cur && s.Counting && current.Load() == cur {
				violations.Add(1)
			}
		}
	})
	const rounds = 2000
	for i := range rounds {
		id := fmt.Sprintf("%040x", i+1)
		// The watcher looks for the new run_id from here on; what it
		// read under the last one is discarded.
		current.Store(&id)
		m.st.conds.clear(condRepairPending)
		m.st.excludedUntil.Store(0)
		m.observeRunID(id, "a test")
		require.False(t, m.counts(), "round %d: the restart is a loss", i)
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, violations.Load(), "a master was shown counting as the process with its new run_id")
}

// TestVoteCarryingTheAdoptedMarkerCounts: a vote sent before a probe
// adopted a repair marker, but that read that marker (it ran after the
// repair's write), counts: `redlockd repair-fences` writes a "kept" marker
// on every master it finds intact, and every acquire in flight as the
// probes adopted them was refused on those masters (CI: three of five
// refused, 503 just after the run). A vote that read the marker before it
// is still refused: it may have run before the repair's write.
func TestVoteCarryingTheAdoptedMarkerCounts(t *testing.T) {
	ctx := context.Background()
	slow := quietDeployment(t)
	m := slow.masters[4]
	r := direct(t)[4]
	key := newKey(t)
	warmUp(slow)
	vote := func() (voteReply, reply) { return statusVote(t, slow, 4, key) }
	before, beforeRep := vote() // reads the marker the repair replaces

	// What repair-fences writes on a master it found intact.
	now, err := r.Time(ctx).Result()
	require.NoError(t, err)
	value := fmt.Sprintf("repaired %d 0123456789abcdef %d %s ev=0 kept", now.UnixMilli(), now.UnixMilli(), m.runID())
	require.NoError(t, r.Set(ctx, slow.opts.markerKey, value, 0).Err())
	after, afterRep := vote()
	require.Equal(t, value, after.marker)

	// A probe adopts it before the votes are judged.
	gen := m.st.inc.repairGen.Load()
	require.True(t, m.markerMatches(value, now, &sighting{by: "a probe", gen: gen}))
	require.Greater(t, m.st.inc.repairGen.Load(), gen, "a new repair generation")
	require.True(t, m.counts(), "a kept marker ends no loss: no quarantine")

	assert.NoError(t, m.checkVote(after, afterRep), "the vote read the adopted marker")
	assert.ErrorIs(t, m.checkVote(before, beforeRep), ErrMasterQuarantined, "control: the vote read the marker before the repair")
}

package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSetHoldIsHoldOfEachKey: a set recorded by the drill (one Op per key)
// is judged by the single-key checker as a hold of each of its keys: a
// grant of one of them while the set is valid is I1 on that key, naming
// the set's Op; a later set with a lower fence is I2 on each key.
func TestSetHoldIsHoldOfEachKey(t *testing.T) {
	d := &Drill{rec: NewRecorder()}
	ms := time.Millisecond
	set := Op{Client: 0, Via: "lib/a", Kind: "acquire", Set: []string{"x", "y"}, OK: true, Fence: 10,
		Invoke: 100 * ms, Return: 110 * ms, ValidUntil: 1000 * ms, Bound: time.Second}
	ids := d.addPerKey(set, set.Set)
	require.Len(t, ids, 2)
	single := d.rec.Add(Op{Client: 1, Via: "lib/b", Kind: "acquire", Key: "y", OK: true, Fence: 11,
		Invoke: 400 * ms, Return: 410 * ms, ValidUntil: 1400 * ms, Bound: time.Second})
	late := Op{Client: 2, Via: "http/a", Kind: "acquire", Set: []string{"y", "x"}, OK: true, Fence: 9,
		Invoke: 2000 * ms, Return: 2010 * ms, ValidUntil: 3000 * ms, Bound: time.Second}
	lateIDs := d.addPerKey(late, late.Set)

	vs := Check(d.rec.History(nil), CheckParams{Masters: 5})
	var i1, i2 []Violation
	for _, v := range vs {
		switch v.Invariant {
		case I1:
			i1 = append(i1, v)
		case I2:
			i2 = append(i2, v)
		}
	}
	require.Len(t, i1, 1, "%v", vs)
	assert.Equal(t, "y", i1[0].Key)
	assert.Equal(t, []int{ids[1], single}, i1[0].Ops, "the set's Op for y and the single grant")
	keys := map[string]bool{}
	for _, v := range i2 {
		keys[v.Key] = true
	}
	assert.Equal(t, map[string]bool{"x": true, "y": true}, keys, "fence 9 after 10 on both keys of the set: %v", i2)
	hist := d.rec.History(nil)
	for _, id := range append(ids, lateIDs...) {
		assert.Len(t, hist.Ops[id-1].Set, 2, "every per-key Op names its set")
	}
}

// lockersDrill starts a process target (real masters and daemons) and a
// drill named name on it, closed with the test, and returns the drill,
// its config and its lockers: the library clients, then the daemons over
// HTTP (at least two), with a context of a minute.
func lockersDrill(t *testing.T, name string) (context.Context, *Drill, Config, []locker) {
	t.Helper()
	target, err := NewProcessTarget(ProcessOptions{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, target.Close()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	require.NoError(t, target.Ready(ctx))
	cfg := testConfig(t).withDefaults()
	d, err := newDrill(ctx, target, cfg, &Scenario{Name: name})
	require.NoError(t, err)
	t.Cleanup(d.close)
	lockers := append(append([]locker{}, d.libs...), d.https...)
	require.GreaterOrEqual(t, len(lockers), 2)
	return ctx, d, cfg, lockers
}

// TestLockersTakeSets: through every locker of a drill (library clients
// and daemons over HTTP, on real masters), a set is all or nothing and
// excludes an overlapping set asked for in the other order until it is
// released; the next holder's fence is higher; each key's Op is recorded.
func TestLockersTakeSets(t *testing.T) {
	ctx, d, cfg, lockers := lockersDrill(t, "lockers")
	// The TTL outlasts a stall of this shared machine, and a grant that
	// must happen may wait out a moment with no quorum in time.
	ttl, wait := cfg.Client.MaxTTL, 3*time.Second
	for i, l := range lockers {
		other := lockers[(i+1)%len(lockers)]
		t.Run(l.Name(), func(t *testing.T) {
			ab := []string{l.Name() + ":a", l.Name() + ":b"}
			bc := []string{l.Name() + ":c", l.Name() + ":b"}
			first, err := d.AcquireSet(ctx, l, 0, ab, ttl, wait)
			require.NoError(t, err)
			require.Len(t, first.ids, 2)

			// Refused, not merely unanswered: single attempts until one
			// is refused because b is held; none may be granted.
			refused := false
			for deadline := time.Now().Add(wait); !refused && time.Now().Before(deadline); {
				_, err = d.AcquireSet(ctx, other, 1, bc, ttl, 0)
				require.Error(t, err, "%s granted %v while %s held %v", other.Name(), bc, l.Name(), ab)
				refused = outcomeOf(err) == "held"
			}
			require.True(t, refused, "never refused as held: %v", err)
			// All or nothing: the refused set left c free.
			c, err := d.AcquireSet(ctx, other, 1, []string{bc[0], l.Name() + ":d"}, ttl, wait)
			require.NoError(t, err, "c must be free after the refused set")
			require.NoError(t, d.ReleaseSet(ctx, other, 1, c))

			require.NoError(t, d.ReleaseSet(ctx, l, 0, first))
			second, err := d.AcquireSet(ctx, other, 1, bc, ttl, wait)
			require.NoError(t, err)
			assert.Greater(t, second.g.fence, first.g.fence)
			require.NoError(t, d.ReleaseSet(ctx, other, 1, second))
		})
	}
	h := d.rec.History(nil)
	byKind := map[string]int{}
	for _, op := range h.Ops {
		if len(op.Set) > 0 && op.OK {
			byKind[op.Kind]++
		}
	}
	// Per locker: 3 sets of 2 keys granted and released.
	assert.Equal(t, map[string]int{"acquire": 6 * len(lockers), "release": 6 * len(lockers)}, byKind)
	assert.Empty(t, Check(h, CheckParams{Masters: d.T.Masters()}))
}

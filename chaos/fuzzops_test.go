package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockersExtendSetsAndPermits: through the library and a daemon's
// HTTP API alike, extendRecorded extends a multi-key lock as one and a
// semaphore's permit on its slot, the new validity later than the old,
// and records one extend Op per key naming that key's acquire; a token
// that holds nothing is refused as not held.
func TestLockersExtendSetsAndPermits(t *testing.T) {
	ctx, d, _, lockers := lockersDrill(t, "extends")
	ttl, longer, wait := 2*time.Second, 4*time.Second, 3*time.Second
	for _, l := range lockers {
		t.Run(l.Name(), func(t *testing.T) {
			set := []string{l.Name() + ":x", l.Name() + ":y"}
			s, err := d.AcquireSet(ctx, l, 0, set, ttl, wait)
			require.NoError(t, err)
			g, ids, err := d.extendRecorded(ctx, l, 0, s.g, s.keys, s.ids, longer)
			require.NoError(t, err)
			assert.Equal(t, s.ids, ids)
			assert.True(t, g.validUntil.After(s.g.validUntil), "the set's validity moved later")
			s.g = g
			stale := s.g
			stale.token = "00000000000000000000000000000000"
			_, _, err = d.extendRecorded(ctx, l, 0, stale, s.keys, s.ids, longer)
			assert.Equal(t, "not-held", outcomeOf(err), "%v", err)
			require.NoError(t, d.ReleaseSet(ctx, l, 0, s))

			name := l.Name() + ":sem"
			p, id, err := d.AcquireWith(ctx, l, 1, acquireArgs{key: name, ttl: ttl, wait: wait, permits: 2})
			require.NoError(t, err)
			key := p.historyKey()
			pg, pids, err := d.extendRecorded(ctx, l, 1, p, []string{key}, []int{id}, longer)
			require.NoError(t, err)
			assert.Equal(t, []int{id}, pids)
			assert.True(t, pg.validUntil.After(p.validUntil), "the permit's validity moved later")
			require.NoError(t, d.Release(ctx, l, 1, name, pg, id))
		})
	}
	h := d.rec.History(nil)
	extends := map[string]int{}
	for _, op := range h.Ops {
		if op.Kind != "extend" {
			continue
		}
		require.Positive(t, op.Grant)
		acq := h.Ops[op.Grant-1]
		assert.Equal(t, "acquire", acq.Kind)
		assert.Equal(t, acq.Key, op.Key, "an extend names its key's acquire")
		if op.OK {
			extends[op.Key]++
		}
	}
	// Per locker: the set's two keys and the permit's slot, once each.
	assert.Len(t, extends, 3*len(lockers))
	assert.Empty(t, Check(h, CheckParams{Masters: d.T.Masters()}))
}

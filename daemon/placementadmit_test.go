package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/redlockd/redlockd/redlock"
)

// TestRecordedAdmission: a master counts by a recorded admission only for
// the repair it was admitted for and a max TTL no longer than the
// admitting round's: a later repair, or a daemon that waits longer for
// another layout's locks, admits from its own rounds.
func TestRecordedAdmission(t *testing.T) {
	repaired := time.UnixMilli(1_796_630_554_220)
	block := 600 * time.Second
	answer := func(extra string, kept time.Time) redlock.MasterAnswer {
		return redlock.MasterAnswer{Code: 1, Extra: extra, KeptSince: kept}
	}
	for _, c := range []struct {
		name  string
		a     redlock.MasterAnswer
		block time.Duration
		want  bool
	}{
		{"admitted for this repair", answer("0 0 1796630554220:600000", repaired), block, true},
		{"among others, a shorter max TTL", answer("0 0 1796630554220:600000", repaired), time.Second, true},
		{"one of several", answer("1796630560000 0 1796630000000:600000 1796630554220:900000", repaired), block, true},
		{"no admission", answer("0 0", repaired), block, false},
		{"admitted for an earlier repair", answer("0 0 1796630000000:600000", repaired), block, false},
		{"a longer max TTL now", answer("0 0 1796630554220:600000", repaired), block + time.Millisecond, false},
		{"malformed", answer("0 0 1796630554220", repaired), block, false},
		{"malformed number", answer("0 0 1796630554220:6e5", repaired), block, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, _ := parseRegistryExtra(c.a.Extra)
			assert.Equal(t, c.want, x.admittedFor(c.a.KeptSince, c.block))
		})
	}
	x, ok := parseRegistryExtra("1796630560000.0 1796630575000 1:2")
	assert.True(t, ok)
	assert.Equal(t, registryExtra{watched: 1796630560000, free: 1796630575000, admissions: []registryAdmission{{1, 2}}}, x)
	_, ok = parseRegistryExtra("")
	assert.False(t, ok, "an answer without the watched score is not the registry's")
	_, ok = parseRegistryExtra("0")
	assert.False(t, ok, "nor one without the time other layouts' locks may stand until")
}

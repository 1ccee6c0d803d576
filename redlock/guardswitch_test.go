package redlock

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// TestGuardSwitch: the hook the drills use from outside this package turns
// exactly the named protection off, and refuses a guard it does not know.
func TestGuardSwitch(t *testing.T) {
	for _, tc := range []struct {
		g                      guardswitch.Guard
		quarantine, clockGuard bool
	}{
		{guardswitch.Quarantine, false, true},
		{guardswitch.ClockGuard, true, false},
	} {
		o := defaultOptions()
		opt, ok := guardswitch.Disable(tc.g).(Option)
		if assert.True(t, ok, "%v: Disable returns a redlock.Option", tc.g) {
			opt(&o)
		}
		assert.Equal(t, tc.quarantine, o.quarantine, "%v: quarantine", tc.g)
		assert.Equal(t, tc.clockGuard, o.clockGuard, "%v: clock guard", tc.g)
	}
	assert.Panics(t, func() { guardswitch.Disable(guardswitch.Guard(99)) })
}

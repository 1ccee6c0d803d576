package redlock

import (
	"regexp"
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

// TestControlScripts: the product scripts carry no switch a caller could
// use to skip a check; a negative control gets variants with exactly the
// guard's check taken out, and every other script is the product's.
func TestControlScripts(t *testing.T) {
	skip := regexp.MustCompile(`(KEYS|ARGV)\[\d+\] [~=]= ''|ARGV\[\d+\] == '0'`)
	for _, src := range productScripts.lane {
		assert.Empty(t, skip.FindAllString(src, -1), "no argument turns a check off")
	}
	o := defaultOptions()
	assert.Same(t, productScripts, controlScripts(&o), "every guard on: the product scripts")

	withGuardOff(guardswitch.DataLossCheck)(&o)
	dl := controlScripts(&o)
	assert.NotContains(t, dl.lane[0], intactLine, "data-loss check off: the vote's check is out")
	assert.Contains(t, dl.lane[0], "local intact = true")
	assert.NotEqual(t, productScripts.fence.Hash(), dl.fence.Hash())
	assert.NotEqual(t, productScripts.scan.Hash(), dl.scan.Hash())
	assert.NotEqual(t, productScripts.fenceMulti.Hash(), dl.fenceMulti.Hash())
	assert.Contains(t, dl.lane[2], neverShortensLine, "extends still never shorten")

	o = defaultOptions()
	withGuardOff(guardswitch.ExtendNeverShortens)(&o)
	es := controlScripts(&o)
	assert.Equal(t, productScripts.acquire.Hash(), es.acquire.Hash(), "acquire unchanged")
	assert.NotContains(t, es.lane[2], neverShortensLine, "extend may shorten")
	assert.NotEqual(t, productScripts.extendMulti.Hash(), es.extendMulti.Hash())
	assert.Contains(t, es.lane[0], intactLine, "the data-loss check stays")

	assert.Panics(t, func() { takeOut("local x = 1", intactLine, "") }, "a line no longer in the script")
}

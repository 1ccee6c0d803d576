package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redlockd/redlockd/chaos"
)

// The replay line of a control's finding names the control: the shrunk
// schedule does not carry it, and replayed without it every guard is on.
func TestReplayLineNamesTheControl(t *testing.T) {
	ctl, err := chaos.FindFuzzControl("nofenceevery")
	assert.NoError(t, err)
	assert.Equal(t, "redlock-chaos fuzz --replay out/seed-18/shrunk.json --control nofenceevery", replayLine("out/seed-18/shrunk.json", ctl))
	assert.Equal(t, "redlock-chaos fuzz --replay out/seed-7/shrunk.json", replayLine("out/seed-7/shrunk.json", nil))
}

// A control run that found violations only in episodes its guards are not
// about does not say it found none.
func TestControlMissedSaysWhatWasFound(t *testing.T) {
	ctl, err := chaos.FindFuzzControl("noextendshortens")
	assert.NoError(t, err)
	assert.EqualError(t, controlMissed(ctl, 1), "fuzz: negative control noextendshortens: 1 safety violation(s) found, none in an episode its guards are about: the control did not show its bug")
	assert.EqualError(t, controlMissed(ctl, 0), "fuzz: negative control noextendshortens: no safety violation found")
}

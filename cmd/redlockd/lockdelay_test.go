package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// TestLockAcquireLockDelay: a lock taken with --lock-delay and never
// released blocks the key for the delay after its TTL; its late release
// ends the delay.
func TestLockAcquireLockDelay(t *testing.T) {
	base := daemonURL(t)
	code, out, errOut := runLock(t, base, "acquire", "--key", "job:delay", "--ttl", "1s", "--lock-delay", "5s")
	require.Equal(t, 0, code, errOut)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	token := got["token"].(string)
	time.Sleep(1200 * time.Millisecond)
	code, _, errOut = runLock(t, base, "run", "--key", "job:delay", "--ttl", "5s", "--", "true")
	assert.Equal(t, exitBusy, code, "in the delay: %s", errOut)
	assert.Contains(t, errOut, `lock run: "job:delay" is in its lock-delay (its last holder's lock ended without a release)`)
	code, _, _ = runLock(t, base, "release", "--key", "job:delay", "--token", token)
	assert.Equal(t, exitNotHeld, code, "the lock itself had expired")
	code, _, errOut = runLock(t, base, "run", "--key", "job:delay", "--ttl", "5s", "--", "true")
	assert.Equal(t, 0, code, "the release ended the delay: %s", errOut)

	code, _, errOut = runLock(t, base, "acquire", "--key", "job:delay", "--lock-delay", "61s")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--lock-delay: 1m1s must be whole milliseconds from 0 to 60s")
}

// TestLockDelayZeroOptsOut: with an account default lock_delay, --lock-delay
// 0s is sent (lock_delay_ms: 0) and takes none; without the flag the
// default applies. Before, 0s was taken for "not given": the CLI could not
// opt out, although the daemon's own error message says to send 0.
func TestLockDelayZeroOptsOut(t *testing.T) {
	delay := config.Duration(15 * time.Second)
	base := daemonURL(t, func(c *config.Config) { c.AccountDefaults.LockDelay = &delay })
	for _, c := range []struct {
		key  string
		args []string
		busy bool
	}{
		{"job:optout", []string{"--lock-delay", "0s"}, false},
		{"job:default", nil, true},
	} {
		code, _, errOut := runLock(t, base, append([]string{"acquire", "--key", c.key, "--ttl", "1s"}, c.args...)...)
		require.Equal(t, 0, code, errOut)
		time.Sleep(1200 * time.Millisecond) // the lock ends without a release
		code, _, errOut = runLock(t, base, "acquire", "--key", c.key, "--ttl", "1s", "--lock-delay", "0s")
		if c.busy {
			assert.Equal(t, exitBusy, code, "%s: the account's 15 s default applied: %s", c.key, errOut)
		} else {
			assert.Equal(t, 0, code, "%s: no delay was asked for: %s", c.key, errOut)
		}
	}
}

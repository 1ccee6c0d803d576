package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/config"
)

// assertOneLineOnePrefix checks what `redlockd lock` printed on stderr: one
// line that starts with want and names the program once (the client
// package's errors start with "redlockd: " too; it used to print
// "redlockd: redlockd: acquire: …").
func assertOneLineOnePrefix(t *testing.T, errOut, want string) {
	t.Helper()
	assert.True(t, strings.HasPrefix(errOut, want), "stderr %q does not start with %q", errOut, want)
	assert.Equal(t, 1, strings.Count(errOut, "redlockd"), "the program is named once: %q", errOut)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
}

// The errors of `redlockd lock`, from the real binary against the real
// daemon (and against nothing), each printed once with one "redlockd: ".
func TestLockErrorsNameTheProgramOnce(t *testing.T) {
	base := daemonURL(t)
	const token = "0123456789abcdef0123456789abcdef"
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"job:errs:held","ttl":60}`)
	require.Equal(t, 200, st, env.Msg)
	require.Equal(t, true, env.Data["acquired"])

	for _, tc := range []struct {
		base string
		args []string
		code int
		want string
	}{
		// nothing listening
		{"http://127.0.0.1:1", []string{"acquire", "--key", "k"}, 69, "redlockd: lock acquire: no answer: "},
		{"http://127.0.0.1:1", []string{"status", "--key", "k"}, 69, "redlockd: lock status: no answer: "},
		{"http://127.0.0.1:1", []string{"extend", "--key", "k", "--token", token}, 69, "redlockd: lock extend: no answer: "},
		{"http://127.0.0.1:1", []string{"release", "--key", "k", "--token", token}, 69, "redlockd: lock release: no answer: "},
		{"http://127.0.0.1:1", []string{"run", "--key", "k", "--ttl", "30s", "--", "true"}, 69, "redlockd: lock run: acquire: no answer: "},
		// refused by the client before any request
		{"ftp://127.0.0.1:1", []string{"status", "--key", "k"}, 64, `redlockd: lock status: invalid request: base URL "ftp://127.0.0.1:1": scheme must be http or https`},
		// refused by the daemon
		{base, []string{"acquire", "--key", "k", "--ttl", "200h"}, 64, "redlockd: lock acquire: HTTP 400 bad_request: ttl: 720000 is above the maximum of "},
		{base, []string{"run", "--key", "k", "--ttl", "200h", "--", "true"}, 64, "redlockd: lock run: acquire: HTTP 400 bad_request: ttl: "},
		// negative outcomes
		{base, []string{"acquire", "--key", "job:errs:held"}, 75, "redlockd: lock acquire: lock is held by another owner"},
		{base, []string{"release", "--key", "job:errs:free", "--token", token}, 76, "redlockd: lock release: lock not held"},
		{base, []string{"extend", "--key", "job:errs:free", "--token", token}, 76, "redlockd: lock extend: lock not held"},
		// usage
		{base, []string{"acquire", "--key", "k", "--ttl", "1500ms"}, 64, "redlockd: lock acquire: --ttl: 1.5s must be a whole number of seconds"},
		// wait_ms counts whole milliseconds: 999us was sent as no wait.
		{base, []string{"acquire", "--key", "k", "--wait", "999us"}, 64, "redlockd: lock acquire: --wait: 999µs must be whole milliseconds"},
		{base, []string{"run", "--key", "k", "--ttl", "5s", "--wait", "1500us", "--", "true"}, 64, "redlockd: lock run: --wait: 1.5ms must be whole milliseconds"},
	} {
		code, _, errOut := runLock(t, tc.base, tc.args...)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		assertOneLineOnePrefix(t, errOut, tc.want)
	}

	// An account limit: 429 is its own exit code (77), not 70's
	// "unexpected answer" (a break-it pass: scripts could not tell a
	// limit from a daemon bug).
	one := 1
	limited := daemonURL(t, func(c *config.Config) { c.APIKeys[0].MaxLocks = &one })
	st, env, _ = post(t, lockURL(limited), keyA, `{"action":"acquire","key":"job:errs:first","ttl":60}`)
	require.Equal(t, 200, st, env.Msg)
	require.Equal(t, true, env.Data["acquired"])
	for _, args := range [][]string{{"acquire", "--key", "job:errs:second"}, {"run", "--key", "job:errs:second", "--ttl", "30s", "--", "true"}} {
		require.Eventually(t, func() bool {
			code, _, errOut := runLock(t, limited, args...)
			if code != 77 {
				return false // until the limits' first sync counts the lock
			}
			assert.Contains(t, errOut, "HTTP 429 too_many_locks")
			return true
		}, 10*time.Second, 50*time.Millisecond, "%v exits 77 on a 429", args)
	}

	// A wrong API key: 401, named once, and the key never printed.
	bad := exec.Command(binary, "lock", "status", "--key", "k")
	bad.Env = append(os.Environ(), "REDLOCKD_URL="+base, "REDLOCKD_API_KEY=wrong-key-0123456789")
	var stderr strings.Builder
	bad.Stderr = &stderr
	var ee *exec.ExitError
	require.ErrorAs(t, bad.Run(), &ee)
	assert.Equal(t, 64, ee.ExitCode())
	assertOneLineOnePrefix(t, stderr.String(), "redlockd: lock status: HTTP 401 unauthorized: ")
	assert.NotContains(t, stderr.String(), "wrong-key-0123456789")
}

// cliText drops the client package's prefix wherever a client error's text
// sits in the message (wrapped, joined, or as the Kind an *client.Error
// with no message spells out) and keeps the rest, errors.Is included.
func TestCLIText(t *testing.T) {
	extend := &client.Error{Kind: client.ErrUnavailable, Action: "extend", Status: 503, Code: "quorum_unavailable", Msg: "no quorum"}
	lost := errors.Join(client.ErrLost, errors.Join(errors.New("validity about to end without a confirmed extend; last extend"), extend))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&client.Error{Kind: client.ErrLockHeld, Action: "acquire", Status: 200, Msg: "lock is held by another owner"}, "acquire: lock is held by another owner"},
		{&client.Error{Kind: client.ErrLockHeld, Action: "acquire", Status: 200}, "acquire: lock is held by another owner"},
		{&client.Error{Action: "status", Status: 404, Msg: "not found"}, "status: HTTP 404: not found"},
		{lost, "lock lost; validity about to end without a confirmed extend; last extend; extend: HTTP 503 quorum_unavailable: no quorum"},
		{errors.New("redlockd: not the client's"), "redlockd: not the client's"},
	} {
		assert.Equal(t, tc.want, cliText(tc.err), "%q", tc.err.Error())
	}
	w := cliWrap(extend, "lock run")
	assert.Equal(t, "lock run: extend: HTTP 503 quorum_unavailable: no quorum", w.Error())
	assert.ErrorIs(t, w, client.ErrUnavailable)
	assert.Equal(t, "lock extend: HTTP 503 quorum_unavailable: no quorum", actionFailed(extend, "lock extend", "extend").Error())
}

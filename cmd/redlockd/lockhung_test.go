package main

// Tests of `redlockd lock` against a hung daemon: a real `redlockd serve`
// process stopped with SIGSTOP (the kernel still accepts connections,
// nobody answers).

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/testdaemon"
)

// processDaemon starts `redlockd serve` as a process of its own (so that
// it can be stopped), with keyA's account, and a key held in it by another
// owner; it returns the daemon and the holder's token.
func processDaemon(t *testing.T, key string) (*testdaemon.Daemon, string) {
	t.Helper()
	masters := make([]string, len(servers))
	for i, s := range servers {
		masters[i] = s.Addr()
	}
	d, err := testdaemon.Start(testdaemon.Options{
		Binary: binary, Masters: masters, KeyPrefix: fmt.Sprintf("hung%d:", prefixSeq.Add(1)),
		LogPath: t.TempDir() + "/daemon.log", Env: []string{"REDLOCKD_API_KEYS=acme:" + keyA},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = d.Resume()
		_ = d.Stop()
	})
	st, env, _ := post(t, lockURL(d.URL), keyA, `{"action":"acquire","key":"`+key+`","ttl":60}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["acquired"])
	return d, env.Data["token"].(string)
}

// pauseDaemon stops d (SIGSTOP); Pause returns once every thread of it is
// stopped.
func pauseDaemon(t *testing.T, d *testdaemon.Daemon) {
	t.Helper()
	require.NoError(t, d.Pause())
}

// TestLockWaitOnAHungDaemon: lock run --wait 2s and lock acquire --wait
// 2s against a hung daemon give up within the wait plus the client's
// margin for the daemon's answer (2 s), exit 69, and the command does not
// run. Before, they waited the wait plus the 10 s request timeout (12 s).
func TestLockWaitOnAHungDaemon(t *testing.T) {
	const key = "job:hung-wait"
	d, _ := processDaemon(t, key)
	pauseDaemon(t, d)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		{"run", "--key", key, "--ttl", "30s", "--wait", "2s", "--", "touch", marker},
		{"acquire", "--key", key, "--ttl", "30s", "--wait", "2s"},
	} {
		start := time.Now()
		code, stdout, stderr := runLock(t, d.URL, args...)
		took := time.Since(start)
		assert.Equal(t, 69, code, "%s: stderr %s", args[0], stderr)
		assert.Empty(t, stdout, args[0])
		// wait 2 s + margin 2 s, and 3 s for a loaded machine.
		assert.Less(t, took, 7*time.Second, "lock %s --wait 2s took %v against a hung daemon", args[0], took)
	}
	assert.NoFileExists(t, marker)
}

// TestLockSignalWhileWaitingOnAHungDaemon: SIGTERM (lock run) or SIGINT
// (lock acquire) while waiting on a daemon that hangs meanwhile ends the
// wait at once: exit 128+N within the client's 1 s for an answer to the
// stop (and slack), the command not run. Before, it took the whole 10 s
// request timeout, whatever signals followed. Once the daemon runs again
// it sees its caller gone: when the holder releases, nobody is granted
// the key (no lock is left behind that no one can name).
func TestLockSignalWhileWaitingOnAHungDaemon(t *testing.T) {
	for _, tc := range []struct {
		sub string
		sig syscall.Signal
	}{{"run", syscall.SIGTERM}, {"acquire", syscall.SIGINT}} {
		t.Run(tc.sub, func(t *testing.T) {
			key := "job:hung-signal-" + tc.sub
			d, token := processDaemon(t, key)
			marker := filepath.Join(t.TempDir(), "ran")
			args := []string{tc.sub, "--key", key, "--ttl", "30s", "--wait", "25s"}
			if tc.sub == "run" {
				args = append(args, "--", "touch", marker)
			}
			p := startLock(t, d.URL, args...)
			require.Eventually(t, func() bool { return inFlight(t, d.URL) == 2 }, 10*time.Second, 10*time.Millisecond,
				"lock %s is not waiting", tc.sub)
			pauseDaemon(t, d)
			sent := time.Now()
			require.NoError(t, p.cmd.Process.Signal(tc.sig))
			code := p.wait(t)
			took := time.Since(sent)
			out := p.stderr.String()
			assert.Equal(t, 128+int(tc.sig), code, "stderr %s", out)
			assert.Less(t, took, 4*time.Second, "exited %v after the signal", took)
			assert.Contains(t, out, "the daemon did not answer the stop")
			assert.Empty(t, p.stdout.String(), "no lock printed")
			assert.NoFileExists(t, marker)

			require.NoError(t, d.Resume())
			st, env, _ := post(t, lockURL(d.URL), keyA, `{"action":"release","key":"`+key+`","token":"`+token+`"}`)
			require.Equal(t, 200, st)
			require.Equal(t, true, env.Data["released"])
			// The waiter's request is gone: the key stays free (a grant to
			// it would hold the key for its 30 s TTL).
			require.Eventually(t, func() bool { return inFlight(t, d.URL) == 1 }, 10*time.Second, 10*time.Millisecond,
				"the abandoned wait goes on in the daemon")
			assert.False(t, held(t, d.URL, key), "a lock is held that nobody can name")
		})
	}
}

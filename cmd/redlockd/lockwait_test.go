package main

// Tests of `redlockd lock` that wait for a lock, and of lock run's guardian.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/config"
)

// holdFor acquires key over HTTP and releases it after d.
func holdFor(t *testing.T, base, key string, d time.Duration) {
	t.Helper()
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"`+key+`","ttl":60}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["acquired"])
	token := env.Data["token"].(string)
	time.AfterFunc(d, func() {
		_, _, _ = postWith(t, httpClient, lockURL(base), keyA, `{"action":"release","key":"`+key+`","token":"`+token+`"}`)
	})
}

// TestLockRunAfterAWait: a lock won after --wait is held for the command's
// whole run, whether the wait ended just before the TTL, just after it, or
// after three times it. Before elapsed_ms the wait was charged against the
// validity and the command got SIGTERM at once (exit 78).
func TestLockRunAfterAWait(t *testing.T) {
	base := daemonURL(t)
	const ttl = 2 * time.Second
	for _, wait := range []time.Duration{ttl * 9 / 10, ttl * 11 / 10, 3 * ttl} {
		t.Run(wait.String(), func(t *testing.T) {
			key := "job:waited:" + wait.String()
			holdFor(t, base, key, wait)
			// The command outlives the TTL: the keep-alive must extend it.
			code, _, stderr := runLock(t, base, "run", "--key", key, "--ttl", "2s", "--wait", "20s", "--", "sleep", "3")
			assert.Equal(t, 0, code, "stderr: %s", stderr)
			assert.NotContains(t, stderr, "lost")
		})
	}
}

// TestLockAcquireAfterAWait: lock acquire --wait prints the validity the
// lock has when it is won, not the TTL less the wait.
func TestLockAcquireAfterAWait(t *testing.T) {
	base := daemonURL(t)
	const ttl = 3 * time.Second
	for _, wait := range []time.Duration{ttl * 9 / 10, ttl * 11 / 10, 3 * ttl} {
		t.Run(wait.String(), func(t *testing.T) {
			key := "job:acq-waited:" + wait.String()
			holdFor(t, base, key, wait)
			code, stdout, stderr := runLock(t, base, "acquire", "--key", key, "--ttl", "3s", "--wait", "20s")
			require.Equal(t, 0, code, "stderr: %s", stderr)
			var out struct {
				ValidityMS int64 `json:"validity_ms"`
				ExpireAt   int64 `json:"expire_at"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
			assert.Greater(t, out.ValidityMS, ttl.Milliseconds()/2, "the wait was charged against the validity: %s", stdout)
			assert.LessOrEqual(t, out.ValidityMS, ttl.Milliseconds(), stdout)
		})
	}
}

// TestLockRunKilledStopsItsCommand: SIGKILL of lock run (it runs no code)
// stops its command and what the command started in its group within a
// second: the guardian sees lock run's end of its pipe close.
func TestLockRunKilledStopsItsCommand(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	p := startLock(t, base, "run", "--key", "job:killed", "--ttl", "10s", "--",
		"sh", "-c", `sleep 1000 & echo $! > `+dir+`/child; echo $$ > `+dir+`/pid; wait`)
	pid := waitPID(t, dir+"/pid")
	child := waitPID(t, dir+"/child")
	// Should the test fail, nothing is left running (the group is the
	// command's pid: lock run puts it in a group of its own).
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	killLockRun(t, p, pid, child)
	assert.Contains(t, p.stderr.String(), "its guardian killed process group")
}

// TestLockRunLeavesNothingBehind: when the command exits, what it left
// running in its group is stopped before the lock is released, and the
// guardian is gone too.
func TestLockRunLeavesNothingBehind(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	code, _, stderr := runLock(t, base, "run", "--key", "job:leftover", "--ttl", "10s", "--",
		"sh", "-c", `sleep 1000 & echo $! > `+dir+`/child`)
	require.Equal(t, 0, code, stderr)
	child := waitPID(t, dir+"/child")
	assert.True(t, gone(child), "the command's background child outlived the lock")
	assert.False(t, held(t, base, "job:leftover"))
	assert.NotContains(t, stderr, "guardian", "the guardian stood down without a kill")
}

// TestLockRunGraceEndsWithValidity: with a --grace longer than the validity
// left at the loss, the SIGKILL comes when the validity ends, not after
// --grace: a command that ignores SIGTERM must not run into the next
// holder's lock.
func TestLockRunGraceEndsWithValidity(t *testing.T) {
	base, stop := startDaemon(t)
	dir := t.TempDir()
	p := startLock(t, base, "run", "--key", "job:grace", "--ttl", "3s", "--grace", "30s", "--",
		"sh", "-c", `trap '' TERM; echo $$ > `+dir+`/pid; while :; do sleep 0.05; done`)
	pid := waitPID(t, dir+"/pid")
	require.NoError(t, stop())
	assert.Equal(t, 78, p.wait(t), "stderr: %s", p.stderr.String())
	m := regexp.MustCompile(`SIGKILL in ([0-9.a-zµ]+)`).FindStringSubmatch(p.stderr.String())
	require.NotNil(t, m, p.stderr.String())
	grace, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	// The loss is declared LossMargin (300 ms for a 3 s TTL) before the
	// validity ends: that is all the time the command gets.
	assert.LessOrEqual(t, grace, 300*time.Millisecond, "SIGKILL after the validity ends")
	// lock run's own SIGKILL and its guardian's both fire when the validity
	// ends; on a loaded machine either may come first (the guardian's
	// message then replaces lock run's). Either way the command is gone.
	out := p.stderr.String()
	assert.True(t, strings.Contains(out, "sending SIGKILL") || strings.Contains(out, "its guardian killed process group"),
		"killed at the end of the validity, by lock run or its guardian: %s", out)
	assert.True(t, gone(pid), "the command is gone")
	assert.NotContains(t, out, "stopped or hung", "lock run declared the loss itself: its guardian does not blame it")
}

// TestLockRunRefusedExtendKillsAtOnce: when an extend is refused (the
// token holds the lock on no quorum: deleted, lost or taken), no validity
// is left whatever the lease computed: a command that ignores SIGTERM gets
// SIGKILL at once, not after --grace. Before, it ran on for the whole
// --grace (10 s by default) beside the lock's next owner.
func TestLockRunRefusedExtendKillsAtOnce(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("e2e%d:", prefixSeq.Add(1))
	base, _ := startDaemon(t, func(c *config.Config) { c.KeyPrefix = prefix })
	dir := t.TempDir()
	p := startLock(t, base, "run", "--key", "job:taken", "--ttl", "6s", "--grace", "60s", "--",
		"sh", "-c", `trap '' TERM; echo $$ > `+dir+`/pid; while :; do sleep 0.05; done`)
	pid := waitPID(t, dir+"/pid")
	// Another owner takes the key on every master (as after a loss): the
	// next extend, at about a third of the TTL, is refused.
	for _, srv := range servers {
		r := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		keys, err := r.Keys(ctx, prefix+"lock:*job:taken").Result()
		require.NoError(t, err)
		require.Len(t, keys, 1)
		require.NoError(t, r.Set(ctx, keys[0], "another-owner", time.Minute).Err())
		require.NoError(t, r.Close())
	}
	assert.Equal(t, 78, p.wait(t), "stderr: %s", p.stderr.String())
	out := p.stderr.String()
	assert.Contains(t, out, "SIGKILL in 0s", "no grace after a refused extend: %s", out)
	assert.Contains(t, out, "token does not match the current holder")
	assert.True(t, gone(pid), "the command is gone")
}

// TestLockGuardRefusesBadInput: the hidden guardian command refuses a
// process group it cannot mean, and does nothing when lock run ended
// before a command started.
func TestLockGuardRefusesBadInput(t *testing.T) {
	for in, want := range map[string]string{"": "", "done\n": "", "1\n": "bad process group", "x\n": "bad process group"} {
		cmd := exec.Command(binary, guardCommand)
		cmd.Stdin = strings.NewReader(in)
		out, err := cmd.CombinedOutput()
		if want == "" {
			assert.NoError(t, err, "%q: %s", in, out)
			assert.Empty(t, string(out), "%q", in)
		} else {
			assert.Error(t, err, "%q", in)
			assert.Contains(t, string(out), want)
		}
	}
}

// TestLockDurationWithoutUnit: --ttl 30 is refused in one line that says
// what is missing, without the whole usage.
func TestLockDurationWithoutUnit(t *testing.T) {
	for _, args := range [][]string{
		{"lock", "run", "--key", "k", "--ttl", "30", "--", "true"},
		{"lock", "acquire", "--key", "k", "--wait", "5"},
		{"lock", "extend", "--key", "k", "--token", "t", "--ttl", "1.5"},
	} {
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "REDLOCKD_URL=http://127.0.0.1:1", "REDLOCKD_API_KEY="+keyA)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 64, ee.ExitCode())
		assert.Contains(t, string(out), "durations need a unit, e.g. ")
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(string(out)), "\n")+1, "one line, not the usage: %s", out)
	}
}

// guardOf returns the pid of the guardian lock run pid started: its child
// named lockrun-guard.
func guardOf(t *testing.T, pid int) int {
	t.Helper()
	var guard int
	require.Eventually(t, func() bool {
		guard = 0
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			p, err := strconv.Atoi(d.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
			if err != nil {
				continue
			}
			// "pid (comm) state ppid ..."
			i := strings.LastIndexByte(string(b), ')')
			f := strings.Fields(string(b)[i+1:])
			if strings.Contains(string(b), "(lockrun-guard)") && len(f) > 1 && f[1] == strconv.Itoa(pid) {
				guard = p
			}
		}
		return guard != 0
	}, 10*time.Second, 10*time.Millisecond, "no guardian under lock run %d", pid)
	return guard
}

// TestLockRunStoppedStopsItsCommand: a lock run that is stopped (SIGSTOP)
// extends nothing; its guardian kills the command when the validity it was
// last told ends, before another owner can hold the lock.
func TestLockRunStoppedStopsItsCommand(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	p := startLock(t, base, "run", "--key", "job:stopped", "--ttl", "2s", "--",
		"sh", "-c", `echo $$ > `+dir+`/pid; while :; do sleep 0.05; done`)
	pid := waitPID(t, dir+"/pid")
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	guardOf(t, p.cmd.Process.Pid)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	require.Eventually(t, func() bool { return gone(pid) }, 10*time.Second, 5*time.Millisecond,
		"the command runs on while lock run is stopped")
	t.Logf("command gone %v after lock run stopped (ttl 2s)", time.Since(stopped))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
	assert.Equal(t, 78, p.wait(t), "stderr: %s", p.stderr.String())
	assert.Contains(t, p.stderr.String(), "validity ended while lock run did not extend it")
	// The command was gone before lock run ran again: it is not told of
	// signals it never got (a README-only break-it pass saw "did not exit
	// within 0s of SIGTERM; sending SIGKILL").
	assert.NotContains(t, p.stderr.String(), "did not exit within")
	assert.NotContains(t, p.stderr.String(), "sending SIGTERM")
	// The guardian that did its work is not replaced by another that
	// kills the dead group again (a break-it pass saw the kill reported
	// twice, with "another took its place" between).
	assert.Equal(t, 1, strings.Count(p.stderr.String(), "its guardian killed process group"), "stderr: %s", p.stderr.String())
	assert.NotContains(t, p.stderr.String(), "another took its place")
}

// TestLockRunReplacesItsGuardian: a guardian killed by someone is replaced,
// so a kill of lock run afterwards still stops the command.
func TestLockRunReplacesItsGuardian(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	p := startLock(t, base, "run", "--key", "job:guard-killed", "--ttl", "10s", "--",
		"sh", "-c", `sleep 1000 & echo $! > `+dir+`/child; echo $$ > `+dir+`/pid; wait`)
	pid := waitPID(t, dir+"/pid")
	child := waitPID(t, dir+"/child")
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	first := guardOf(t, p.cmd.Process.Pid)
	// A kill by name meant for lock run (killall/pkill/pkill -f redlockd)
	// does not match its guardian: neither its name nor its command line
	// says redlockd, while lock run's do.
	for _, f := range []string{"comm", "cmdline"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", first, f))
		require.NoError(t, err)
		assert.NotContains(t, string(b), "redlockd", "the guardian's %s", f)
		b, err = os.ReadFile(fmt.Sprintf("/proc/%d/%s", p.cmd.Process.Pid, f))
		require.NoError(t, err)
		assert.Contains(t, string(b), "redlockd", "lock run's %s", f)
	}
	require.NoError(t, syscall.Kill(first, syscall.SIGKILL))
	require.Eventually(t, func() bool { return guardOf(t, p.cmd.Process.Pid) != first }, 10*time.Second, 10*time.Millisecond,
		"no new guardian")
	killLockRun(t, p, pid, child)
	assert.Contains(t, p.stderr.String(), "another took its place")
}

// TestLockRunCannotStartCommand: a command that cannot start is reported
// once, and the guardian stands down without a word.
func TestLockRunCannotStartCommand(t *testing.T) {
	base := daemonURL(t)
	code, _, stderr := runLock(t, base, "run", "--key", "job:noexec", "--ttl", "5s", "--", "/nonexistent/command")
	assert.Equal(t, 127, code, stderr)
	assert.NotContains(t, stderr, guardCommand)
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
}

// TestLockStatusTTLRoundsUp: lock status prints ttl rounded up, as the
// daemon answers, so a held lock never shows ttl 0.
func TestLockStatusTTLRoundsUp(t *testing.T) {
	base := daemonURL(t)
	code, _, stderr := runLock(t, base, "acquire", "--key", "job:st-ttl", "--ttl", "2s")
	require.Equal(t, 0, code, stderr)
	for range 8 {
		code, stdout, stderr := runLock(t, base, "status", "--key", "job:st-ttl")
		if code == 76 {
			break // expired
		}
		require.Equal(t, 0, code, stderr)
		var out struct {
			TTL        int64 `json:"ttl"`
			ValidityMS int64 `json:"validity_ms"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		assert.GreaterOrEqual(t, out.TTL, int64(1), stdout)
		assert.Equal(t, max((out.ValidityMS+999)/1000, 1), out.TTL, stdout)
		time.Sleep(250 * time.Millisecond)
	}
}

// TestLockURLNamingTheEndpoint: --url with the endpoint's path (the README's and docs/api.md's
// U variable) is refused as usage, with what to give instead.
func TestLockURLNamingTheEndpoint(t *testing.T) {
	base := daemonURL(t)
	cmd := exec.Command(binary, "lock", "status", "--key", "k", "--url", base+"/v1/lock")
	cmd.Env = append(os.Environ(), "REDLOCKD_API_KEY="+keyA)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 64, ee.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "give the daemon's base URL")
}

// waitPID waits for path and returns the process ID written in it.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, path)))
	require.NoError(t, err)
	return pid
}

// killLockRun sends SIGKILL to lock run p and requires its command pid
// and the command's child to be gone within a second.
func killLockRun(t *testing.T, p *lockProc, pid, child int) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	killed := time.Now()
	// Process.Wait, not Cmd.Wait: a surviving child would hold the output
	// pipes open, and Cmd.Wait waits for them to close.
	_, err := p.cmd.Process.Wait()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return gone(pid) && gone(child) }, time.Second, 5*time.Millisecond,
		"the command (pid %d) and its child (pid %d) still run after lock run was killed", pid, child)
	t.Logf("command and child gone %v after the SIGKILL", time.Since(killed))
	_ = p.cmd.Wait() // the output pipes close once the guardian has exited
}

// TestLockRunWaitsAcrossADaemonRestart: lock run --wait through a daemon
// that shuts down while the lock is held (a rolling restart). The daemon
// ends the wait early (wait_stopped); lock run sends the acquire again for
// what is left of its wait, dialling until the replacement daemon listens
// on the same address, and runs its command once the holder releases.
// Before, it exited 75 ("held by another owner") with the lock about to
// be free and most of its wait left.
func TestLockRunWaitsAcrossADaemonRestart(t *testing.T) {
	prefix := fmt.Sprintf("restartwait%d:", time.Now().UnixNano())
	shared := func(c *config.Config) { c.KeyPrefix = prefix }
	base, stop := startDaemon(t, shared)
	addr := strings.TrimPrefix(base, "http://")
	key := fmt.Sprintf("restart:wait:%d", time.Now().UnixNano())
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"`+key+`","ttl":60}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["acquired"])
	token := env.Data["token"].(string)

	out := t.TempDir() + "/ran"
	p := startLock(t, base, "run", "--key", key, "--ttl", "10s", "--wait", "30s", "--", "sh", "-c", "echo ran > "+out)
	require.Eventually(t, func() bool {
		return inFlight(t, base) == 2 // the waiter and this request
	}, 10*time.Second, 10*time.Millisecond, "lock run is not waiting")
	require.NoError(t, stop())
	// lock run now dials a closed port; give it a few tries.
	time.Sleep(300 * time.Millisecond)
	base2, _ := startDaemon(t, shared, func(c *config.Config) { c.Listen = addr })
	require.Equal(t, base, base2)
	st, env, _ = post(t, lockURL(base2), keyA, `{"action":"release","key":"`+key+`","token":"`+token+`"}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["released"], "%v", env)
	code := p.wait(t)
	assert.Equal(t, 0, code, "lock run waits on through the restart; stderr %s", p.stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err, "the command ran")
	assert.Equal(t, "ran\n", string(b))
}

// inFlight is the daemon's redlockd_requests_in_flight, -1 when it cannot
// be read.
func inFlight(t *testing.T, base string) int {
	t.Helper()
	resp, err := httpClient.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`\nredlockd_requests_in_flight (\d+)\n`).FindSubmatch(raw)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestManyWaitersAcrossADaemonRestart: twenty Go clients wait (WithWait)
// on twenty held keys through a daemon that shuts down and is replaced on
// the same address; every one gets its lock once the holders release
// through the replacement. Before, the waiters' resends raced the closing
// listener: a connection whose SYN came just before quiesce's filter had
// its handshake's last ACK dropped and was reset after the request was
// sent, and the client gave up with ErrUnavailable (lock exited 69) with
// most of its wait left — about one round in three of twenty lock
// processes on a loaded machine (an adversarial pass), but 0 in 6 runs of
// this test without the fixes on a quieter one: the window is tens of
// microseconds. The deterministic checks of the two fixes are the
// client's TestWaitStoppedResendEndsWithTheWait (a reset resend is tried
// again) and the order in daemon.Server.stop (the waits end after
// quiesce); this test keeps the whole path covered.
func TestManyWaitersAcrossADaemonRestart(t *testing.T) {
	const n = 20
	prefix := fmt.Sprintf("manywait%d:", time.Now().UnixNano())
	shared := func(c *config.Config) { c.KeyPrefix = prefix }
	base, stop := startDaemon(t, shared)
	addr := strings.TrimPrefix(base, "http://")
	tokens := make([]string, n)
	key := func(i int) string { return fmt.Sprintf("many:%d", i) }
	for i := range n {
		st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"`+key(i)+`","ttl":60}`)
		require.Equal(t, 200, st)
		require.Equal(t, true, env.Data["acquired"])
		tokens[i] = env.Data["token"].(string)
	}
	c, err := client.New(base, keyA)
	require.NoError(t, err)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			l, err := c.Acquire(context.Background(), key(i), 10*time.Second, client.WithWait(15*time.Second))
			if err == nil {
				err = l.Release(context.Background())
			}
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return inFlight(t, base) == n+1 }, 10*time.Second, 10*time.Millisecond, "the waiters are not all waiting")
	require.NoError(t, stop())
	base2, _ := startDaemon(t, shared, func(c *config.Config) { c.Listen = addr })
	for i := range n {
		st, env, _ := post(t, lockURL(base2), keyA, `{"action":"release","key":"`+key(i)+`","token":"`+tokens[i]+`"}`)
		require.Equal(t, 200, st)
		require.Equal(t, true, env.Data["released"], "%v", env)
	}
	for range n {
		assert.NoError(t, <-errs, "every waiter gets its lock through the replacement")
	}
}

// TestLockRunReleasesThroughARestartedDaemon: the command ends while the
// daemon is being replaced; lock run's release, refused while no daemon
// listens, is tried again until the replacement answers, instead of
// leaving the lock to its TTL.
func TestLockRunReleasesThroughARestartedDaemon(t *testing.T) {
	prefix := fmt.Sprintf("restartrel%d:", time.Now().UnixNano())
	shared := func(c *config.Config) { c.KeyPrefix = prefix }
	base, stop := startDaemon(t, shared)
	addr := strings.TrimPrefix(base, "http://")
	key := fmt.Sprintf("restart:release:%d", time.Now().UnixNano())
	started := t.TempDir() + "/started"
	p := startLock(t, base, "run", "--key", key, "--ttl", "30s", "--", "sh", "-c", "touch "+started+"; sleep 1")
	waitFile := func() bool { _, err := os.Stat(started); return err == nil }
	require.Eventually(t, waitFile, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())
	time.Sleep(1500 * time.Millisecond) // the command has ended; its release is refused
	base2, _ := startDaemon(t, shared, func(c *config.Config) { c.Listen = addr })
	assert.Equal(t, 0, p.wait(t), "stderr %s", p.stderr.String())
	assert.NotContains(t, p.stderr.String(), "the lock ends with its TTL")
	assert.False(t, held(t, base2, key), "released through the replacement")
}

// TestLockRunGrantExpiredWhileStopped: lock run --wait is stopped
// (SIGSTOP) while it waits; the holder releases, the daemon grants the
// lock to it, and that lock's validity ends before lock run runs again.
// The command never runs, and lock run says so: exit 75 (the lock was
// not obtained in time), not 78, which says a running command was
// stopped (a black-box pass saw 78 and "the lock was lost while the
// command ran" for a command the start gate had kept from running).
func TestLockRunGrantExpiredWhileStopped(t *testing.T) {
	base := daemonURL(t)
	const key = "job:granted-while-stopped"
	ran := t.TempDir() + "/ran"
	p := grantExpiresWhileStopped(t, base, key, "run", "--key", key, "--ttl", "2s", "--wait", "25s", "--", "sh", "-c", "echo ran >> "+ran)
	code := p.wait(t)
	out := p.stderr.String()
	assert.Equal(t, 75, code, "stderr: %s", out)
	assert.Contains(t, out, "the command did not run")
	assert.NotContains(t, out, "lost while the command ran")
	assert.NotContains(t, out, "guardian")
	assert.NoFileExists(t, ran)
	assert.False(t, held(t, base, key))
}

// grantExpiresWhileStopped holds key with another token, starts `lock
// args` waiting for it, stops that process (SIGSTOP), releases the key so
// that the waiter is granted it, waits until that grant has ended too, and
// continues the process (SIGCONT); the caller waits for it.
func grantExpiresWhileStopped(t *testing.T, base, key string, args ...string) *lockProc {
	t.Helper()
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"`+key+`","ttl":60}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["acquired"])
	token := env.Data["token"].(string)
	p := startLock(t, base, args...)
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	require.Eventually(t, func() bool { return inFlight(t, base) == 2 }, 10*time.Second, 10*time.Millisecond,
		"lock %s is not waiting", args[0])
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
	st, env, _ = post(t, lockURL(base), keyA, `{"action":"release","key":"`+key+`","token":"`+token+`"}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["released"])
	// The waiter's grant, then its end, while the process is stopped.
	require.Eventually(t, func() bool { return held(t, base, key) }, 10*time.Second, 10*time.Millisecond, "not granted to the waiter")
	require.Eventually(t, func() bool { return !held(t, base, key) }, 20*time.Second, 20*time.Millisecond, "the grant did not end")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
	return p
}

// TestLockAcquireGrantExpiredWhileStopped: lock acquire's twin of
// TestLockRunGrantExpiredWhileStopped. Stopped while it waits, past the
// end of the lock it was granted meanwhile, it printed that lock (exit 0,
// validity_ms 0) to a script that would then work under a lock it does not
// hold (helper-103 noticed it); now it exits 75, prints no token, and the
// key is free.
func TestLockAcquireGrantExpiredWhileStopped(t *testing.T) {
	base := daemonURL(t)
	const key = "job:acquire-granted-while-stopped"
	p := grantExpiresWhileStopped(t, base, key, "acquire", "--key", key, "--ttl", "2s", "--wait", "25s")
	code := p.wait(t)
	assert.Equal(t, 75, code, "stdout: %s stderr: %s", p.stdout.String(), p.stderr.String())
	assert.NotContains(t, p.stdout.String(), `"token"`, "no lock printed")
	assert.Contains(t, p.stderr.String(), "its validity ended before it could be handed over")
	assert.False(t, held(t, base, key))
}

// TestLockRunExitsWhileTheDaemonIsDown: the daemon goes away while the
// command runs, and the command then exits 0 before the lock counts as
// lost. lock run exits 0; its release, refused while no daemon listens,
// is tried only until the lock's validity ends (nothing is left to
// release after that) and says so in one line; and the guardian, whose
// group is gone, stands down instead of killing it again at the end of
// validity and blaming a stopped or hung lock run. A black-box pass saw
// exit 0 with "its guardian killed process group N" on stderr, and the
// release tried for 10 s, well past the validity's end.
func TestLockRunExitsWhileTheDaemonIsDown(t *testing.T) {
	base, stop := startDaemon(t)
	dir := t.TempDir()
	p := startLock(t, base, "run", "--key", "job:daemon-down", "--ttl", "4s", "--",
		"sh", "-c", `touch `+dir+`/started; while [ ! -e `+dir+`/go ]; do sleep 0.02; done`)
	waitFile0(t, dir+"/started")
	require.NoError(t, stop())
	require.NoError(t, os.WriteFile(dir+"/go", nil, 0o600))
	exited := time.Now()
	code := p.wait(t)
	took := time.Since(exited)
	out := p.stderr.String()
	assert.Equal(t, 0, code, "stderr: %s", out)
	assert.NotContains(t, out, "guardian", "no guardian's kill of a group that had exited")
	assert.Contains(t, out, "the lock's validity has ended, so nothing is left to release")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line: %s", out)
	// At most the 4 s TTL is left when the command exits; before, the
	// release went on for 10 s. Generous for a loaded machine.
	assert.Less(t, took, 8*time.Second, "lock run exited %v after its command", took)
}

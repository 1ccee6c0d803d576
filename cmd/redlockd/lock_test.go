package main

// Tests of `redlockd lock`: the real binary, run as a child process against
// the daemon on the five real masters.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockProc is one `redlockd lock ...` child process.
type lockProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

func startLock(t *testing.T, base string, args ...string) *lockProc {
	t.Helper()
	p := &lockProc{cmd: exec.Command(binary, append([]string{"lock"}, args...)...)}
	p.cmd.Env = append(os.Environ(), "REDLOCKD_URL="+base, "REDLOCKD_API_KEY="+keyA)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	return p
}

// wait returns the exit code.
func (p *lockProc) wait(t *testing.T) int {
	t.Helper()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

func runLock(t *testing.T, base string, args ...string) (int, string, string) {
	t.Helper()
	p := startLock(t, base, args...)
	code := p.wait(t)
	return code, p.stdout.String(), p.stderr.String()
}

func held(t *testing.T, base, key string) bool {
	t.Helper()
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"status","key":"`+key+`"}`)
	require.Equal(t, 200, st)
	return env.Data["held"] == true
}

// waitFile waits until path exists and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	require.Eventually(t, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && len(b) > 0
	}, 20*time.Second, 10*time.Millisecond, "%s not written", path)
	return string(b)
}

func TestLockRunPassesEnvAndStatus(t *testing.T) {
	base := daemonURL(t)
	code, out, errOut := runLock(t, base, "run", "--key", "job:env", "--ttl", "30s", "--",
		"sh", "-c", `echo "$REDLOCK_KEY $REDLOCK_FENCE $REDLOCK_VALID_UNTIL"; exit 7`)
	assert.Equal(t, 7, code, "the command's status passes through; stderr %s", errOut)
	f := strings.Fields(out)
	require.Len(t, f, 3, "stdout %q", out)
	assert.Equal(t, "job:env", f[0])
	fence, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	assert.Positive(t, fence)
	until, err := strconv.ParseInt(f[2], 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, time.Now().Add(30*time.Second).Unix(), until, 5)
	assert.False(t, held(t, base, "job:env"), "released when the command exited")

	code, _, _ = runLock(t, base, "run", "--key", "job:env", "--ttl", "30s", "--", "true")
	assert.Equal(t, 0, code)
	code, _, _ = runLock(t, base, "run", "--key", "job:env", "--ttl", "30s", "--", "sh", "-c", "kill -KILL $$")
	assert.Equal(t, 128+9, code, "killed by a signal: 128+N, as shells report it")
}

func TestLockRunExitCodes(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()

	// Busy, like flock -n: the command does not run.
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"job:busy","ttl":30}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["acquired"])
	marker := filepath.Join(dir, "ran")
	code, _, errOut := runLock(t, base, "run", "--key", "job:busy", "--ttl", "30s", "--", "touch", marker)
	assert.Equal(t, 75, code, errOut)
	assert.Contains(t, errOut, "held by another owner")
	assert.NoFileExists(t, marker)
	// Waiting gives up too when the holder keeps it.
	code, _, _ = runLock(t, base, "run", "--key", "job:busy", "--ttl", "30s", "--wait", "200ms", "--", "touch", marker)
	assert.Equal(t, 75, code)
	assert.NoFileExists(t, marker)

	// Usage and configuration: 64.
	for _, args := range [][]string{
		{"run", "--ttl", "30s", "--", "true"},                                    // no key
		{"run", "--key", "k", "--", "true"},                                      // no ttl
		{"run", "--key", "k", "--ttl", "1500ms", "--", "true"},                   // not whole seconds
		{"run", "--key", "k", "--ttl", "30s"},                                    // no command
		{"run", "--key", "k", "--ttl", "30s", "--bogus", "true"},                 // unknown flag
		{"run", "--key", strings.Repeat("k", 513), "--ttl", "30s", "--", "true"}, // 400
		{"run", "--key", "k", "--ttl", "200h", "--", "true"},                     // 400: above max_ttl
		{"release", "--key", "k"},                                                // no token
		{"frobnicate"},
	} {
		code, _, errOut := runLock(t, base, args...)
		assert.Equal(t, 64, code, "%v: %s", args, errOut)
	}
	bad := exec.Command(binary, "lock", "status", "--key", "k")
	bad.Env = append(os.Environ(), "REDLOCKD_URL="+base, "REDLOCKD_API_KEY=wrong-key-0123456789")
	out, err := bad.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 64, ee.ExitCode(), "unauthorized: %s", out)
	assert.NotContains(t, string(out), "wrong-key-0123456789", "the API key is never printed")
	noURL := exec.Command(binary, "lock", "status", "--key", "k")
	noURL.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err = noURL.CombinedOutput()
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 64, ee.ExitCode())
	assert.Contains(t, string(out), "REDLOCKD_URL")

	// Unavailable: nothing listening, or no quorum.
	code, _, errOut = runLock(t, "http://127.0.0.1:1", "run", "--key", "k", "--ttl", "30s", "--", "touch", marker)
	assert.Equal(t, 69, code, errOut)
	for _, s := range servers[:3] {
		require.NoError(t, s.Pause())
	}
	code, _, errOut = runLock(t, base, "run", "--key", "job:noquorum", "--ttl", "30s", "--", "touch", marker)
	for _, s := range servers[:3] {
		require.NoError(t, s.Resume())
	}
	assert.Equal(t, 69, code, errOut)
	assert.Contains(t, errOut, "quorum")
	assert.NoFileExists(t, marker)
	waitReadyURL(t, base)

	// An answer that is not the action API's (here the daemon's 404 for a
	// wrong base path): 70.
	code, _, errOut = runLock(t, base+"/wrong/prefix", "run", "--key", "k", "--ttl", "30s", "--", "touch", marker)
	assert.Equal(t, 70, code, errOut)
	assert.Contains(t, errOut, "HTTP 404")
	assert.Contains(t, errOut, "no redlockd lock API at this URL: check --url or REDLOCKD_URL")
	assert.NoFileExists(t, marker)

	// The command cannot be run: 127 and 126, and the lock is released.
	code, _, _ = runLock(t, base, "run", "--key", "job:exec", "--ttl", "30s", "--", filepath.Join(dir, "missing"))
	assert.Equal(t, 127, code)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "noexec"), []byte("#!/bin/sh\n"), 0o644))
	code, _, _ = runLock(t, base, "run", "--key", "job:exec", "--ttl", "30s", "--", filepath.Join(dir, "noexec"))
	assert.Equal(t, 126, code)
	assert.False(t, held(t, base, "job:exec"))
}

func waitReadyURL(t *testing.T, base string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 30*time.Second, 20*time.Millisecond)
}

func TestLockOneShot(t *testing.T) {
	base := daemonURL(t)
	code, out, errOut := runLock(t, base, "acquire", "--key", "job:oneshot", "--ttl", "60s", "--namespace", "ns")
	require.Equal(t, 0, code, errOut)
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, "acquire", d["action"])
	assert.Equal(t, true, d["acquired"])
	assert.EqualValues(t, 60, d["ttl"])
	assert.Positive(t, d["fence"])
	assert.Greater(t, d["validity_ms"], 55000.0)
	token, _ := d["token"].(string)
	require.Len(t, token, 32)
	fence := d["fence"]

	code, out, _ = runLock(t, base, "acquire", "--key", "job:oneshot", "--namespace", "ns")
	assert.Equal(t, 75, code)
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, false, d["acquired"])
	assert.InDelta(t, 60, d["retry_after"], 2)

	code, out, _ = runLock(t, base, "status", "--key", "job:oneshot", "--namespace", "ns")
	assert.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, true, d["held"])
	assert.Equal(t, fence, d["fence"], "status prints the holder's fence")
	assert.NotContains(t, out, token)

	code, out, _ = runLock(t, base, "extend", "--key", "job:oneshot", "--namespace", "ns", "--token", token, "--ttl", "120s")
	assert.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	assert.Equal(t, true, d["extended"])
	assert.EqualValues(t, 120, d["ttl"])
	assert.Equal(t, fence, d["fence"])

	// The token from the environment, as a script passes it on.
	rel := exec.Command(binary, "lock", "release", "--key", "job:oneshot", "--namespace", "ns")
	rel.Env = append(os.Environ(), "REDLOCKD_URL="+base, "REDLOCKD_API_KEY="+keyA, "REDLOCK_TOKEN="+token)
	out2, err := rel.Output()
	require.NoError(t, err)
	assert.JSONEq(t, `{"action":"release","key":"job:oneshot","released":true}`, string(out2))

	code, out, errOut = runLock(t, base, "release", "--key", "job:oneshot", "--namespace", "ns", "--token", token)
	assert.Equal(t, 76, code)
	assert.JSONEq(t, `{"action":"release","key":"job:oneshot","released":false}`, out)
	assert.Contains(t, errOut, "expired or was already released")
	code, _, _ = runLock(t, base, "extend", "--key", "job:oneshot", "--namespace", "ns", "--token", token)
	assert.Equal(t, 76, code)
	code, out, _ = runLock(t, base, "status", "--key", "job:oneshot", "--namespace", "ns")
	assert.Equal(t, 76, code)
	assert.JSONEq(t, `{"action":"status","key":"job:oneshot","held":false}`, out)
}

// TestLockRunKeepsLockPastTTL: a command running for 3× the TTL holds the
// lock throughout.
func TestLockRunKeepsLockPastTTL(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	p := startLock(t, base, "run", "--key", "job:long", "--ttl", "2s", "--",
		"sh", "-c", `echo "$REDLOCK_FENCE" > `+dir+`/fence; while [ ! -e `+dir+`/stop ]; do sleep 0.05; done`)
	waitFile(t, dir+"/fence")
	end := time.Now().Add(6 * time.Second)
	for time.Now().Before(end) {
		require.True(t, held(t, base, "job:long"))
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, os.WriteFile(dir+"/stop", nil, 0o644))
	assert.Equal(t, 0, p.wait(t), p.stderr.String())
	assert.False(t, held(t, base, "job:long"))
}

// commandLost runs a command that records its pid and whether it got
// SIGTERM, then loses the lock with lose, and checks that lock run stopped
// the command and exited 78.
func commandLost(t *testing.T, base string, ignoreTERM bool, lose func()) *lockProc {
	t.Helper()
	dir := t.TempDir()
	trap := `trap 'echo TERM > ` + dir + `/term; exit 0' TERM`
	if ignoreTERM {
		trap = `trap 'echo TERM > ` + dir + `/term' TERM`
	}
	p := startLock(t, base, "run", "--key", "job:lost", "--ttl", "3s", "--grace", "1s", "--",
		"sh", "-c", trap+`; echo $$ > `+dir+`/pid; while :; do sleep 0.05; done`)
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, dir+"/pid")))
	require.NoError(t, err)
	lose()
	assert.Equal(t, 78, p.wait(t), "stderr: %s", p.stderr.String())
	assert.Contains(t, p.stderr.String(), `lock "job:lost" lost`)
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		// (the command's shell may print lines of its own, e.g. "Terminated")
		assert.LessOrEqual(t, strings.Count(line, "redlockd"), 1, "lock run names the program once a line: %q", line)
	}
	assert.Equal(t, "TERM\n", waitFile(t, dir+"/term"), "the command got SIGTERM first")
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the command is gone")
	return p
}

func TestLockRunStopsCommandWhenMastersPause(t *testing.T) {
	base := daemonURL(t)
	commandLost(t, base, false, func() {
		for _, s := range servers[:3] {
			require.NoError(t, s.Pause())
		}
	})
	for _, s := range servers[:3] {
		require.NoError(t, s.Resume())
	}
	waitReadyURL(t, base)
}

func TestLockRunKillsCommandAfterGrace(t *testing.T) {
	base, stop := startDaemon(t)
	p := commandLost(t, base, true, func() { require.NoError(t, stop()) })
	assert.Contains(t, p.stderr.String(), "sending SIGKILL")
}

func TestLockRunForwardsSignals(t *testing.T) {
	base := daemonURL(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			p := startLock(t, base, "run", "--key", "job:signal", "--ttl", "30s", "--",
				"sh", "-c", `trap 'echo got > `+dir+`/got; exit 3' `+strings.TrimPrefix(unixName(sig), "SIG")+`; touch `+dir+`/ready; while :; do sleep 0.05; done`)
			waitFile0(t, dir+"/ready")
			require.NoError(t, p.cmd.Process.Signal(sig))
			assert.Equal(t, 3, p.wait(t), "the command's status after its trap; stderr %s", p.stderr.String())
			assert.Equal(t, "got\n", waitFile(t, dir+"/got"))
			assert.False(t, held(t, base, "job:signal"), "released after the command exited")
		})
	}
}

func unixName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2"}[s]
}

// waitFile0 waits until path exists (it may be empty).
func waitFile0(t *testing.T, path string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := os.Stat(path)
		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "%s not created", path)
}

// TestLockRunNoOverlap: lock run processes racing for one key never run
// their commands at the same time. Each command writes its start and end
// times (nanoseconds, from date) into a file of its own.
func TestLockRunNoOverlap(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	const procs = 4
	var wg sync.WaitGroup
	codes := make([]int, procs)
	for i := range procs {
		wg.Go(func() {
			p := startLock(t, base, "run", "--key", "job:overlap", "--ttl", "5s", "--wait", "20s", "--",
				"sh", "-c", fmt.Sprintf(`date +%%s%%N > %[1]s/%[2]d.start; sleep 0.3; date +%%s%%N > %[1]s/%[2]d.end`, dir, i))
			codes[i] = p.wait(t)
		})
	}
	wg.Wait()
	type span struct{ start, end int64 }
	var spans []span
	read := func(path string) int64 {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		require.NoError(t, err)
		return n
	}
	for i := range procs {
		require.Equal(t, 0, codes[i], "every run got the lock in turn")
		spans = append(spans, span{read(fmt.Sprintf("%s/%d.start", dir, i)), read(fmt.Sprintf("%s/%d.end", dir, i))})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	for i := 1; i < len(spans); i++ {
		assert.Greater(t, spans[i].start, spans[i-1].end, "command %d started before the one before it ended: %v", i, spans)
	}
	assert.True(t, slices.IsSortedFunc(spans, func(a, b span) int { return int(a.end - b.end) }))
}

// openPTY opens a pseudo-terminal pair; it skips the test where there is
// no /dev/ptmx.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Skipf("unlockpt: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptm.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Skipf("ptsname: %v", errno)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { pts.Close() })
	return ptm, pts
}

// TestLockRunCommandReadsTerminal: run as the foreground job of a
// terminal, the command (in its own process group) can read from it,
// instead of being stopped by SIGTTIN with the lock held.
func TestLockRunCommandReadsTerminal(t *testing.T) {
	base := daemonURL(t)
	ptm, pts := openPTY(t)
	out := filepath.Join(t.TempDir(), "line")
	cmd := exec.Command(binary, "lock", "run", "--key", "job:tty", "--ttl", "30s", "--",
		"sh", "-c", `read line; echo "$line" > `+out)
	cmd.Env = append(os.Environ(), "REDLOCKD_URL="+base, "REDLOCKD_API_KEY="+keyA)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	// A session of its own with the terminal as its controlling terminal:
	// lock run is the terminal's foreground job, as in an interactive shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	go func() { _, _ = io.Copy(io.Discard, ptm) }() // drain the echo
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	_, err := ptm.Write([]byte("typed line\n"))
	require.NoError(t, err)
	select {
	case err := <-exited:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("lock run did not finish: the command could not read the terminal")
	}
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "typed line\n", string(b))
	assert.False(t, held(t, base, "job:tty"))
}

// TestLockRunKillsWhatTheCommandLeft: after a loss, a process the command
// started that ignores SIGTERM does not outlive the command.
func TestLockRunKillsWhatTheCommandLeft(t *testing.T) {
	base, stop := startDaemon(t)
	dir := t.TempDir()
	p := startLock(t, base, "run", "--key", "job:orphan", "--ttl", "3s", "--grace", "30s", "--",
		"sh", "-c", `sh -c 'trap "" TERM; echo $$ > `+dir+`/pid; while :; do sleep 0.05; done' & wait`)
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, dir+"/pid")))
	require.NoError(t, err)
	require.NoError(t, stop())
	assert.Equal(t, 78, p.wait(t), "stderr %s", p.stderr.String())
	assert.NotContains(t, p.stderr.String(), "sending SIGKILL", "the command itself exited on SIGTERM")
	require.Eventually(t, func() bool { return gone(pid) }, 10*time.Second, 10*time.Millisecond,
		"the process the command left behind is killed")
}

// gone reports whether pid has exited: no such process, or a zombie whose
// new parent has not reaped it yet.
func gone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// TestLockRunSignalWhileWaiting: a signal while lock run waits for a held
// lock ends the wait with 128+N; the command does not run.
func TestLockRunSignalWhileWaiting(t *testing.T) {
	base := daemonURL(t)
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"job:waiting","ttl":60}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["acquired"])
	marker := filepath.Join(t.TempDir(), "ran")
	for attempt := 0; ; attempt++ {
		p := startLock(t, base, "run", "--key", "job:waiting", "--ttl", "30s", "--wait", "25s", "--", "touch", marker)
		time.Sleep(300 * time.Millisecond) // let it start waiting
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		err := p.cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() && attempt < 5 {
			continue // the signal came before lock run was listening: again
		}
		assert.Equal(t, 128+15, ee.ExitCode(), "stderr %s", p.stderr.String())
		assert.Contains(t, p.stderr.String(), "while waiting for the lock")
		break
	}
	assert.NoFileExists(t, marker)
}

// TestLockAcquireSignalWhileWaiting: SIGINT, SIGTERM or SIGHUP while lock
// acquire --wait waits ends it with 128+N, as lock run's wait, and holds
// nothing; it exited 69 ("unavailable", which a script retries) on SIGINT
// and SIGTERM, and SIGHUP killed it.
func TestLockAcquireSignalWhileWaiting(t *testing.T) {
	base := daemonURL(t)
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"job:acq-waiting","ttl":60}`)
	require.Equal(t, 200, st)
	require.Equal(t, true, env.Data["acquired"])
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		for attempt := 0; ; attempt++ {
			p := startLock(t, base, "acquire", "--key", "job:acq-waiting", "--ttl", "30s", "--wait", "25s")
			time.Sleep(300 * time.Millisecond) // let it start waiting
			require.NoError(t, p.cmd.Process.Signal(sig))
			err := p.cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() && attempt < 5 {
				continue // the signal came before it was listening: again
			}
			assert.Equal(t, 128+int(sig), ee.ExitCode(), "%v: stderr %s", sig, p.stderr.String())
			assert.Contains(t, p.stderr.String(), "while waiting; nothing is held", "%v", sig)
			assert.Empty(t, p.stdout.String(), "%v: no lock printed", sig)
			break
		}
	}
}

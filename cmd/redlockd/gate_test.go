package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockRunDiesEarly plays what lock run does up to the moment it is
// killed, with the real guardian and the real command: the guardian
// started, the command started (behind the start gate when gated) in a
// process group of its own, and then lock run dies before it told the
// guardian the command's group, which a loaded machine can make as long
// as it likes. Its death is what the kernel does then: lock run's ends of
// the guardian's pipe and of the gate's pipe close. The command starts a
// child that would outlive a kill of the command alone.
func lockRunDiesEarly(t *testing.T, gated bool) (dir string, ran bool) {
	dir = t.TempDir()
	guardian := exec.Command(binary, guardCommand)
	guardIn, err := guardian.StdinPipe()
	require.NoError(t, err)
	var guardErr strings.Builder
	guardian.Stderr = &guardErr
	require.NoError(t, guardian.Start())

	argv := []string{"sh", "-c", `sleep 1000 & echo $! > ` + dir + `/child; echo $$ > ` + dir + `/pid; wait`}
	var cmd *exec.Cmd
	var gateW *os.File
	if gated {
		gateR, w, err := os.Pipe()
		require.NoError(t, err)
		gateW = w
		path, err := exec.LookPath(argv[0])
		require.NoError(t, err)
		cmd = exec.Command(binary, append([]string{gateCommand, path}, argv...)...)
		cmd.ExtraFiles = []*os.File{gateR}
		defer gateR.Close()
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL); _ = cmd.Wait() })

	if !gated {
		// Ungated, the command runs at once: it has started its child
		// before lock run could tell the guardian anything.
		waitPID(t, dir+"/child")
	}
	// lock run dies here.
	require.NoError(t, guardIn.Close())
	if gateW != nil {
		require.NoError(t, gateW.Close())
	}
	require.NoError(t, guardian.Wait(), "the guardian: %s", guardErr.String())
	assert.Empty(t, guardErr.String(), "the guardian knew no group to kill")
	if gated {
		err := cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, exitGateClosed, ee.ExitCode(), "the gate exits 125 when lock run never opened it")
	}
	_, err = os.Stat(filepath.Join(dir, "pid"))
	return dir, err == nil
}

// TestLockRunKilledBeforeTheGuardianKnowsTheGroup: lock run killed after
// starting its command but before its guardian learned the command's
// process group leaves nothing running: behind the start gate the command
// never ran. The negative control starts the command as lock run did
// before the gate: it runs at once, and its child outlives lock run with
// nobody to stop it.
func TestLockRunKilledBeforeTheGuardianKnowsTheGroup(t *testing.T) {
	t.Run("gated", func(t *testing.T) {
		dir, ran := lockRunDiesEarly(t, true)
		assert.False(t, ran, "the command ran although lock run never opened the gate")
		_, err := os.Stat(filepath.Join(dir, "child"))
		assert.True(t, os.IsNotExist(err), "the command started a child")
	})
	t.Run("control/ungated", func(t *testing.T) {
		dir, ran := lockRunDiesEarly(t, false)
		require.True(t, ran)
		child := waitPID(t, dir+"/child")
		time.Sleep(100 * time.Millisecond) // the guardian has exited; nothing else would stop it
		assert.False(t, gone(child), "the control must show the child outliving lock run")
	})
}

// TestLockExecGateOpens: once lock run opens the gate, the gate becomes
// the command (the same process: the group lock run told the guardian is
// the command's), with argv as the user wrote it, the environment lock run
// set, and no file descriptor of the gate's.
func TestLockExecGateOpens(t *testing.T) {
	dir := t.TempDir()
	gateR, gateW, err := os.Pipe()
	require.NoError(t, err)
	defer gateR.Close()
	path, err := exec.LookPath("sh")
	require.NoError(t, err)
	cmd := exec.Command(binary, gateCommand, path, "sh", "-c",
		`echo $$ > `+dir+`/pid; head -c 3 /proc/$$/cmdline | tr '\0' '|'; echo "$0 $1 $GATE_TEST"; if [ -e /proc/$$/fd/3 ]; then echo leaked; fi`, "zero", "one")
	cmd.ExtraFiles = []*os.File{gateR}
	cmd.Env = append(os.Environ(), "GATE_TEST=env")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	require.NoError(t, openGate(gateW))
	require.NoError(t, cmd.Wait(), out.String())
	assert.Equal(t, "sh|zero one env\n", out.String(), "argv[0] as written, the arguments, the environment, and no gate descriptor")
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, dir+"/pid")))
	require.NoError(t, err)
	assert.Equal(t, cmd.Process.Pid, pid, "the command is the gate's own process (execve)")
}

// TestLockExecRefusesBadInput: the hidden gate command refuses to run
// without a path and an argv, and a command that cannot be executed gets
// 126 with the reason.
func TestLockExecRefusesBadInput(t *testing.T) {
	out, err := exec.Command(binary, gateCommand).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitCannotExec, ee.ExitCode())
	assert.Contains(t, string(out), "want a path and an argv")

	gateR, gateW, err := os.Pipe()
	require.NoError(t, err)
	defer gateR.Close()
	notExec := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.WriteFile(notExec, []byte("x"), 0o644))
	cmd := exec.Command(binary, gateCommand, notExec, "data")
	cmd.ExtraFiles = []*os.File{gateR}
	var buf strings.Builder
	cmd.Stderr = &buf
	require.NoError(t, cmd.Start())
	require.NoError(t, openGate(gateW))
	err = cmd.Wait()
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitCannotExec, ee.ExitCode())
	assert.Contains(t, buf.String(), "permission denied")
}

// TestGuardianKillIsALoss: lock run tells a command stopped by its
// guardian (the end of validity it was told passed before an extend
// reached it: a loaded machine) from one killed by someone else, so that
// the first exits 78 (lost, stopped) rather than 137. The real guardian
// kills a real process group at the validity it was told; the control
// kills the group itself while the guardian still watches.
func TestGuardianKillIsALoss(t *testing.T) {
	start := func(t *testing.T) (*guard, *exec.Cmd, chan error) {
		guardian := exec.Command(binary, guardCommand)
		r, w, err := os.Pipe()
		require.NoError(t, err)
		guardian.Stdin = r
		require.NoError(t, guardian.Start())
		r.Close()
		g := &guard{cmd: guardian, w: w, exited: make(chan struct{})}
		go func() { _ = guardian.Wait(); close(g.exited) }()
		cmd := exec.Command("sleep", "1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); g.standDown() })
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return g, cmd, exited
	}
	t.Run("the guardian's kill", func(t *testing.T) {
		g, cmd, exited := start(t)
		require.NoError(t, g.watch(cmd.Process.Pid, time.Now().Add(100*time.Millisecond)))
		werr := <-exited
		assert.True(t, guardianKilled(werr, g), "killed by its guardian: %v", werr)
	})
	t.Run("control: killed by someone else", func(t *testing.T) {
		g, cmd, exited := start(t)
		require.NoError(t, g.watch(cmd.Process.Pid, time.Now().Add(time.Hour)))
		require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
		werr := <-exited
		assert.False(t, guardianKilled(werr, g), "the guardian still watches: %v", werr)
	})
}

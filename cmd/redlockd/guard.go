package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// The guardian of `lock run`.
//
// lock run stops its command when the lock is lost, but a lock run that is
// killed itself (SIGKILL, the OOM killer) runs no code: its command, in a
// process group of its own, would go on without the lock. So before the
// command starts, lock run starts a guardian: this same binary as the
// hidden command `redlockd lock-guard`, in a process group of its own, whose
// standard input is the read end of a pipe that only lock run holds open.
// lock run writes the command's process group ID on it once the command
// runs. When lock run ends in any way, the kernel closes its end of the pipe;
// the guardian reads end-of-file and kills the command's process group with
// SIGKILL at once. lock run's own normal exit first writes "done", and the
// guardian then leaves the group alone (by then lock run has stopped it).
//
// Nothing here depends on lock run running any code when it dies. The one
// gap, between the command's start and the group ID reaching the guardian
// (microseconds), is closed on Linux by the command's parent-death signal
// (lock_linux.go): the command itself gets SIGKILL when lock run dies. On
// other systems the guardian alone covers it, and a lock run killed in that
// window leaves the command running.

// guardCommand is the hidden command that runs the guardian.
const guardCommand = "lock-guard"

// guard is lock run's side of its guardian.
type guard struct {
	cmd *exec.Cmd
	w   *os.File // lock run's end of the pipe; closed when lock run dies
}

// startGuard starts the guardian. Its messages go to stderr.
func startGuard(stderr io.Writer) (*guard, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to start the guardian: %w", err)
	}
	r, w, err := os.Pipe() // close-on-exec: the command does not inherit w
	if err != nil {
		return nil, fmt.Errorf("guardian pipe: %w", err)
	}
	cmd := exec.Command(exe, guardCommand)
	cmd.Stdin, cmd.Stderr = r, stderr
	// A group of its own: a signal to lock run's group (Ctrl-C, a kill of
	// the job) does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the guardian: %w", err)
	}
	return &guard{cmd: cmd, w: w}, nil
}

// watch tells the guardian the process group to kill if lock run dies.
func (g *guard) watch(pgid int) error {
	_, err := fmt.Fprintf(g.w, "%d\n", pgid)
	return err
}

// standDown ends the guardian without a kill, and reaps it.
func (g *guard) standDown() {
	_, _ = io.WriteString(g.w, "done\n")
	g.w.Close()
	_ = g.cmd.Wait()
}

// lockGuard is the guardian's body: it reads the process group ID, then
// waits. End-of-file (or any read error) before "done" means lock run is
// gone: the group gets SIGKILL. End-of-file before a group ID means no
// command was started.
func lockGuard(stdin io.Reader, stderr io.Writer) error {
	br := bufio.NewReader(stdin)
	line, err := br.ReadString('\n')
	if err != nil {
		return nil // lock run ended before starting a command
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pgid <= 1 {
		return fmt.Errorf("%s: bad process group %q", guardCommand, strings.TrimSpace(line))
	}
	line, err = br.ReadString('\n')
	if err == nil && line == "done\n" {
		return nil
	}
	if kerr := syscall.Kill(-pgid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
		return fmt.Errorf("%s: killing process group %d: %w", guardCommand, pgid, kerr)
	}
	fmt.Fprintf(stderr, "redlockd lock run ended without stopping its command; its guardian killed process group %d\n", pgid)
	return nil
}

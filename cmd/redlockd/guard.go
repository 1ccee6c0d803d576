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
	"time"

	"golang.org/x/sys/unix"
)

// The guardian of `lock run`.
//
// lock run stops its command when the lock is lost, but a lock run that is
// killed itself (SIGKILL, the OOM killer) runs no code, and one that is
// stopped (SIGSTOP) or hung runs none in time: its command, in a process
// group of its own, would go on without the lock. So before the command
// starts, lock run starts a guardian: this same binary as the hidden
// command `redlockd lock-guard`, in a process group of its own, whose
// standard input is the read end of a pipe that only lock run holds open.
// On it lock run writes, one per line:
//
//	<pgid>          the command's process group, once it runs
//	until <ns>      the end of the lock's validity, as a CLOCK_MONOTONIC
//	                reading (the same clock in every process of the host),
//	                again whenever an extend moves it
//	lost            lock run declared the lock lost and stops the group
//	                itself by the end of validity; the guardian still kills
//	                it then, and does not blame a stopped or hung lock run
//	done            lock run stopped the group itself: stand down
//
// The guardian kills the group with SIGKILL at once when it reads
// end-of-file before "done" (lock run died: the kernel closed its end of
// the pipe), and when the clock passes the last "until" (lock run did not
// extend the lock in time: stopped, hung, or starved of CPU). Either way
// nothing depends on lock run running any code. The command runs no code
// before the guardian knows its group: it waits behind a start gate that
// lock run opens only after telling the guardian (gate.go). A guardian
// that dies is replaced by lock run (lockRun).

// guardCommand is the hidden command that runs the guardian.
const guardCommand = "lock-guard"

// guardName is the guardian's name in ps: its argv[0] and its comm.
const guardName = "lockrun-guard"

// guard is lock run's side of its guardian.
type guard struct {
	cmd    *exec.Cmd
	w      *os.File      // lock run's end of the pipe; closed when lock run dies
	exited chan struct{} // closed when the guardian has exited
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
	// Its argv[0] (and its name, set by the guardian) do not contain
	// "redlockd": a kill by name meant for lock run (killall redlockd,
	// pkill redlockd, pkill -f redlockd) does not take its guardian along.
	cmd.Args[0] = guardName
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
	g := &guard{cmd: cmd, w: w, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(g.exited)
	}()
	return g, nil
}

// watch tells the guardian the process group to kill if lock run dies,
// and the end of the lock's validity.
func (g *guard) watch(pgid int, validUntil time.Time) error {
	if _, err := fmt.Fprintf(g.w, "%d\n", pgid); err != nil {
		return err
	}
	return g.until(validUntil)
}

// until tells the guardian the end of the lock's validity.
func (g *guard) until(validUntil time.Time) error {
	_, err := fmt.Fprintf(g.w, "until %d\n", monotonicNow()+int64(time.Until(validUntil)))
	return err
}

// lost tells the guardian that lock run declared the lock lost: its kill
// at the end of validity stays, and says so rather than blame lock run.
func (g *guard) lost() error {
	_, err := io.WriteString(g.w, "lost\n")
	return err
}

// standDown ends the guardian without a kill, and reaps it.
func (g *guard) standDown() {
	_, _ = io.WriteString(g.w, "done\n")
	g.w.Close()
	<-g.exited
}

// monotonicNow is CLOCK_MONOTONIC in nanoseconds: unlike the wall clock it
// does not jump, and unlike Go's monotonic readings it is the same clock in
// every process of the host.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("CLOCK_MONOTONIC: " + err.Error()) // POSIX requires it
	}
	return ts.Nano()
}

// lockGuard is the guardian's body: see the protocol above. It exits 0
// after "done", and after a kill.
func lockGuard(stdin io.Reader, stderr io.Writer) error {
	// The guardian shows as lockrun-guard in ps, to killall and to pkill
	// (startGuard).
	_ = os.WriteFile("/proc/self/comm", []byte(guardName), 0)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	first, ok := <-lines
	if !ok || first == "done" {
		return nil // lock run ended before starting a command
	}
	pgid, err := strconv.Atoi(first)
	if err != nil || pgid <= 1 {
		return fmt.Errorf("%s: bad process group %q", guardCommand, first)
	}
	var deadline *time.Timer // fires at the end of validity
	var expired <-chan time.Time
	lost := false // lock run declared the loss
	for {
		select {
		case line, ok := <-lines:
			switch {
			case !ok:
				return killGroup(pgid, "lock run ended without stopping its command", stderr)
			case line == "done":
				return nil
			case line == "lost":
				lost = true
			case strings.HasPrefix(line, "until "):
				ns, err := strconv.ParseInt(strings.TrimPrefix(line, "until "), 10, 64)
				if err != nil {
					return errors.Join(fmt.Errorf("%s: bad line %q", guardCommand, line), killGroup(pgid, "", stderr))
				}
				if deadline != nil {
					deadline.Stop()
				}
				deadline = time.NewTimer(time.Duration(ns - monotonicNow()))
				expired = deadline.C
			default:
				return errors.Join(fmt.Errorf("%s: bad line %q", guardCommand, line), killGroup(pgid, "", stderr))
			}
		case <-expired:
			if lost {
				return killGroup(pgid, "the lock was lost and its validity ended", stderr)
			}
			return killGroup(pgid, "the lock's validity ended while lock run did not extend it (stopped or hung?)", stderr)
		}
	}
}

// killGroup sends SIGKILL to process group pgid and says why on stderr:
// only when the group was there to kill (a group already gone, ESRCH,
// got no kill, and a message would blame lock run for nothing).
func killGroup(pgid int, why string, stderr io.Writer) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: killing process group %d: %w", guardCommand, pgid, err)
	}
	if why != "" {
		fmt.Fprintf(stderr, "redlockd lock run: %s; its guardian killed process group %d\n", why, pgid)
	}
	return nil
}

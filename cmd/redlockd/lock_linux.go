package main

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// setParentDeathSignal makes the kernel send SIGKILL to the command when
// the thread that started it ends, which for lock run (its thread locked
// until the command has exited, see lockRun) is when lock run dies: a
// second way out besides the guardian's kill of the whole group (guard.go).
// It survives the start gate's execve (gate.go).
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// processDead reports whether process pid, a child of lock run, has
// exited: a zombie waiting to be reaped, or already reaped by cmd.Wait in
// its goroutine (then waitid answers ECHILD), so that its exit is on its
// way to cmd.Wait's channel. It asks the kernel with waitid(WNOHANG |
// WNOWAIT), which reaps nothing and needs no /proc (one mounted hidepid,
// or another PID namespace's, hides a live command as well as a reaped
// one).
func processDead(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return true // reaped already
	}
	// A zombie fills in a SIGCHLD siginfo; with no child in a waitable
	// state Linux leaves it zeroed (as it was).
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}

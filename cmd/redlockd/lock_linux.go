package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// setParentDeathSignal makes the kernel send SIGKILL to the command when
// the thread that started it ends, which for lock run (its thread locked
// until the command has exited, see lockRun) is when lock run dies: a
// second way out besides the guardian's kill of the whole group (guard.go).
// It survives the start gate's execve (gate.go).
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// processDead reports whether process pid has exited and is a zombie
// waiting to be reaped (state Z or X in /proc/<pid>/stat), so its exit is
// on its way to cmd.Wait. Anything else is "not known dead": a /proc that
// hides other users' processes (hidepid), is not mounted or is another
// PID namespace's gives no entry for a live command, and lock run must
// then go on guarding it.
func processDead(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

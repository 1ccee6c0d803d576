package main

import (
	"bytes"
	"errors"
	"io/fs"
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

// processDead reports whether process pid has exited: it is a zombie
// waiting to be reaped (state Z or X in /proc/<pid>/stat), or already
// reaped (no such entry), so its exit is on its way to cmd.Wait.
func processDead(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

//go:build unix && !linux

package redisproc

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group, so a terminal ^C
// reaches only the parent. There is no death signal outside Linux.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func startCmd(cmd *exec.Cmd) (release func(), err error) {
	return func() {}, cmd.Start()
}

// waitStopped cannot observe the process state portably; SIGSTOP is
// delivered before the target next runs, which is close enough.
func waitStopped(int, time.Duration) error { return nil }

// WaitStopped is a no-op here (see waitStopped).
func WaitStopped(int, time.Duration) error { return nil }

// procState needs /proc; tests use it on Linux only.
func procState(int) (byte, error) { return 0, errors.New("redisproc: no /proc") }

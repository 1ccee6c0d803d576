package main

import (
	"os/signal"
	"syscall"
	"unsafe"
)

// childProcAttr puts the command of `lock run` in a process group of its
// own, so that a lost lock stops everything it started. When lock run is
// the terminal's foreground job, the command's group becomes the
// foreground instead (it can read the terminal, and Ctrl-C reaches it
// directly); restore gives the terminal back to lock run's group after
// the command exited.
func childProcAttr() (attr *syscall.SysProcAttr, restore func()) {
	attr = &syscall.SysProcAttr{Setpgid: true}
	const stdin = 0
	fg, err := tcgetpgrp(stdin)
	if err != nil || fg != syscall.Getpgrp() {
		return attr, func() {}
	}
	attr.Foreground, attr.Ctty = true, stdin
	return attr, func() {
		// lock run is a background group now: setting the foreground
		// from there raises SIGTTOU, which is ignored meanwhile.
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		_ = tcsetpgrp(stdin, syscall.Getpgrp())
	}
}

func tcgetpgrp(fd int) (int, error) {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}

func tcsetpgrp(fd, pgrp int) error {
	p := int32(pgrp)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&p))); errno != 0 {
		return errno
	}
	return nil
}

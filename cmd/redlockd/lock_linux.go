package main

import "syscall"

// setParentDeathSignal makes the kernel send SIGKILL to the command when
// the thread that started it ends, which for lock run (its thread locked
// until the command has exited, see lockRun) is when lock run dies. It
// covers the moment before the guardian knows the command's group.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

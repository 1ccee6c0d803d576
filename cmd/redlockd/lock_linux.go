package main

import "syscall"

// setParentDeathSignal makes the kernel send SIGKILL to the command when
// the thread that started it ends, which for lock run (its thread locked
// until the command has exited, see lockRun) is when lock run dies: a
// second way out besides the guardian's kill of the whole group (guard.go).
// It survives the start gate's execve (gate.go).
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

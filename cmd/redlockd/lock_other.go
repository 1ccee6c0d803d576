//go:build !linux

package main

import "syscall"

// setParentDeathSignal does nothing here: only Linux has a parent-death
// signal. The guardian (guard.go) alone stops the command when lock run
// dies.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// processDead is only known on Linux (lock_linux.go).
func processDead(int) bool { return false }

//go:build linux

package redisproc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group, so a terminal ^C
// reaches only the parent (which then stops its servers in order), and asks
// the kernel to SIGKILL the child when its parent thread dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// forker owns the OS thread every child is started from. Pdeathsig fires
// when the thread that forked the child exits, not the process, and the Go
// runtime ends a thread when a goroutine locked to it returns; starting from
// an arbitrary goroutine could therefore kill a healthy redis-server at some
// later, unrelated moment (golang/go#27505). The forking goroutine is locked
// to its thread and lives while any child started from it is alive, so it
// does not outlive the servers (and does not show up as a goroutine leak).
var forker struct {
	mu   sync.Mutex
	live int // children started and not yet reaped, plus starts in flight
	reqs chan func()
}

// startCmd runs cmd.Start on the forker thread. release must be called once
// the child has been reaped.
func startCmd(cmd *exec.Cmd) (release func(), err error) {
	forker.mu.Lock()
	if forker.live == 0 {
		forker.reqs = make(chan func())
		go forkLoop(forker.reqs)
	}
	forker.live++
	reqs := forker.reqs
	forker.mu.Unlock()

	errc := make(chan error, 1)
	reqs <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		releaseForker()
		return nil, err
	}
	return sync.OnceFunc(releaseForker), nil
}

func releaseForker() {
	forker.mu.Lock()
	defer forker.mu.Unlock()
	forker.live--
	if forker.live == 0 {
		close(forker.reqs)
		forker.reqs = nil
	}
}

func forkLoop(reqs <-chan func()) {
	// Never unlocked: the thread ends with this goroutine, which returns only
	// when no child started from it is alive.
	runtime.LockOSThread()
	for fn := range reqs {
		fn()
	}
}

// WaitStopped waits until the kernel reports every thread of pid as
// stopped, so that a pause (SIGSTOP, delivered asynchronously) counts only
// once the process can no longer answer: a Go daemon's other threads may
// run on for a moment after its main one stopped.
func WaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		state, err := threadsState(pid)
		if err != nil {
			return err
		}
		if state == 'T' || state == 't' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not stopped %v after SIGSTOP (a thread in state %q)", pid, timeout, state)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitStopped is WaitStopped (Pause).
func waitStopped(pid int, timeout time.Duration) error { return WaitStopped(pid, timeout) }

// threadsState returns 'T' when every thread of pid is stopped, else the
// state letter of one that is not.
func threadsState(pid int) (byte, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread exited
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("unexpected /proc/%d/task/%s/stat: %q", pid, task.Name(), b)
		}
		if s := b[i+2]; s != 'T' && s != 't' {
			return s, nil
		}
	}
	return 'T', nil
}

// procState returns the state letter from /proc/<pid>/stat (R, S, T, Z, ...).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// "pid (comm) S ...": comm may itself contain ')', so use the last one.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	return b[i+2], nil
}

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// The start gate of `lock run`.
//
// The guardian (guard.go) can only kill a process group it knows, and it
// learns the command's group from lock run after the command was started.
// Were the command itself started there, it would run from that moment,
// and a lock run killed before its guardian learned the group (a loaded
// machine can deschedule lock run for as long as it likes right there)
// would leave it running: the parent-death signal (lock_linux.go) stops
// the command's own process, not what it has started meanwhile. So lock
// run starts this same binary as the hidden command `redlockd lock-exec`
// in the command's place and process group: it waits on a pipe (its file
// descriptor 3) that only lock run writes, and replaces itself with the
// command (execve: same process, same group, same parent-death signal)
// once lock run has written "go", which it does after the guardian was
// told the group. If lock run dies before that, the kernel closes the
// pipe: the gate reads end-of-file and exits without running anything.
// So no code of the command runs before the guardian watches its group.

// gateCommand is the hidden command that runs the start gate.
const gateCommand = "lock-exec"

// gateFD is the start gate's pipe in the gate's process: the first of
// exec.Cmd.ExtraFiles.
const gateFD = 3

// gateGo is what lock run writes to open the gate.
const gateGo = "go"

// gatedCommand returns the command that runs argv behind the start gate
// of pipe r (the read end; the caller keeps the write end). argv[0] is
// looked up as exec.Command would; the error, if any, is exec.LookPath's
// (exec.ErrNotFound, fs.ErrPermission, ...), so that lock run tells a
// command not found from one it cannot run before anything starts.
func gatedCommand(argv []string, r *os.File) (*exec.Cmd, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to start the command: %w", err)
	}
	cmd := exec.Command(exe, append([]string{gateCommand, path}, argv...)...)
	cmd.ExtraFiles = []*os.File{r}
	return cmd, nil
}

// openGate lets the gated command run. It closes w either way.
func openGate(w *os.File) error {
	_, err := io.WriteString(w, gateGo)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// lockExec is the gate's body: args are the command's path, then its
// argv (argv[0] as the user wrote it). It waits for "go" on gateFD and
// replaces itself with the command; on end-of-file (lock run is gone) it
// exits 125 without running it. The command does not inherit gateFD.
func lockExec(args []string) error {
	if len(args) < 2 {
		return &exitError{code: exitCannotExec, err: fmt.Errorf("%s: want a path and an argv, got %d arguments", gateCommand, len(args))}
	}
	gate := os.NewFile(gateFD, "lock run's start gate")
	buf := make([]byte, len(gateGo))
	if _, err := io.ReadFull(gate, buf); err != nil || string(buf) != gateGo {
		return &exitError{code: exitGateClosed} // lock run is gone: nothing runs
	}
	unix.CloseOnExec(gateFD)
	err := syscall.Exec(args[0], args[1:], os.Environ())
	return &exitError{code: exitCannotExec, err: fmt.Errorf("lock run: %s: %w", args[1], err)}
}

// Package testdaemon builds the real redlockd binary and runs it as a
// child process (`redlockd serve`) over given masters, for tests that need
// the daemon as users run it: the client, the lock command, the OpenAPI
// contract and the examples. Import it from _test.go files only.
package testdaemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// APIKey is the key of account "test" in every daemon started here.
const APIKey = "test-key-0123456789abcdef"

// Build compiles cmd/redlockd into dir and returns the binary's path. It
// builds in the product module's directory, with the product's go.mod,
// also when called from a test-only module that replaces it.
func Build(dir string) (string, error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/redlockd/redlockd").Output()
	if err != nil {
		return "", fmt.Errorf("testdaemon: finding the product module: %w", err)
	}
	bin := filepath.Join(dir, "redlockd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/redlockd")
	cmd.Dir = strings.TrimSpace(string(root))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testdaemon: go build: %w\n%s", err, out)
	}
	return bin, nil
}

// Options of Start.
type Options struct {
	Binary  string   // from Build; required
	Masters []string // host:port of each master; required
	// KeyPrefix isolates this daemon's keys, markers and fence counters
	// from other daemons on the same masters. Required.
	KeyPrefix string
	// Env is added to the daemon's environment (REDLOCKD_* settings).
	Env []string
	// LogPath receives the daemon's stderr; default os.DevNull.
	LogPath string
}

// Daemon is one running `redlockd serve`.
type Daemon struct {
	URL string // http://127.0.0.1:port

	cmd  *exec.Cmd
	log  *os.File
	err  error
	exit chan struct{}
}

// Start runs `redlockd serve` on a free loopback port with one API key
// (APIKey, account "test"), a 50 ms health interval, a 500 ms per-master
// timeout (a healthy master must not miss it under -race on a loaded
// machine) and max_wait 30s, and returns once GET /readyz answers 200.
func Start(o Options) (*Daemon, error) {
	var errs []error
	for range 5 {
		d, err := start(o)
		if err == nil {
			return d, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

var errPortInUse = errors.New("port in use")

func start(o Options) (*Daemon, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	logPath := o.LogPath
	if logPath == "" {
		logPath = os.DevNull
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Binary, "serve")
	cmd.Env = append(os.Environ(),
		"REDLOCKD_LISTEN="+addr,
		"REDLOCKD_MASTERS="+strings.Join(o.Masters, ","),
		"REDLOCKD_API_KEYS=test:"+APIKey,
		"REDLOCKD_KEY_PREFIX="+o.KeyPrefix,
		"REDLOCKD_HEALTH_INTERVAL=50ms",
		"REDLOCKD_PER_MASTER_TIMEOUT=500ms",
		"REDLOCKD_MAX_WAIT=30s",
		"REDLOCKD_SHUTDOWN_TIMEOUT=5s",
	)
	cmd.Env = append(cmd.Env, o.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The daemon dies with the test binary, even when that crashes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	d := &Daemon{URL: "http://" + addr, cmd: cmd, log: logf, exit: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		logf.Close()
		close(d.exit)
	}()
	if err := d.waitReady(30 * time.Second); err != nil {
		_ = d.Kill()
		if tail := tail(logPath); strings.Contains(tail, "address already in use") {
			return nil, fmt.Errorf("%w: %s", errPortInUse, addr)
		}
		return nil, fmt.Errorf("testdaemon: %w (log %s)", err, logPath)
	}
	return d, nil
}

func (d *Daemon) waitReady(limit time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-d.exit:
			return fmt.Errorf("daemon exited before it was ready: %v", d.err)
		default:
		}
		resp, err := hc.Get(d.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("daemon not ready within %v", limit)
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b[max(0, len(b)-2048):])
}

// PID returns the daemon's process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Stop sends SIGTERM and waits for the daemon to exit (a graceful
// shutdown); after 15 s it is killed.
func (d *Daemon) Stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exit:
		return nil
	case <-time.After(15 * time.Second):
		return errors.Join(errors.New("testdaemon: no exit 15s after SIGTERM"), d.Kill())
	}
}

// Kill sends SIGKILL and waits for the exit. Idempotent.
func (d *Daemon) Kill() error {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exit
	return nil
}

// Pause stops the daemon with SIGSTOP and returns once every thread of it
// is stopped (redisproc.WaitStopped): the signal is delivered
// asynchronously, and a daemon that runs on for a moment answers what a
// test meant to go unanswered. Resume continues it.
func (d *Daemon) Pause() error {
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return redisproc.WaitStopped(d.cmd.Process.Pid, 10*time.Second)
}

// Resume continues a paused daemon with SIGCONT.
func (d *Daemon) Resume() error { return d.cmd.Process.Signal(syscall.SIGCONT) }

// Exited is closed when the daemon has exited.
func (d *Daemon) Exited() <-chan struct{} { return d.exit }

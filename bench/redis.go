package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// master is one redis-server process on a free loopback port, started with
// no persistence. (internal/redisproc does this for the main module's tests;
// a separate module cannot import it, so this is the small version.)
type master struct {
	addr string
	cmd  *exec.Cmd
}

func startMasters(n int, dir string) ([]*master, error) {
	var ms []*master
	for i := range n {
		m, err := startMaster(filepath.Join(dir, fmt.Sprintf("redis-%d", i)))
		if err != nil {
			stopAll(ms)
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

func startMaster(dir string) (*master, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found (apt-get install redis-server): %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		log, err := os.Create(filepath.Join(dir, "redis.log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no")
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = childAttr()
		if err := cmd.Start(); err != nil {
			log.Close()
			return nil, err
		}
		log.Close()
		m := &master{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }() //nolint:errcheck // exit status is irrelevant
		if lastErr = waitPing(m.addr, exited); lastErr == nil {
			return m, nil
		}
		m.kill()
	}
	return nil, fmt.Errorf("redis-server in %s did not start: %w", dir, lastErr)
}

func waitPing(addr string, exited <-chan struct{}) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited (port taken?)", addr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pause sends SIGSTOP and waits until the kernel shows the process stopped.
func (m *master) pause() error {
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Second); ; {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
		if err != nil {
			return err
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server %s not stopped 1s after SIGSTOP", m.addr)
		}
		time.Sleep(time.Millisecond)
	}
}

func (m *master) resume() error { return m.cmd.Process.Signal(syscall.SIGCONT) }

func (m *master) kill() { _ = m.cmd.Process.Signal(syscall.SIGKILL) }

func stopAll(ms []*master) {
	for _, m := range ms {
		m.kill() // SIGKILL also ends a stopped process; nothing to keep
	}
}

// childAttr puts a child in its own process group (a terminal ^C reaches
// only us, and we stop it) and kills it if we die first.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

package main

import (
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stoppingProxy forwards TCP connections to a daemon until stop is
// called; from then on it forwards nothing either way and answers no new
// connection, as a daemon stopped with SIGSTOP: the kernel still accepts,
// nobody answers.
type stoppingProxy struct {
	ln      net.Listener
	stopped atomic.Bool
	done    chan struct{} // closed at cleanup: the held copies return
	mu      sync.Mutex
	conns   []net.Conn
}

func newStoppingProxy(t *testing.T, target string) *stoppingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stoppingProxy{ln: ln, done: make(chan struct{})}
	t.Cleanup(func() {
		close(p.done)
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go p.copy(out, in)
			go p.copy(in, out)
		}
	}()
	return p
}

// copy forwards src to dst until the proxy is stopped, then holds what
// it reads.
func (p *stoppingProxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.stopped.Load() {
			<-p.done
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stoppingProxy) url() string { return "http://" + p.ln.Addr().String() }

// TestLockRunExitsSoonAfterLosingToAStoppedDaemon: the daemon stops
// answering while lock run holds the lock (SIGSTOP, a hung host). The lock
// is declared lost before its validity ends, the command is stopped, and
// lock run exits 78 within its lost-release bound (2 s) after that, not a
// whole request timeout (10 s) later, waiting on a release that only
// cleans up (a break-it pass saw exit 78 about 10 s after the command was
// killed). The bound checked is loose (TTL + grace + 2 s + 4 s of slack,
// against 3 + 1 + 10 s before): a loaded machine cannot fail it, the old
// wait always did.
func TestLockRunExitsSoonAfterLosingToAStoppedDaemon(t *testing.T) {
	base := daemonURL(t)
	proxy := newStoppingProxy(t, strings.TrimPrefix(base, "http://"))
	dir := t.TempDir()
	p := startLock(t, proxy.url(), "run", "--key", "job:stopped-daemon", "--ttl", "3s", "--grace", "1s", "--",
		"sh", "-c", `echo $$ > `+dir+`/pid; while :; do sleep 0.05; done`)
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, dir+"/pid")))
	require.NoError(t, err)
	stopped := time.Now()
	proxy.stopped.Store(true)
	code := p.wait(t)
	took := time.Since(stopped)
	assert.Equal(t, 78, code, "stderr: %s", p.stderr.String())
	assert.Contains(t, p.stderr.String(), `lock "job:stopped-daemon" lost`)
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the command is gone")
	assert.Less(t, took, 10*time.Second, "lock run exited %v after the daemon stopped", took)
}

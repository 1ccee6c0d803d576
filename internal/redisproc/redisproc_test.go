package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redlockd/redlockd/internal/certgen"
)

// helperEnv makes the test binary act as a parent that starts one server
// and then waits to be killed (see TestParentDeathKillsServer).
const helperEnv = "REDISPROC_TEST_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		runHelper(dir)
		return
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, "redisproc tests need redis-server:", ErrNotInstalled)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// runHelper starts a server from a goroutine locked to an OS thread other
// than the main one, and lets that goroutine return, which makes the Go
// runtime end the thread: without the dedicated forking thread this fires
// Pdeathsig and kills the server.
func runHelper(dir string) {
	errc := make(chan error, 1)
	onEndingThread(func() {
		s, err := Start(Options{Dir: dir})
		if err == nil {
			fmt.Printf("pid %d\n", s.PID())
		}
		errc <- err
	})
	if err := <-errc; err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	time.Sleep(time.Minute) // the test kills us long before this
	os.Exit(2)
}

// onEndingThread runs fn in a goroutine locked to a thread that ends when
// fn returns. Go never ends the main thread, so a goroutine that lands on
// it keeps it busy and tries again from another goroutine.
func onEndingThread(fn func()) {
	go func() {
		runtime.LockOSThread() // never unlocked, so the thread ends with us
		if onMainThread() {
			onEndingThread(fn)
			select {} // hold the main thread; the helper exits by being killed
		}
		fn()
	}()
}

// onMainThread reports whether the caller runs on the process's main
// thread (Linux: /proc/thread-self is "<pid>/task/<tid>").
func onMainThread() bool {
	link, err := os.Readlink("/proc/thread-self")
	pid, tid, ok := strings.Cut(link, "/task/")
	return err == nil && ok && pid == tid
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Logf = t.Logf
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func client(t *testing.T, s *Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func ping(c *redis.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

func runID(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	for l := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "run_id:"); ok {
			return v
		}
	}
	t.Fatalf("INFO server has no run_id:\n%s", info)
	return ""
}

// alive reports whether pid is a live process (a zombie is not: its
// reaper may be a PID 1 that never reaps).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	if runtime.GOOS == "linux" {
		state, err := procState(pid)
		return err == nil && state != 'Z'
	}
	return true
}

func TestStartNAnswersPing(t *testing.T) {
	servers, err := StartN(3, Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartN: %v", err)
	}
	t.Cleanup(func() {
		if err := StopAll(servers); err != nil {
			t.Errorf("StopAll: %v", err)
		}
	})
	if len(servers) != 3 {
		t.Fatalf("StartN(3) returned %d servers", len(servers))
	}
	seen := map[int]bool{}
	for _, s := range servers {
		if seen[s.Port()] {
			t.Errorf("port %d handed out twice", s.Port())
		}
		seen[s.Port()] = true
		if want := "127.0.0.1:" + strconv.Itoa(s.Port()); s.Addr() != want {
			t.Errorf("Addr() = %q, want %q", s.Addr(), want)
		}
		if !s.Running() || s.PID() == 0 {
			t.Errorf("%s: Running() = %v, PID() = %d after start", s.Addr(), s.Running(), s.PID())
		}
		if err := ping(client(t, s), time.Second); err != nil {
			t.Errorf("%s: PING: %v", s.Addr(), err)
		}
	}
}

func TestKill(t *testing.T) {
	s := start(t, Options{})
	c := client(t, s)
	if err := ping(c, time.Second); err != nil {
		t.Fatalf("PING before Kill: %v", err)
	}
	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if s.PID() != 0 || s.Running() {
		t.Errorf("after Kill: PID() = %d, Running() = %v", s.PID(), s.Running())
	}
	if alive(pid) {
		t.Errorf("pid %d still alive after Kill", pid)
	}
	if err := ping(c, time.Second); err == nil {
		t.Error("PING succeeded after Kill")
	}
	if err := s.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := s.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Pause after Kill = %v, want ErrNotRunning", err)
	}
}

func TestPauseResume(t *testing.T) {
	s := start(t, Options{})
	c := client(t, s)
	if err := ping(c, time.Second); err != nil {
		t.Fatalf("PING before Pause: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if !s.Running() {
		t.Error("Running() = false while paused")
	}
	begin := time.Now()
	if err := ping(c, 100*time.Millisecond); err == nil {
		t.Error("PING succeeded while paused")
	}
	if d := time.Since(begin); d > time.Second {
		t.Errorf("PING with a 100ms timeout took %v", d)
	}
	if err := s.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := ping(c, time.Second); err != nil {
		t.Errorf("PING after Resume: %v", err)
	}

	// Stop must not hang on a paused process.
	if err := s.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	begin = time.Now()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop while paused: %v", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("Stop of a paused server took %v", d)
	}
}

func TestRestartEmptiesData(t *testing.T) {
	s := start(t, Options{})
	c := client(t, s)
	ctx := context.Background()
	if err := c.Set(ctx, "redisproc:restart", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	port, pid, before := s.Port(), s.PID(), runID(t, c)

	// Concurrent readers must not race with the lifecycle operation.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = s.PID(), s.Running()
			}
		}
	})
	err := s.Restart()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}

	if s.Port() != port {
		t.Errorf("port changed from %d to %d", port, s.Port())
	}
	if s.PID() == pid || s.PID() == 0 {
		t.Errorf("PID() = %d after Restart, was %d", s.PID(), pid)
	}
	if n, err := c.Exists(ctx, "redisproc:restart").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS after Restart = %d, %v; want 0, nil", n, err)
	}
	if after := runID(t, c); after == before {
		t.Errorf("run_id unchanged across Restart: %s", after)
	}

	// Restart also brings back a killed and a stopped server.
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart after Kill: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart after Stop: %v", err)
	}
	if err := ping(c, time.Second); err != nil {
		t.Errorf("PING after Restart after Stop: %v", err)
	}
}

func TestRestartWaitsForBusyPort(t *testing.T) {
	s := start(t, Options{})
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("occupy %s: %v", s.Addr(), err)
	}
	const held = 300 * time.Millisecond
	time.AfterFunc(held, func() { l.Close() })
	begin := time.Now()
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if d := time.Since(begin); d < held {
		t.Errorf("Restart returned after %v, before the port was freed", d)
	}
	if err := ping(client(t, s), time.Second); err != nil {
		t.Errorf("PING: %v", err)
	}
}

func TestStopIdempotent(t *testing.T) {
	s, err := Start(Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pid, dir := s.PID(), s.Dir()
	for i := range 2 {
		if err := s.Stop(); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after Stop: %v", err)
	}
	if s.PID() != 0 || s.Running() || alive(pid) {
		t.Errorf("after Stop: PID() = %d, Running() = %v, pid %d alive = %v", s.PID(), s.Running(), pid, alive(pid))
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s not removed by Stop: %v", dir, err)
	}
}

func TestKeepsCallerDir(t *testing.T) {
	parent := t.TempDir()
	s := start(t, Options{Dir: parent})
	if !strings.HasPrefix(s.Dir(), parent) {
		t.Fatalf("Dir() = %s, want under %s", s.Dir(), parent)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if b, err := os.ReadFile(s.LogPath()); err != nil || len(b) == 0 {
		t.Errorf("log %s after Stop: %d bytes, %v", s.LogPath(), len(b), err)
	}
}

func TestErrNotInstalled(t *testing.T) {
	_, err := Start(Options{Binary: "redis-server-that-does-not-exist"})
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Start = %v, want ErrNotInstalled", err)
	}
	if !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Errorf("error does not say how to install: %v", err)
	}
	if _, err := StartN(2, Options{Binary: "/nonexistent/redis-server"}); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("StartN = %v, want ErrNotInstalled", err)
	}
}

func TestStartFailureShowsLogTail(t *testing.T) {
	begin := time.Now()
	_, err := Start(Options{ExtraArgs: []string{"--no-such-directive", "x"}, Logf: t.Logf})
	if err == nil {
		t.Fatal("Start with a bad directive succeeded")
	}
	if !strings.Contains(err.Error(), "Bad directive") {
		t.Errorf("error lacks the log tail: %v", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("failing Start took %v", d)
	}
}

func TestExtraArgsAndEnv(t *testing.T) {
	// A wrapper that records its environment and execs redis-server (so the
	// pid, and with it the readiness check and signals, stay the same).
	redisServer, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	envFile, wrapper := dir+"/env", dir+"/redis-wrapper"
	script := fmt.Sprintf("#!/bin/sh\nenv > %q\nexec %q \"$@\"\n", envFile, redisServer)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{
		Binary:    wrapper,
		ExtraArgs: []string{"--appendonly", "yes"},
		Env:       []string{"REDISPROC_MARK=1"},
		LDPreload: "/nonexistent/libshim.so", // ld.so warns and carries on
	})
	got, err := client(t, s).ConfigGet(context.Background(), "appendonly").Result()
	if err != nil || got["appendonly"] != "yes" {
		t.Errorf("CONFIG GET appendonly = %v, %v; want yes", got, err)
	}
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"REDISPROC_MARK=1\n", "LD_PRELOAD=/nonexistent/libshim.so\n"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
}

// withFreePort makes freePort hand out the given ports first.
func withFreePort(t *testing.T, first ...int) {
	t.Helper()
	orig := freePort
	var mu sync.Mutex
	freePort = func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(first) > 0 {
			p := first[0]
			first = first[1:]
			return p, nil
		}
		return orig()
	}
	t.Cleanup(func() { freePort = orig })
}

// listenUnreserved listens on a loopback port that no Server of this
// process holds, nor its neighbours within spread: the kernel may hand a
// listener the port of a Server an earlier test stopped, which stays
// reserved (see ports), and a fixed Start on it would then fail for that
// reason instead of the one the test is about.
func listenUnreserved(t *testing.T, spread int) net.Listener {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ports.mu.Lock()
		clash := false
		for p := port - spread; p <= port+spread; p++ {
			clash = clash || ports.reserved[p]
		}
		ports.mu.Unlock()
		if !clash {
			t.Cleanup(func() { l.Close() })
			return l
		}
		l.Close()
	}
	t.Fatal("the kernel kept offering ports this process has reserved")
	return nil
}

func TestStartRetriesOnTakenPort(t *testing.T) {
	t.Run("listener", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		taken := l.Addr().(*net.TCPAddr).Port
		withFreePort(t, taken)
		s := start(t, Options{})
		if s.Port() == taken {
			t.Errorf("Start reported port %d, which a listener holds", taken)
		}
	})
	t.Run("foreign redis", func(t *testing.T) {
		// A redis-server we did not start holds the port and answers PING:
		// only the process_id check tells it apart from ours.
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		foreign := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir())
		if err := foreign.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { foreign.Process.Kill(); foreign.Wait() }()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		for deadline := time.Now().Add(5 * time.Second); ; {
			if pid, err := probe(nil, addr, &Options{}); err == nil && pid == foreign.Process.Pid {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("foreign redis did not come up: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		withFreePort(t, port)
		s := start(t, Options{})
		if s.Port() == port || s.PID() == foreign.Process.Pid {
			t.Errorf("Start took the foreign redis on port %d (pid %d) for its own", port, foreign.Process.Pid)
		}
	})
	t.Run("fixed port is not retried", func(t *testing.T) {
		l := listenUnreserved(t, 0)
		_, err := Start(Options{Port: l.Addr().(*net.TCPAddr).Port, Logf: t.Logf})
		if err == nil || !strings.Contains(err.Error(), "Address already in use") {
			t.Errorf("Start on a taken fixed port = %v, want an address-in-use error", err)
		}
	})
}

func TestStartNStopsStartedOnFailure(t *testing.T) {
	var mu sync.Mutex
	var pids []int
	logf := func(format string, args ...any) {
		t.Logf(format, args...)
		if strings.HasPrefix(format, "redisproc: started") {
			mu.Lock()
			pids = append(pids, args[0].(int))
			mu.Unlock()
		}
	}
	// Of the three consecutive fixed ports the middle one is held here, and
	// a fixed port is not retried, so that server fails and the others (if
	// their ports are free) start and must then be stopped.
	l := listenUnreserved(t, 1)
	base := l.Addr().(*net.TCPAddr).Port - 1
	servers, err := StartN(3, Options{Port: base, Logf: logf})
	if err == nil {
		StopAll(servers)
		t.Fatalf("StartN succeeded although port %d is held", base+1)
	}
	if servers != nil {
		t.Errorf("StartN returned servers along with %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d servers had started before StartN gave up", len(pids))
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d still alive after StartN failed", pid)
		}
	}
}

func TestParentDeathKillsServer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux only")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(exe, "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { helper.Process.Kill(); helper.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %q, %v", line, err)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "pid %d", &pid); err != nil {
		t.Fatalf("helper said %q", line)
	}
	defer syscall.Kill(pid, syscall.SIGKILL) // in case the test fails

	// The helper's starting thread has ended; the server must survive that.
	time.Sleep(200 * time.Millisecond)
	if !alive(pid) {
		t.Fatalf("redis-server pid %d died when the starting thread ended", pid)
	}

	helper.Process.Kill()
	helper.Wait()
	for deadline := time.Now().Add(2 * time.Second); alive(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server pid %d outlived its killed parent", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A TLS-only server with a password: Start waits until it answers over
// TLS, a client with the CA, a client certificate and the password is
// served, a plain one is not, and Restart keeps the setup.
func TestTLSAndPassword(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("redis", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(Options{TLS: &TLS{CertFile: server.CertFile, KeyFile: server.KeyFile, CAFile: ca.CertFile}, Password: "admin-password"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })

	cfg, err := ca.ClientConfig(server)
	if err != nil {
		t.Fatal(err)
	}
	ping := func(o *redis.Options) error {
		o.Addr, o.MaxRetries, o.DialTimeout = s.Addr(), -1, time.Second
		r := redis.NewClient(o)
		defer r.Close()
		return r.Ping(context.Background()).Err()
	}
	if err := ping(&redis.Options{TLSConfig: cfg, Password: "admin-password"}); err != nil {
		t.Errorf("TLS client with the password: %v", err)
	}
	if err := ping(&redis.Options{TLSConfig: cfg}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("TLS client without the password: %v, want NOAUTH", err)
	}
	if err := ping(&redis.Options{Password: "admin-password"}); err == nil {
		t.Error("a plain client was served by a TLS-only server")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(&redis.Options{TLSConfig: cfg, Password: "admin-password"}); err != nil {
		t.Errorf("after Restart: %v", err)
	}
}

package redisproc

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlockd/redlockd/internal/certgen"
)

// ErrNotInstalled is returned, wrapped, by Start and StartN when the
// redis-server binary cannot be found.
var ErrNotInstalled = errors.New(`redisproc: redis-server not found; install it with "apt-get install redis-server" (Debian/Ubuntu) or "brew install redis" (macOS), or set Options.Binary`)

// ErrNotRunning is returned, wrapped, by Pause and Resume when the server
// has no live process.
var ErrNotRunning = errors.New("redisproc: redis-server not running")

// Bounds on waiting. A local redis-server with no data starts and stops in
// milliseconds; these only turn a hang into an error.
const (
	readyTimeout       = 5 * time.Second        // from exec to PONG
	probeTimeout       = 250 * time.Millisecond // one PING round trip
	stopTimeout        = 5 * time.Second        // SIGTERM to exit, then SIGKILL
	killTimeout        = 5 * time.Second        // SIGKILL to reaped
	pauseTimeout       = time.Second            // SIGSTOP to stopped state
	restartBindTimeout = 5 * time.Second        // Restart retrying its port
	startAttempts      = 5                      // ports Start tries
	logTailBytes       = 2048                   // log shown in start errors
)

// errPortInUse marks a start attempt that lost its port to someone else.
var errPortInUse = errors.New("port in use")

// Options configures Start and StartN. The zero value is ready to use.
type Options struct {
	// Binary is the redis-server executable, a name looked up on PATH or a
	// path. Default "redis-server". It must be redis-server or exec it.
	Binary string
	// Dir is the parent of the per-server directories. Default: each
	// server gets a new os.MkdirTemp directory, removed by Stop and Close.
	// A directory under a caller-given Dir is kept, logs included.
	Dir string
	// Port is the port of the (first) server. Default 0: a free loopback
	// port, with a new one tried when it is taken before redis binds it.
	// StartN uses Port, Port+1, ..., Port+n-1. A fixed port is not retried.
	Port int
	// ExtraArgs are appended to the redis-server command line after the
	// package's own arguments, so they override them (for example
	// "--appendonly", "yes"). Do not override --port, --bind or --dir.
	ExtraArgs []string
	// LDPreload, if set, is the LD_PRELOAD of the process (a clock shim).
	LDPreload string
	// Env is added to the parent's environment; later entries win.
	Env []string
	// Logf, if set, receives one line per start, stop, kill and retry.
	Logf func(format string, args ...any)
	// TLS, if set, makes the server speak TLS only: --port 0 --tls-port
	// <port> with its files. The readiness probe then connects with TLS.
	TLS *TLS
	// Password, if set, is the default user's password (--requirepass);
	// the readiness probe authenticates with it.
	Password string
}

// TLS is the TLS setup of a server (redis.conf's tls-* settings).
type TLS struct {
	// CertFile and KeyFile are the server's certificate and key (PEM);
	// CAFile the CA clients' certificates must chain to, which the
	// readiness probe also trusts for the server's certificate.
	CertFile, KeyFile, CAFile string
	// AuthClients is tls-auth-clients: "yes" (clients must present a
	// certificate signed by CAFile), "optional" or "no". Default "yes",
	// as Redis's. The readiness probe presents CertFile and KeyFile as
	// its client certificate, which must therefore allow client auth.
	AuthClients string
}

// Server is one redis-server process on 127.0.0.1. Its port is fixed for its
// lifetime. All methods are safe for concurrent use.
type Server struct {
	bin  string
	opts Options
	port int
	addr string

	// opMu serializes lifecycle operations (Kill, Pause, Resume, Restart,
	// Stop) so that PID and Running never wait behind a slow one.
	opMu sync.Mutex

	mu      sync.Mutex // guards the fields below
	dir     string     // the server's own directory; "" after Stop removed it
	ownsDir bool       // dir is a temp dir we remove on Stop
	p       *process   // nil when never started, killed or stopped
	paused  bool
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once the process has been reaped
	err  error         // from cmd.Wait, set before done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig, treating an already exited process as success.
func (p *process) signal(sig os.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redisproc: signal %v to pid %d: %w", sig, p.pid, err)
	}
	return nil
}

// Start starts one redis-server on a loopback port and returns once it
// answers PING. The arguments are --port N --bind 127.0.0.1 --dir <own dir>
// --save "" --appendonly no --daemonize no --protected-mode no, followed by
// Options.ExtraArgs. If the server does not come up, the error includes the
// tail of its log. If redis-server cannot be found, the error wraps
// ErrNotInstalled.
func Start(opts Options) (*Server, error) {
	bin, err := lookBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	opts.ExtraArgs = append([]string(nil), opts.ExtraArgs...)
	opts.Env = append([]string(nil), opts.Env...)
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	s := &Server{bin: bin, opts: opts}
	if err := s.ensureDir(); err != nil {
		return nil, err
	}

	attempts := startAttempts
	if opts.Port != 0 {
		attempts = 1
	}
	var errs []error
	for attempt := 1; ; attempt++ {
		var port int
		if opts.Port != 0 {
			port, err = reserveFixedPort(opts.Port)
		} else {
			port, err = reserveFreePort()
		}
		if err != nil {
			errs = append(errs, err)
			break
		}
		s.port, s.addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = s.launch(nil)
		if err == nil {
			return s, nil
		}
		releasePort(port)
		errs = append(errs, err)
		if !errors.Is(err, errPortInUse) || attempt == attempts {
			break
		}
		opts.Logf("redisproc: port %d was taken, trying another", port)
	}
	s.removeOwnDir()
	return nil, errors.Join(errs...)
}

// StartN starts n servers in parallel with the same options (with a fixed
// Options.Port, on consecutive ports). If any fails, the ones that started
// are stopped and the errors are returned joined.
func StartN(n int, opts Options) ([]*Server, error) {
	if n < 0 {
		return nil, fmt.Errorf("redisproc: StartN(%d): negative count", n)
	}
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		o := opts
		if o.Port != 0 {
			o.Port += i
		}
		wg.Go(func() { servers[i], errs[i] = Start(o) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, StopAll(servers))
	}
	return servers, nil
}

// StopAll stops the servers in parallel (nil entries are skipped) and
// returns their errors joined.
func StopAll(servers []*Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		if s != nil {
			wg.Go(func() { errs[i] = s.Stop() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// Port returns the server's TCP port, the same across restarts.
func (s *Server) Port() int { return s.port }

// Dir returns the server's own directory (its log and its data dir), or ""
// after Stop removed it.
func (s *Server) Dir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dir
}

// LogPath returns the file that receives the server's stdout and stderr,
// across restarts, or "" after Stop removed it.
func (s *Server) LogPath() string {
	dir := s.Dir()
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "redis.log")
}

// PID returns the pid of the running process, or 0 when it is not running
// (never started, killed, stopped, or exited on its own).
func (s *Server) PID() int {
	if p := s.live(); p != nil {
		return p.pid
	}
	return 0
}

// Paused reports whether the process was stopped by Pause and not resumed.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p != nil && s.paused
}

// Running reports whether the process is alive. A paused process is alive.
func (s *Server) Running() bool { return s.live() != nil }

// live returns the current process if it has not exited.
func (s *Server) live() *process {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p == nil || p.exited() {
		return nil
	}
	return p
}

// Kill sends SIGKILL and waits until the process has been reaped. Killing a
// server that is not running returns nil.
func (s *Server) Kill() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	return s.kill()
}

func (s *Server) kill() error {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(killTimeout):
		return fmt.Errorf("redisproc: pid %d (%s) did not exit %v after SIGKILL", p.pid, s.addr, killTimeout)
	}
	s.forget(p)
	s.opts.Logf("redisproc: killed pid %d on %s", p.pid, s.addr)
	return nil
}

func (s *Server) forget(p *process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == p {
		s.p, s.paused = nil, false
	}
}

// Pause stops the process with SIGSTOP, so that it holds its connections
// open but answers nothing until Resume: a process pause (a long GC, a
// frozen VM). On Linux it returns once the kernel reports the process
// stopped. It returns an error wrapping ErrNotRunning if there is no process.
func (s *Server) Pause() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	p := s.live()
	if p == nil {
		return fmt.Errorf("%w: pause %s", ErrNotRunning, s.addr)
	}
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
	if err := waitStopped(p.pid, pauseTimeout); err != nil && !p.exited() {
		return fmt.Errorf("redisproc: pause %s: %w", s.addr, err)
	}
	return nil
}

// Resume continues a paused process with SIGCONT. It returns an error
// wrapping ErrNotRunning if there is no process.
func (s *Server) Resume() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	p := s.live()
	if p == nil {
		return fmt.Errorf("%w: resume %s", ErrNotRunning, s.addr)
	}
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	return nil
}

// Restart kills the process if it runs (SIGKILL, no shutdown), empties the
// data dir, and starts redis-server again on the same port, returning once
// it answers PING. The new process has an empty dataset and a new run_id. If
// the port is briefly taken, the bind is retried for a bounded time.
// Restart also works after Kill and after Stop.
func (s *Server) Restart() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.kill(); err != nil {
		return err
	}
	if err := s.ensureDir(); err != nil {
		return err
	}
	data := filepath.Join(s.Dir(), "data")
	if err := os.RemoveAll(data); err != nil {
		return fmt.Errorf("redisproc: restart %s: empty data dir: %w", s.addr, err)
	}
	if err := os.Mkdir(data, 0o755); err != nil {
		return fmt.Errorf("redisproc: restart %s: %w", s.addr, err)
	}
	return s.relaunch(nil)
}

// RestartKeepingData shuts the process down cleanly (SIGTERM: Redis writes
// out its AOF, and its RDB where --save asks for one) and starts
// redis-server again on the same port over the same data dir, with args
// appended to the command line of this run only (for example
// "--appendonly", "yes" to load the AOF a CONFIG SET started). The new
// process has a new run_id and whatever its persistence kept.
func (s *Server) RestartKeepingData(args ...string) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.stop(); err != nil {
		return err
	}
	if err := s.ensureDir(); err != nil {
		return err
	}
	return s.relaunch(args)
}

// relaunch launches the server with the extra args, retrying its port for
// a bounded time. The caller holds opMu.
func (s *Server) relaunch(args []string) error {
	deadline := time.Now().Add(restartBindTimeout)
	for {
		err := s.launch(args)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return fmt.Errorf("redisproc: restart on port %d: %w", s.port, err)
		}
		s.opts.Logf("redisproc: port %d busy, retrying restart", s.port)
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down gracefully: it resumes a paused process, sends
// SIGTERM, waits, and falls back to SIGKILL after a bound. It then removes
// the server's directory if Start created it as a temp dir. Stop on a server
// that is not running returns nil; Restart starts it again.
func (s *Server) Stop() error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	err := s.stop()
	if rmErr := s.removeOwnDir(); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	return err
}

// Close is Stop, so that a Server is an io.Closer.
func (s *Server) Close() error { return s.Stop() }

func (s *Server) stop() error {
	s.mu.Lock()
	p, paused := s.p, s.paused
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	if p.exited() {
		s.forget(p)
		return nil
	}
	if paused {
		if err := p.signal(syscall.SIGCONT); err != nil {
			return err
		}
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		s.forget(p)
		s.opts.Logf("redisproc: stopped pid %d on %s", p.pid, s.addr)
		return nil
	case <-time.After(stopTimeout):
		s.opts.Logf("redisproc: pid %d on %s ignored SIGTERM for %v, killing", p.pid, s.addr, stopTimeout)
		return s.kill()
	}
}

// ensureDir creates the server's directory and data dir if needed.
func (s *Server) ensureDir() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != "" {
		return nil
	}
	var dir string
	var err error
	if s.opts.Dir == "" {
		dir, err = os.MkdirTemp("", "redisproc-")
	} else if err = os.MkdirAll(s.opts.Dir, 0o755); err == nil {
		dir, err = os.MkdirTemp(s.opts.Dir, "redis-")
	}
	if err == nil {
		err = os.Mkdir(filepath.Join(dir, "data"), 0o755)
	}
	if err != nil {
		if dir != "" {
			os.RemoveAll(dir)
		}
		return fmt.Errorf("redisproc: server dir: %w", err)
	}
	s.dir, s.ownsDir = dir, s.opts.Dir == ""
	return nil
}

// removeOwnDir removes the server's directory if it is a temp dir we made.
func (s *Server) removeOwnDir() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" || !s.ownsDir {
		return nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("redisproc: remove %s: %w", s.dir, err)
	}
	s.dir = ""
	return nil
}

// launch runs one redis-server on s.port, with args after the options'
// ExtraArgs, and waits until it answers PING.
// The caller holds opMu or has not published s yet. An error wraps
// errPortInUse when the port was taken by someone else.
func (s *Server) launch(args []string) error {
	dir := s.Dir()
	data := filepath.Join(dir, "data")
	logPath := filepath.Join(dir, "redis.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	fi, err := logFile.Stat()
	if err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	logStart := fi.Size() // earlier runs' output is not this run's story

	extra := args
	args = []string{"--port", strconv.Itoa(s.port)}
	if t := s.opts.TLS; t != nil {
		args = []string{"--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile, "--tls-ca-cert-file", t.CAFile,
			"--tls-auth-clients", cmp.Or(t.AuthClients, "yes")}
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	args = append(append(args,
		"--bind", "127.0.0.1",
		"--dir", data,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
	), s.opts.ExtraArgs...)
	args = append(args, extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = data
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), s.opts.Env...)
	if s.opts.LDPreload != "" {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+s.opts.LDPreload)
	}
	cmd.SysProcAttr = sysProcAttr()
	release, err := startCmd(cmd)
	if err != nil {
		return fmt.Errorf("redisproc: start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		release()
		close(p.done)
	}()

	if err := waitReady(p, s.addr, &s.opts); err != nil {
		p.signal(syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(killTimeout):
		}
		tail := readTail(logPath, logStart)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %v", errPortInUse, err)
		}
		return fmt.Errorf("redisproc: redis-server on %s did not come up: %w\n--- tail of %s ---\n%s", s.addr, err, logPath, tail)
	}
	s.mu.Lock()
	s.p, s.paused = p, false
	s.mu.Unlock()
	s.opts.Logf("redisproc: started redis-server pid %d on %s (dir %s)", p.pid, s.addr, dir)
	return nil
}

// waitReady polls addr until the process p itself answers PING.
func waitReady(p *process, addr string, o *Options) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if p.exited() {
			return fmt.Errorf("pid %d exited before answering PING: %v", p.pid, p.err)
		}
		pid, err := probe(p.done, addr, o)
		if err == nil {
			if pid == p.pid {
				return nil
			}
			return fmt.Errorf("%w: %s is answered by pid %d, not by ours (%d)", errPortInUse, addr, pid, p.pid)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG from pid %d within %v: %w", p.pid, readyTimeout, err)
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// probe sends PING and INFO server over raw RESP and returns the
// process_id of the server that answered +PONG. It gives up after
// probeTimeout or as soon as abort is closed (our process exited, so
// whatever holds the port is not it).
func probe(abort <-chan struct{}, addr string, o *Options) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	go func() {
		select {
		case <-abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := dialProbe(ctx, addr, o.TLS)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	// Unblocks the reads below on timeout or abort.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	cmds := "PING\r\nINFO server\r\n"
	if o.Password != "" {
		cmds = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(o.Password), o.Password) + cmds
	}
	if _, err := io.WriteString(conn, cmds); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	if o.Password != "" {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if line = strings.TrimRight(line, "\r\n"); line != "+OK" {
			return 0, fmt.Errorf("AUTH answered %q", line)
		}
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line = strings.TrimRight(line, "\r\n"); line != "+PONG" {
		return 0, fmt.Errorf("PING answered %q", line)
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimRight(strings.TrimPrefix(line, "$"), "\r\n"))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return 0, fmt.Errorf("INFO server answered %q", line)
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(string(info), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// dialProbe connects to addr, with TLS when t is set.
func dialProbe(ctx context.Context, addr string, t *TLS) (net.Conn, error) {
	var d net.Dialer
	if t == nil {
		return d.DialContext(ctx, "tcp", addr)
	}
	ca := &certgen.CA{CertFile: t.CAFile}
	cfg, err := ca.ClientConfig(certgen.Pair{CertFile: t.CertFile, KeyFile: t.KeyFile})
	if err != nil {
		return nil, err
	}
	td := tls.Dialer{NetDialer: &d, Config: cfg}
	return td.DialContext(ctx, "tcp", addr)
}

// readTail returns the last logTailBytes of path written after offset.
func readTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if start := fi.Size() - logTailBytes; start > offset {
		offset = start
	}
	b, err := io.ReadAll(io.NewSectionReader(f, offset, fi.Size()-offset))
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if len(b) == 0 {
		return "(log is empty)"
	}
	return strings.TrimRight(string(b), "\n")
}

func lookBinary(name string) (string, error) {
	if name == "" {
		name = "redis-server"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w (looked for %q: %v)", ErrNotInstalled, name, err)
	}
	return path, nil
}

// Ports handed to Servers stay reserved for the life of the process, so
// that parallel Starts never pick the same port and a killed or stopped
// Server's port is not handed to another Server before it restarts.
var ports struct {
	mu       sync.Mutex
	reserved map[int]bool
}

// freePort asks the kernel for a free loopback port. A variable so that
// tests can hand out a taken port.
var freePort = func() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func reserveFreePort() (int, error) {
	for range 100 {
		port, err := freePort()
		if err != nil {
			return 0, fmt.Errorf("redisproc: pick a free port: %w", err)
		}
		if reservePort(port) {
			return port, nil
		}
	}
	return 0, errors.New("redisproc: pick a free port: kernel keeps offering reserved ones")
}

func reserveFixedPort(port int) (int, error) {
	if port < 1 || port > 65535 {
		return 0, fmt.Errorf("redisproc: port %d out of range", port)
	}
	if !reservePort(port) {
		return 0, fmt.Errorf("redisproc: port %d is already used by another Server in this process", port)
	}
	return port, nil
}

func reservePort(port int) bool {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.reserved[port] {
		return false
	}
	if ports.reserved == nil {
		ports.reserved = make(map[int]bool)
	}
	ports.reserved[port] = true
	return true
}

func releasePort(port int) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	delete(ports.reserved, port)
}

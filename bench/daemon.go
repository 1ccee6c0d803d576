package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// noLimits runs a daemon whose account has no quota, rate limit or lock
// cap (the default max_locks is 10000): the daemon as it was before
// account limits, the reference for the httpq target.
var noLimits = []string{"REDLOCKD_ACCOUNT_DEFAULTS_MAX_LOCKS=0"}

// withLimits gives the account a quota, a rate limit and a lock cap that
// a benchmark never reaches, so that every call is counted, admitted and
// synced with the masters but none is refused.
var withLimits = []string{
	"REDLOCKD_ACCOUNT_DEFAULTS_QUOTA=1000000000000/24h",
	"REDLOCKD_ACCOUNT_DEFAULTS_RATE=1000000",
	"REDLOCKD_ACCOUNT_DEFAULTS_BURST=10000000",
	"REDLOCKD_ACCOUNT_DEFAULTS_MAX_LOCKS=100000000",
}

// daemonProc is a `redlockd serve` child process with its default settings,
// masters and one API key given through REDLOCKD_* variables.
type daemonProc struct {
	url    string
	apiKey string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// buildDaemon compiles the daemon from the repository at root (the working
// tree, as the bench module's replace directive does for the library).
func buildDaemon(root, dir string) (string, error) {
	bin := filepath.Join(dir, "redlockd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/redlockd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/redlockd in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}

// startDaemon starts bin, logging to dir/<name>.log, with one account
// "bench" whose API key is key ("": a new random one) and env (REDLOCKD_*
// settings) added to its environment.
func startDaemon(bin, dir, name, key string, masters []string, env ...string) (*daemonProc, error) {
	return startDaemonArgs(bin, dir, name, key, masters, nil, env...)
}

// startDaemonArgs is startDaemon with args added after `serve` (e.g.
// --config); masters may be empty when the config file names them.
func startDaemonArgs(bin, dir, name, key string, masters, args []string, env ...string) (*daemonProc, error) {
	if key == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		key = hex.EncodeToString(b[:])
	}
	logPath := filepath.Join(dir, name+".log")
	var lastErr error
	for range 3 { // the free port may be taken before the daemon binds it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		log, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		d := &daemonProc{
			url:    "http://127.0.0.1:" + strconv.Itoa(port),
			apiKey: key,
			log:    logPath,
			exited: make(chan struct{}),
		}
		d.cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
		d.cmd.Env = append(os.Environ(),
			"REDLOCKD_LISTEN=127.0.0.1:"+strconv.Itoa(port),
			"REDLOCKD_API_KEYS=bench:"+key,
		)
		if len(masters) > 0 {
			d.cmd.Env = append(d.cmd.Env, "REDLOCKD_MASTERS="+strings.Join(masters, ","))
		}
		d.cmd.Env = append(d.cmd.Env, env...)
		d.cmd.Stdout, d.cmd.Stderr = log, log
		d.cmd.SysProcAttr = childAttr()
		if err := d.cmd.Start(); err != nil {
			log.Close()
			return nil, err
		}
		log.Close()
		go func() { d.cmd.Wait(); close(d.exited) }() //nolint:errcheck // reported via the log tail
		if lastErr = d.waitHealthy(); lastErr == nil {
			return d, nil
		}
		d.stop()
	}
	return nil, fmt.Errorf("redlockd serve did not come up: %w\n%s", lastErr, tail(logPath, 2048))
}

func (d *daemonProc) waitHealthy() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-d.exited:
			return fmt.Errorf("redlockd exited: %v", d.cmd.ProcessState)
		default:
		}
		resp, err := http.Get(d.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/healthz: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAllUp polls /readyz until the daemon reports every master up.
func (d *daemonProc) waitAllUp(ctx context.Context, n int) bool {
	for ctx.Err() == nil {
		var body struct {
			Quorum struct {
				Up int `json:"up"`
			} `json:"quorum"`
		}
		if resp, err := http.Get(d.url + "/readyz"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if body.Quorum.Up == n {
				return true
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// memory reads VmHWM (peak RSS) and VmRSS in KiB from /proc/<pid>/status.
func (d *daemonProc) memory() (hwmKiB, rssKiB int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, _ := strconv.ParseInt(fields[0], 10, 64)
		switch name {
		case "VmHWM":
			hwmKiB = v
		case "VmRSS":
			rssKiB = v
		}
	}
	return hwmKiB, rssKiB
}

func (d *daemonProc) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(5 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

func tail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(b)
}

// newHTTPClient is a keep-alive client able to hold conc idle connections.
func newHTTPClient(conc int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conc + 16,
		MaxIdleConnsPerHost: conc + 16,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// childAttr puts a child in its own process group (a terminal ^C reaches
// only us, and we stop it) and kills it if we die first.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// freePort is a loopback port that was free when it was picked.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

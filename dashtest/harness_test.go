package dashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/clockshim"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// repoRoot is the repository (the product module); redlockdBin the
// daemon built from it by TestMain.
var repoRoot, redlockdBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = root
	dir, err := os.MkdirTemp("", "dashtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	redlockdBin = filepath.Join(dir, "redlockd")
	build := exec.Command("go", "build", "-o", redlockdBin, "./cmd/redlockd")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "dashtest: building redlockd: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// need returns the path of the program bin (from the Debian package pkg),
// or skips the test without it — fails instead when the environment
// variable requireVar is 1, as .ci/run sets it.
func need(t *testing.T, bin, pkg, requireVar string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found: apt-get install %s (or make test-deps)", bin, pkg)
	if os.Getenv(requireVar) == "1" {
		t.Fatalf("%s; %s=1 makes that a failure", msg, requireVar)
	}
	t.Skip(msg)
	return ""
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

const apiKey = "dashtest-key-0123456789abcdef"

// deployment is five local redis-server masters without persistence, as
// `redlockd dev` starts them, and the real redlockd binary serving them.
type deployment struct {
	masters []*redisproc.Server
	clock4  *clockshim.Clock // master 4's wall clock
	addr    string           // the daemon's host:port
	url     string
	client  *http.Client
	cfgPath string
	logPath string
	daemon  *exec.Cmd
	done    chan error // receives the daemon's exit
}

// startDeployment starts the masters and `redlockd serve` with dev's
// settings (max_ttl 600 s: a master restarted empty is quarantined for at
// most 10 minutes) and waits for /readyz. Everything stops when the test
// ends.
func startDeployment(t *testing.T) *deployment {
	t.Helper()
	// Master 4 runs with the gettimeofday shim, so that a test can make
	// its clock drift; until then it tells the real time.
	so, err := clockshim.Build("")
	if err != nil {
		t.Fatalf("building the clock shim (needs gcc, see make deps): %v", err)
	}
	clk, err := clockshim.NewClock(filepath.Join(t.TempDir(), "clock"))
	if err != nil {
		t.Fatal(err)
	}
	masters, err := redisproc.StartN(4, redisproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := redisproc.StopAll(masters); err != nil {
			t.Errorf("stopping masters: %v", err)
		}
	})
	shimmed, err := redisproc.Start(redisproc.Options{LDPreload: so, Env: clk.Env()})
	if err != nil {
		t.Fatal(err)
	}
	masters = append(masters, shimmed)
	t.Cleanup(func() {
		if err := shimmed.Stop(); err != nil {
			t.Errorf("stopping master 4: %v", err)
		}
	})
	d := &deployment{masters: masters, clock4: clk, addr: freeAddr(t), client: &http.Client{Timeout: 5 * time.Second}}
	d.url = "http://" + d.addr
	var cfg strings.Builder
	// The five masters as master_groups of one group: the same locks and
	// quorum as masters, plus the per-group views (/readyz's groups, the
	// redlock_group_* series) that the page and the Grafana dashboard show.
	fmt.Fprintf(&cfg, "listen: %q\nmaster_groups:\n  - name: default\n    masters:\n", d.addr)
	for _, m := range masters {
		fmt.Fprintf(&cfg, "      - %q\n", m.Addr())
	}
	fmt.Fprintf(&cfg, "api_keys:\n  - name: dash\n    key: %q\nmax_ttl: 600\nhealth_interval: 1s\nlog_format: json\n", apiKey)
	// Limits the workload never reaches, so that the accounts' series and
	// the page's accounts table have something to show.
	cfg.WriteString("account_defaults:\n  quota: {calls: 1000000000, per: 24h}\n  rate: 100000\n  max_locks: 100000\n")
	dir := t.TempDir()
	d.cfgPath = filepath.Join(dir, "redlockd.yaml")
	d.logPath = filepath.Join(dir, "redlockd.log")
	if err := os.WriteFile(d.cfgPath, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.stopDaemon(t)
		if t.Failed() {
			b, _ := os.ReadFile(d.logPath)
			t.Logf("redlockd log (last 4 KiB):\n%s", tail(b, 4096))
		}
	})
	d.startDaemon(t)
	return d
}

// startDaemon starts `redlockd serve` (again) and waits for /readyz.
func (d *deployment) startDaemon(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(redlockdBin, "serve", "--config", d.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.daemon, d.done = cmd, make(chan error, 1)
	go func(done chan<- error) { done <- cmd.Wait() }(d.done)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := d.client.Get(d.url + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redlockd on %s not ready after 30s: %v", d.addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopDaemon stops the daemon, if it runs, with SIGTERM (SIGKILL after 15 s).
func (d *deployment) stopDaemon(t *testing.T) {
	t.Helper()
	if d.daemon == nil {
		return
	}
	_ = d.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		t.Errorf("redlockd did not stop within 15s of SIGTERM; killing it")
		_ = d.daemon.Process.Kill()
		<-d.done
	}
	d.daemon = nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// lock sends one action API request and returns the envelope's data.
func (d *deployment) lock(ctx context.Context, body string) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/lock", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var env struct {
		Data map[string]any `json:"data"`
		Msg  string         `json:"msg"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(raw))
	}
	if resp.StatusCode != http.StatusOK {
		return env.Data, fmt.Errorf("HTTP %d: %s", resp.StatusCode, env.Msg)
	}
	return env.Data, nil
}

// workload runs a small, steady mix until ctx ends: about 25 acquire /
// release cycles a second over 20 keys, a status read and a refused
// acquire (the key is held) in every cycle. Its goroutine has ended when
// the returned function returns.
func (d *deployment) workload(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("dashtest:%d", i%20)
			data, err := d.lock(ctx, `{"action":"acquire","key":"`+key+`","ttl":5}`)
			if err == nil && data["acquired"] == true {
				_, _ = d.lock(ctx, `{"action":"acquire","key":"`+key+`","ttl":5}`)
				_, _ = d.lock(ctx, `{"action":"status","key":"`+key+`"}`)
				_, _ = d.lock(ctx, `{"action":"release","key":"`+key+`","token":"`+data["token"].(string)+`"}`)
			}
			select {
			case <-ctx.Done():
			case <-time.After(40 * time.Millisecond):
			}
		}
	})
	return wg.Wait
}

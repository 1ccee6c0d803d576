package main

import (
	"bytes"
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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for a child's stderr and a test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// count returns how many log lines contain msg.
func (s *syncBuffer) count(msg string) int { return strings.Count(s.String(), msg) }

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// binDaemon is a `redlockd serve` child process.
type binDaemon struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	url    string        // public listener
	exited chan struct{} // closed once the process was reaped
	err    error         // cmd.Wait's, once exited is closed
}

// stop sends SIGTERM and returns the exit error (nil for status 0).
func (d *binDaemon) stop(t *testing.T) error {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-d.exited:
		return d.err
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon did not exit 30s after SIGTERM: %s", d.logs)
		return nil
	}
}

// startBinary runs `redlockd serve` with args and env (added to the
// test's), waits until url+readyPath answers 200 with client, and kills
// the process at cleanup if the test did not stop it.
func startBinary(t *testing.T, url string, client *http.Client, env []string, args ...string) *binDaemon {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	logs := &syncBuffer{}
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	d := &binDaemon{cmd: cmd, logs: logs, url: url, exited: make(chan struct{})}
	exited := d.exited
	go func() { d.err = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		resp, err := client.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "daemon not ready: %s", logs)
	select {
	case <-exited:
		t.Fatalf("daemon exited: %s", logs)
	default:
	}
	return d
}

// reloadConfig is the YAML of TestReloadRotatesKeys: the test's masters
// and the given "name: key" accounts.
func reloadConfig(prefix string, accounts ...[2]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "key_prefix: %q\nper_master_timeout: 500ms\nhealth_interval: 50ms\nmasters:\n", prefix)
	for _, s := range servers {
		fmt.Fprintf(&b, "  - %q\n", s.Addr())
	}
	b.WriteString("api_keys:\n")
	for _, a := range accounts {
		fmt.Fprintf(&b, "  - name: %s\n    key: %q\n", a[0], a[1])
	}
	return b.String()
}

// TestReloadRotatesKeys runs the real binary and rotates its API keys with
// SIGHUP and with POST /admin/reload: a request in flight finishes, an old
// key is refused and a new one served from the moment the reload is
// logged, a bad file is refused with a logged error and the old keys stay,
// and no key ever reaches the log.
func TestReloadRotatesKeys(t *testing.T) {
	const (
		keyA2      = "tenant-a-key-rotated-0123456789"
		keyInitech = "initech-key-0123456789abcdef"
	)
	prefix := fmt.Sprintf("e2e%d:", prefixSeq.Add(1))
	path := filepath.Join(t.TempDir(), "redlockd.yaml")
	write := func(content string) { require.NoError(t, os.WriteFile(path, []byte(content), 0o600)) }
	write(reloadConfig(prefix, [2]string{"acme", keyA}, [2]string{"globex", keyB}))

	addr, adminAddr := freeAddr(t), freeAddr(t)
	base, admin := "http://"+addr, "http://"+adminAddr
	d := startBinary(t, base, httpClient, nil, "--config", path, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")
	lock := lockURL(base)

	// acme holds a lock; a waiter of acme's, with the old key, waits for it.
	st, env, _ := post(t, lock, keyA, `{"key":"rotate","ttl":30}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	token := env.Data["token"].(string)
	waiter := make(chan envelope, 1)
	go func() {
		env, err := tryPost(httpClient, lock, keyA, `{"key":"rotate","ttl":30,"wait_ms":20000}`)
		if err != nil {
			env.Msg = err.Error()
		}
		waiter <- env
	}()
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(raw), "\nredlockd_acquires_waiting 1\n")
	}, 10*time.Second, 10*time.Millisecond, "the waiter is waiting")

	// Rotate acme's key, remove globex, add initech; SIGHUP.
	write(reloadConfig(prefix, [2]string{"acme", keyA2}, [2]string{"initech", keyInitech}))
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return d.logs.count(`"msg":"reloaded"`) == 1 }, 10*time.Second, 10*time.Millisecond, "log: %s", d.logs)
	var line map[string]any
	for l := range strings.SplitSeq(d.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"reloaded"`) {
			require.NoError(t, json.Unmarshal([]byte(l), &line), l)
		}
	}
	assert.EqualValues(t, 2, line["accounts"])
	assert.Equal(t, []any{"initech"}, line["added"])
	assert.Equal(t, []any{"globex"}, line["removed"])
	assert.Equal(t, []any{"acme"}, line["keys_changed"])

	for _, k := range []string{keyA, keyB} {
		st, env, _ := post(t, lock, k, `{"action":"status","key":"rotate"}`)
		assert.Equal(t, http.StatusUnauthorized, st, "an old key, at once: %s", env.Msg)
	}
	st, env, _ = post(t, lock, keyInitech, `{"action":"status","key":"rotate"}`)
	assert.Equal(t, http.StatusOK, st, "a new account, at once: %s", env.Msg)
	assert.Equal(t, false, env.Data["held"], "initech's locks are its own")
	// acme's lock is acme's whatever its key: released with the new key,
	// it goes to the waiter that came in with the old one.
	st, env, _ = post(t, lock, keyA2, `{"action":"release","key":"rotate","token":"`+token+`"}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	assert.Equal(t, true, env.Data["released"])
	select {
	case env := <-waiter:
		assert.Equal(t, true, env.Data["acquired"], "the request in flight finished: %+v", env)
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter admitted with the old key did not finish")
	}

	// A bad file: refused, logged, the old keys stay.
	write(reloadConfig(prefix, [2]string{"acme", "xk9q2"}))
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return d.logs.count("reload refused") == 1 }, 10*time.Second, 10*time.Millisecond, "log: %s", d.logs)
	assert.Contains(t, d.logs.String(), "api_keys[0].key: too short (5 bytes, need ≥ 16)")
	st, _, _ = post(t, lock, keyA2, `{"action":"status","key":"rotate"}`)
	assert.Equal(t, http.StatusOK, st, "the keys from before the bad file still work")

	// POST /admin/reload does the same, and answers what changed.
	write(reloadConfig(prefix, [2]string{"acme", keyA2}, [2]string{"initech", keyInitech}, [2]string{"globex", keyB}))
	resp, err := httpClient.Post(admin+"/admin/reload", "", nil)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	assert.Contains(t, string(raw), `"added":["globex"]`)
	st, _, _ = post(t, lock, keyB, `{"action":"status","key":"rotate"}`)
	assert.Equal(t, http.StatusOK, st)
	resp, err = httpClient.Post(base+"/admin/reload", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "not on the public listener")

	require.NoError(t, d.stop(t), "exit 0: %s", d.logs)
	logs := d.logs.String()
	for _, k := range []string{keyA, keyB, keyA2, keyInitech, "xk9q2"} {
		assert.NotContains(t, logs, k, "a key in the log")
	}
}

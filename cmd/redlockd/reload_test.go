package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/redlockd/redlockd/config"
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

// lastLogLine is the last JSON log line whose msg is msg, decoded.
func lastLogLine(t *testing.T, logs, msg string) map[string]any {
	t.Helper()
	var line map[string]any
	for l := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(l, `"msg":"`+msg+`"`) {
			line = nil
			require.NoError(t, json.Unmarshal([]byte(l), &line), l)
		}
	}
	require.NotNil(t, line, "no %q line in %s", msg, logs)
	return line
}

// TestReloadRotatesAdminToken runs the real binary with an admin listener
// and rotates its admin token with SIGHUP and POST /admin/reload: in the
// file, then through admin_token_file (path and content). The old token
// gets 401 and the new one 200 from the reload on; a reload refused for
// another setting (a bad api_keys entry in the same edit) or because it
// removes the token leaves the old token in force, the latter with an
// error naming the field; no token, nor the start of its SHA-256, reaches
// the log.
func TestReloadRotatesAdminToken(t *testing.T) {
	const (
		tok1 = "admin-token-one-0123456789abcdef"
		tok2 = "admin-token-two-0123456789abcdef"
		tok3 = "admin-token-three-0123456789abcd" // refused with a bad API key
		tok4 = "admin-token-four-0123456789abcde" // from admin_token_file
		tok5 = "admin-token-five-0123456789abcde" // the file rewritten
	)
	prefix := fmt.Sprintf("e2e%d:", prefixSeq.Add(1))
	dir := t.TempDir()
	path, tokenFile := filepath.Join(dir, "redlockd.yaml"), filepath.Join(dir, "admin-token")
	accounts := [][2]string{{"acme", keyA}}
	write := func(tokenLine string, accounts ...[2]string) {
		t.Helper()
		require.NoError(t, os.WriteFile(path, []byte(reloadConfig(prefix, accounts...)+tokenLine), 0o600))
	}
	write(fmt.Sprintf("admin_token: %q\n", tok1), accounts...)

	addr, adminAddr := freeAddr(t), freeAddr(t)
	base, admin := "http://"+addr, "http://"+adminAddr
	d := startBinary(t, base, httpClient, nil, "--config", path, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")

	// do sends method to an admin path with the token (none when "") and
	// returns the status and body.
	do := func(method, p, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, admin+p, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}
	stats := func(token string) int {
		t.Helper()
		st, _ := do(http.MethodGet, "/v1/stats", token)
		return st
	}
	sighup := func(msg string, n int) {
		t.Helper()
		require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return d.logs.count(msg) == n }, 10*time.Second, 10*time.Millisecond, "log: %s", d.logs)
	}
	require.Equal(t, http.StatusOK, stats(tok1))
	require.Equal(t, http.StatusUnauthorized, stats(tok2))

	// Rotate in the file; SIGHUP.
	write(fmt.Sprintf("admin_token: %q\n", tok2), accounts...)
	sighup(`"msg":"reloaded"`, 1)
	line := lastLogLine(t, d.logs.String(), "reloaded")
	assert.Equal(t, true, line["admin_token_changed"])
	assert.NotContains(t, line, "changed_need_restart", "admin_token is reloadable")
	assert.Equal(t, http.StatusUnauthorized, stats(tok1), "the old token, at once")
	assert.Equal(t, http.StatusOK, stats(tok2), "the new token, at once")

	// A new token with a bad API key in the same edit: refused whole.
	write(fmt.Sprintf("admin_token: %q\n", tok3), [2]string{"acme", "xk9q2"})
	sighup("reload refused", 1)
	assert.Contains(t, d.logs.String(), "api_keys[0].key: too short (5 bytes, need ≥ 16)")
	assert.Equal(t, http.StatusOK, stats(tok2), "the token from before the refused reload")
	assert.Equal(t, http.StatusUnauthorized, stats(tok3))
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"status","key":"k"}`)
	assert.Equal(t, http.StatusOK, st, "the keys from before too: %s", env.Msg)

	// Removing the token: refused, naming the field; the listener stays
	// closed to requests without it.
	write("", accounts...)
	st, body := do(http.MethodPost, "/admin/reload", tok2)
	assert.Equal(t, http.StatusBadRequest, st, body)
	assert.Contains(t, body, "reload refused, nothing changed: admin_token: removed, but a reload does not remove the admin token")
	require.Eventually(t, func() bool { return d.logs.count("reload refused") == 2 }, 10*time.Second, 10*time.Millisecond, "logged too: %s", d.logs)
	assert.Equal(t, http.StatusUnauthorized, stats(""))
	assert.Equal(t, http.StatusOK, stats(tok2))

	// To admin_token_file, with POST /admin/reload (sent with the token in
	// force, answered after the swap).
	require.NoError(t, os.WriteFile(tokenFile, []byte(tok4+"\n"), 0o600))
	write(fmt.Sprintf("admin_token_file: %q\n", tokenFile), accounts...)
	st, body = do(http.MethodPost, "/admin/reload", tok2)
	require.Equal(t, http.StatusOK, st, body)
	assert.Contains(t, body, `"admin_token_changed":true`)
	assert.Equal(t, http.StatusUnauthorized, stats(tok2))
	assert.Equal(t, http.StatusOK, stats(tok4))

	// The file rewritten, the config untouched: read again on SIGHUP.
	require.NoError(t, os.WriteFile(tokenFile, []byte(tok5+"\n"), 0o600))
	sighup(`"msg":"reloaded"`, 3)
	assert.Equal(t, true, lastLogLine(t, d.logs.String(), "reloaded")["admin_token_changed"])
	assert.Equal(t, http.StatusUnauthorized, stats(tok4))
	assert.Equal(t, http.StatusOK, stats(tok5))

	// A reload that changes nothing says so.
	st, body = do(http.MethodPost, "/admin/reload", tok5)
	require.Equal(t, http.StatusOK, st, body)
	assert.Contains(t, body, `"admin_token_changed":false`)

	// Removing admin_token_file: refused, naming it.
	write("", accounts...)
	sighup("reload refused", 3)
	assert.Contains(t, d.logs.String(), "admin_token_file: removed, but a reload does not remove the admin token")
	assert.Equal(t, http.StatusOK, stats(tok5))

	require.NoError(t, d.stop(t), "exit 0: %s", d.logs)
	logs := d.logs.String()
	for _, tok := range []string{tok1, tok2, tok3, tok4, tok5} {
		assert.NotContains(t, logs, tok, "a token in the log")
		sum := sha256.Sum256([]byte(tok))
		assert.NotContains(t, logs, hex.EncodeToString(sum[:4]), "a token's hash prefix in the log")
	}
}

// adminTokenChange applies a new or first token on a daemon with an admin
// listener, refuses a removal naming the field the token came from, and
// leaves a token for a daemon without an admin listener to the restart
// that opens one.
func TestAdminTokenChange(t *testing.T) {
	const tok, tok2 = "admin-token-one-0123456789abcdef", "admin-token-two-0123456789abcdef"
	withAdmin := func(token, file string) config.Config {
		return config.Config{AdminListen: "127.0.0.1:7071", AdminToken: token, AdminTokenFile: file}
	}
	for _, c := range []struct {
		name                string
		cur, next           config.Config
		apply, needsRestart bool
		err                 string
	}{
		{name: "unchanged", cur: withAdmin(tok, ""), next: withAdmin(tok, "")},
		{name: "none, unchanged", cur: withAdmin("", ""), next: withAdmin("", "")},
		{name: "rotated", cur: withAdmin(tok, ""), next: withAdmin(tok2, ""), apply: true},
		{name: "file rewritten", cur: withAdmin(tok, "/a"), next: withAdmin(tok2, "/a"), apply: true},
		{name: "file moved, same token", cur: withAdmin(tok, "/a"), next: withAdmin(tok, "/b")},
		{name: "first token", cur: withAdmin("", ""), next: withAdmin(tok, ""), apply: true},
		{name: "removed", cur: withAdmin(tok, ""), next: withAdmin("", ""), err: "admin_token: removed, but a reload does not remove the admin token"},
		{name: "file removed", cur: withAdmin(tok, "/a"), next: withAdmin("", ""), err: "admin_token_file: removed"},
		{name: "no admin listener yet", cur: config.Config{}, next: withAdmin(tok, ""), needsRestart: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			apply, needsRestart, err := adminTokenChange(c.cur, c.next)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				assert.NotContains(t, err.Error(), tok)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.apply, apply, "apply")
			assert.Equal(t, c.needsRestart, needsRestart, "needs restart")
		})
	}
}

// TestReloadKeepsQuotaCount runs the real binary: an account spends its
// quota, then POST /admin/reload raises it by one (one more call, not a
// fresh allowance), lowers it (nothing more), and changes another limit
// (nothing more); the calls admitted never pass the quota in force.
func TestReloadKeepsQuotaCount(t *testing.T) {
	// One window for the whole test.
	if left := time.Hour - time.Duration(time.Now().UnixNano())%time.Hour; left < 30*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
	prefix := fmt.Sprintf("e2e%d:", prefixSeq.Add(1))
	path := filepath.Join(t.TempDir(), "redlockd.yaml")
	write := func(defaults string) {
		require.NoError(t, os.WriteFile(path, []byte(reloadConfig(prefix, [2]string{"acme", keyA})+"account_defaults:\n"+defaults), 0o600))
	}
	write("  quota: {calls: 5, per: 1h}\n")
	addr, adminAddr := freeAddr(t), freeAddr(t)
	base, admin := "http://"+addr, "http://"+adminAddr
	d := startBinary(t, base, httpClient, nil, "--config", path, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")
	admitted := 0
	spend := func(want int) {
		t.Helper()
		for range 20 {
			st, env, _ := post(t, lockURL(base), keyA, `{"action":"status","key":"q"}`)
			if st == http.StatusTooManyRequests {
				require.Equal(t, "quota_exhausted", env.Code, env.Msg)
				break
			}
			require.Equal(t, http.StatusOK, st, env.Msg)
			admitted++
		}
		require.Equal(t, want, admitted, "calls admitted in the window")
	}
	reload := func(defaults string) {
		t.Helper()
		write(defaults)
		resp, err := httpClient.Post(admin+"/admin/reload", "", nil)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	}
	spend(5)
	reload("  quota: {calls: 6, per: 1h}\n")
	spend(6)
	reload("  quota: {calls: 3, per: 1h}\n")
	spend(6)
	reload("  quota: {calls: 7, per: 1h}\n  max_locks: 50\n  rate: 100\n")
	spend(7)
	require.NoError(t, d.stop(t), "%s", d.logs)
}

// TestReloadAccountLockDelay runs the real binary: account_defaults
// lock_delay, put in force by POST /admin/reload, holds a key that
// expired without a release for the delay when the acquire sent no
// lock_delay_ms; before the reload it did not; a reload with a delay
// above the limit is refused naming the field, and the delay in force
// stays.
func TestReloadAccountLockDelay(t *testing.T) {
	prefix := fmt.Sprintf("e2e%d:", prefixSeq.Add(1))
	path := filepath.Join(t.TempDir(), "redlockd.yaml")
	write := func(defaults string) {
		require.NoError(t, os.WriteFile(path, []byte(reloadConfig(prefix, [2]string{"acme", keyA})+"account_defaults:\n"+defaults), 0o600))
	}
	write("  max_locks: 100\n")
	addr, adminAddr := freeAddr(t), freeAddr(t)
	base, admin := "http://"+addr, "http://"+adminAddr
	d := startBinary(t, base, httpClient, nil, "--config", path, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")
	reload := func(defaults string) (int, string) {
		t.Helper()
		write(defaults)
		resp, err := httpClient.Post(admin+"/admin/reload", "", nil)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(raw)
	}
	// expireThenRetry takes key for 1s, lets it expire without a release,
	// and asks again: the second answer's data.
	expireThenRetry := func(key string) envelope {
		t.Helper()
		st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","key":"`+key+`","ttl":1}`)
		require.Equal(t, http.StatusOK, st, env.Msg)
		require.Equal(t, true, env.Data["acquired"], env.Msg)
		time.Sleep(1200 * time.Millisecond)
		st, env, _ = post(t, lockURL(base), keyA, `{"action":"acquire","key":"`+key+`","ttl":1}`)
		require.Equal(t, http.StatusOK, st, env.Msg)
		return env
	}
	assert.Equal(t, true, expireThenRetry("before").Data["acquired"], "no default delay yet")

	st, raw := reload("  max_locks: 100\n  lock_delay: 3s\n")
	require.Equal(t, http.StatusOK, st, raw)
	env := expireThenRetry("after")
	assert.Equal(t, false, env.Data["acquired"], "the reloaded default delay holds the key")
	assert.Contains(t, env.Msg, "lock-delay")
	assert.Positive(t, env.Data["retry_after"])

	st, raw = reload("  max_locks: 100\n  lock_delay: 61s\n")
	assert.NotEqual(t, http.StatusOK, st)
	assert.Contains(t, raw, "account_defaults.lock_delay: 1m1s is above the limit of 1m0s")
	assert.Equal(t, false, expireThenRetry("kept").Data["acquired"], "the delay in force stays after a refused reload")
	require.NoError(t, d.stop(t), "%s", d.logs)
}

// TestReloadJudgesAccountsWithTheSettingsInForce: a reload whose file also
// raises max_ttl (which takes effect only at a restart) is judged with the
// max_ttl in force. It used to be judged with the file's: an account
// lock_delay of 60 s passed beside max_ttl 61 and was applied under 60, and
// every acquire of that account that kept the default was refused ("ttl:
// 1 s + the account's default lock-delay of 60000 ms is above max_ttl").
func TestReloadJudgesAccountsWithTheSettingsInForce(t *testing.T) {
	prefix := fmt.Sprintf("e2e%d:", prefixSeq.Add(1))
	path := filepath.Join(t.TempDir(), "redlockd.yaml")
	write := func(maxTTL int, acmeExtra string) {
		// default_ttl 1: a delay up to max_ttl − 1s fits an acquire that
		// sends no ttl.
		cfg := strings.Replace(reloadConfig(prefix, [2]string{"acme", keyA}), "api_keys:\n", fmt.Sprintf("max_ttl: %d\ndefault_ttl: 1\napi_keys:\n", maxTTL), 1)
		require.NoError(t, os.WriteFile(path, []byte(cfg+acmeExtra), 0o600))
	}
	write(60, "")
	addr, adminAddr := freeAddr(t), freeAddr(t)
	base, admin := "http://"+addr, "http://"+adminAddr
	d := startBinary(t, base, httpClient, nil, "--config", path, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")
	reload := func() (int, string) {
		t.Helper()
		resp, err := httpClient.Post(admin+"/admin/reload", "", nil)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(raw)
	}

	write(61, "    lock_delay: 60s\n")
	st, raw := reload()
	require.Equal(t, http.StatusBadRequest, st, raw)
	assert.Contains(t, raw, "api_keys[0].lock_delay: 1m0s is above max_ttl (60 s) − 1s")
	assert.Contains(t, raw, "a change of max_ttl takes effect only at a restart")
	st, env, _ := post(t, lockURL(base), keyA, `{"key":"in-force","ttl":1}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	assert.Equal(t, true, env.Data["acquired"], "the refused reload left acme without a delay: %s", env.Msg)

	// The same file with a delay that fits the max_ttl in force reloads,
	// and names max_ttl as waiting for a restart.
	write(61, "    lock_delay: 59s\n")
	st, raw = reload()
	require.Equal(t, http.StatusOK, st, raw)
	assert.Contains(t, raw, "max_ttl")
	st, env, _ = post(t, lockURL(base), keyA, `{"key":"fits","ttl":1}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	assert.Equal(t, true, env.Data["acquired"], env.Msg)
	require.NoError(t, d.stop(t), "%s", d.logs)
}

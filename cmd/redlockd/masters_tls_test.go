package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/certgen"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// readmeACLLine is the documented least-privilege ACL line, as written
// (docs/operations.md, "TLS"; the README and docs/ are searched, and the
// line must be there exactly once).
func readmeACLLine(t *testing.T) string {
	t.Helper()
	var found []string
	for name, doc := range docFiles(t) {
		for l := range strings.SplitSeq(doc, "\n") {
			if strings.HasPrefix(l, "user redlockd on ") {
				found = append(found, name+": "+l)
			}
		}
	}
	require.Len(t, found, 1, "the README and docs/ have one ACL line starting with \"user redlockd on \"")
	_, line, _ := strings.Cut(found[0], ": ")
	return line
}

// aclMasters are TLS-only masters (client certificates required) whose
// default user has adminPassword and that have the documented ACL user with
// password.
type aclMasters struct {
	servers  []*redisproc.Server
	ca       *certgen.CA
	admin    *tls.Config // the test's own TLS client config
	password string
}

const aclAdminPassword = "acl-test-admin-password"

func startACLMasters(t *testing.T, dir string, n int, password string) *aclMasters {
	t.Helper()
	line := readmeACLLine(t)
	const placeholder = ">CHANGE-ME-master-password"
	require.Contains(t, line, placeholder)
	line = strings.Replace(line, placeholder, ">"+password, 1)
	fields := strings.Fields(line)
	require.Equal(t, "user", fields[0])

	ca, err := certgen.NewCA(dir, "redis-ca")
	require.NoError(t, err)
	srv, err := ca.Issue("redis", "127.0.0.1")
	require.NoError(t, err)
	servers, err := redisproc.StartN(n, redisproc.Options{
		TLS:       &redisproc.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CertFile},
		Password:  aclAdminPassword,
		ExtraArgs: append([]string{"--user"}, fields[1:]...),
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, redisproc.StopAll(servers)) })
	admin, err := ca.ClientConfig(srv)
	require.NoError(t, err)
	return &aclMasters{servers: servers, ca: ca, admin: admin, password: password}
}

// adminClient is a client of master i as its default (all-powerful) user.
func (m *aclMasters) adminClient(i int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: m.servers[i].Addr(), Password: aclAdminPassword, TLSConfig: m.admin.Clone(), MaxRetries: -1})
}

// aclLog returns, per master, the commands its ACL refused (ACL LOG's
// "object" of each entry whose reason is "command"), and the keys and
// channels refused as "key:…" and "channel:…".
func (m *aclMasters) aclLog(t *testing.T) [][]string {
	t.Helper()
	out := make([][]string, len(m.servers))
	for i := range m.servers {
		r := m.adminClient(i)
		entries, err := r.ACLLog(context.Background(), 128).Result()
		r.Close()
		require.NoError(t, err)
		for _, e := range entries {
			what := e.Object
			if e.Reason != "command" {
				what = e.Reason + ":" + e.Object
			}
			out[i] = append(out[i], what)
		}
	}
	return out
}

// masterConfig is a config file for the masters m, TLS on both sides.
func (m *aclMasters) config(t *testing.T, dir string, edit func(*strings.Builder)) string {
	t.Helper()
	pwFile := filepath.Join(dir, "master-password")
	require.NoError(t, os.WriteFile(pwFile, []byte(m.password+"\n"), 0o600))
	client, err := m.ca.Issue("redlockd-client")
	require.NoError(t, err)
	var b strings.Builder
	b.WriteString("per_master_timeout: 500ms\nhealth_interval: 50ms\nmax_ttl: 60\nmasters:\n")
	for _, s := range m.servers {
		fmt.Fprintf(&b, "  - %q\n", s.Addr())
	}
	// Limits on: their scripts run as the ACL user too.
	fmt.Fprintf(&b, "api_keys:\n  - name: acme\n    key: %q\n    quota: {calls: 100000, per: 1h}\n    rate: 1000\n    max_locks: 100\n", keyA)
	fmt.Fprintf(&b, "master_username: redlockd\nmaster_password_file: %s\nmaster_tls: true\nmaster_tls_ca_file: %s\nmaster_tls_cert_file: %s\nmaster_tls_key_file: %s\n",
		pwFile, m.ca.CertFile, client.CertFile, client.KeyFile)
	if edit != nil {
		edit(&b)
	}
	path := filepath.Join(dir, "redlockd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// TestMastersTLSWithREADMEACLUser runs the real binary with TLS on both
// sides: HTTPS with client certificates to the daemon, and TLS-only masters
// (client certificates required) reached as the documented least-privilege
// ACL user, password from a file. Every action with the account's limits
// on, a waiter woken by a release (pub/sub), the admin listing of locks
// and repair-fences work, and the masters' ACL LOG
// shows no refused command but CONFIG GET (left out of the line on
// purpose), asked once per master.
func TestMastersTLSWithREADMEACLUser(t *testing.T) {
	dir := t.TempDir()
	m := startACLMasters(t, dir, 3, "redlockd-master-password-0123")
	httpCA, err := certgen.NewCA(dir, "http-ca")
	require.NoError(t, err)
	httpServer, err := httpCA.Issue("http-server", "127.0.0.1")
	require.NoError(t, err)
	httpClientCert, err := httpCA.Issue("http-client")
	require.NoError(t, err)
	cfgFile := m.config(t, dir, func(b *strings.Builder) {
		fmt.Fprintf(b, "tls_cert_file: %s\ntls_key_file: %s\ntls_client_ca_file: %s\n", httpServer.CertFile, httpServer.KeyFile, httpCA.CertFile)
	})
	addr, adminAddr := freeAddr(t), freeAddr(t)
	base := "https://" + addr
	c := httpsClient(t, httpCA, httpClientCert)
	d := startBinary(t, base, c, nil, "--config", cfgFile, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")
	lock := lockURL(base)

	st, env, _ := postWith(t, c, lock, keyA, `{"key":"acl:job","ttl":30}`)
	require.Equal(t, http.StatusOK, st, "%s\n%s", env.Msg, d.logs)
	require.Equal(t, true, env.Data["acquired"], env.Msg)
	token := env.Data["token"].(string)
	st, env, _ = postWith(t, c, lock, keyA, `{"action":"status","key":"acl:job"}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	assert.Equal(t, true, env.Data["held"])
	st, env, _ = postWith(t, c, lock, keyA, `{"action":"extend","key":"acl:job","ttl":40,"token":"`+token+`"}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	assert.Equal(t, true, env.Data["extended"])
	st, env, _ = postWith(t, c, lock, keyA, `{"key":"acl:job","ttl":30}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	assert.Equal(t, false, env.Data["acquired"])
	// While the lock is held, the limits' sync writes the account's
	// counters and held-locks set on every master.
	require.Eventually(t, func() bool {
		for i := range m.servers {
			r := m.adminClient(i)
			n, err := r.Keys(context.Background(), "redlock:*").Result()
			r.Close()
			if err != nil {
				return false
			}
			kinds := map[string]bool{}
			for _, k := range n {
				kind, _, _ := strings.Cut(strings.TrimPrefix(k, "redlock:"), ":")
				kinds[kind] = true
			}
			if !kinds["held"] || !kinds["quota"] || !kinds["rate"] {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "the limits' keys on every master")
	assert.Positive(t, metricOf(t, c, "https://"+adminAddr+"/metrics", `redlockd_tls_certificate_expiry_timestamp_seconds{certificate="masters_client"}`))

	// The operators' listing of the account's locks.
	resp, err := c.Get("https://" + adminAddr + "/admin/locks?account=acme")
	require.NoError(t, err)
	listing, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", listing)
	assert.Contains(t, string(listing), `"acl:job"`)

	// A waiter, woken by the release through pub/sub on the masters.
	waiter := make(chan envelope, 1)
	go func() {
		env, err := tryPost(c, lock, keyA, `{"key":"acl:job","ttl":30,"wait_ms":20000}`)
		if err != nil {
			env.Msg = err.Error()
		}
		waiter <- env
	}()
	require.Eventually(t, func() bool {
		resp, err := c.Get("https://" + adminAddr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(raw), "\nredlockd_acquires_waiting 1\n")
	}, 10*time.Second, 10*time.Millisecond, "the waiter is waiting")
	st, env, _ = postWith(t, c, lock, keyA, `{"action":"release","key":"acl:job","token":"`+token+`"}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	assert.Equal(t, true, env.Data["released"])
	select {
	case env := <-waiter:
		assert.Equal(t, true, env.Data["acquired"], "%+v", env)
		st, env, _ = postWith(t, c, lock, keyA, `{"action":"release","key":"acl:job","token":"`+env.Data["token"].(string)+`"}`)
		require.Equal(t, http.StatusOK, st, env.Msg)
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter was not served")
	}
	require.NoError(t, d.stop(t), "%s", d.logs)
	assert.Contains(t, d.logs.String(), "CONFIG GET not allowed for this user")
	assert.NotContains(t, d.logs.String(), m.password)

	// repair-fences, as the same user, with the same file.
	var out, errOut strings.Builder
	require.NoError(t, run(context.Background(), []string{"repair-fences", "--config", cfgFile}, &out, &errOut), "%s%s", &out, &errOut)
	assert.Contains(t, out.String(), "repaired:")

	for i, refused := range m.aclLog(t) {
		for _, what := range refused {
			assert.Equal(t, "config|get", what, "master %d's ACL refused something other than CONFIG GET", i)
		}
	}
	// The user really is limited: another key prefix is refused.
	r := redis.NewClient(&redis.Options{Addr: m.servers[0].Addr(), Username: "redlockd", Password: m.password, TLSConfig: m.admin.Clone(), MaxRetries: -1})
	defer r.Close()
	err = r.Set(context.Background(), "other:key", "x", 0).Err()
	assert.ErrorContains(t, err, "NOPERM")
	assert.ErrorContains(t, r.FlushAll(context.Background()).Err(), "NOPERM")
}

// TestMastersRefuseCredentialsAtStartup: a wrong password, a master
// certificate from another CA, no client certificate, and plain TCP to a
// TLS-only master each stop `redlockd serve` and `repair-fences` at
// startup with an error naming the master and the settings to check — no
// hang, no daemon serving 503s.
func TestMastersRefuseCredentialsAtStartup(t *testing.T) {
	dir := t.TempDir()
	m := startACLMasters(t, dir, 3, "redlockd-master-password-0123")
	other, err := certgen.NewCA(t.TempDir(), "other-ca")
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		edit func(cfg string) string
		want string
	}{
		{"wrong password", func(cfg string) string {
			pw := filepath.Join(t.TempDir(), "pw")
			require.NoError(t, os.WriteFile(pw, []byte("not-the-password\n"), 0o600))
			return replaceLine(cfg, "master_password_file:", "master_password_file: "+pw)
		}, "refused the credentials (WRONGPASS invalid username-password pair or user is disabled.): check master_username and master_password"},
		{"wrong user", func(cfg string) string {
			return replaceLine(cfg, "master_username:", "master_username: nobody")
		}, "refused the credentials (WRONGPASS"},
		{"CA of another authority", func(cfg string) string {
			return replaceLine(cfg, "master_tls_ca_file:", "master_tls_ca_file: "+other.CertFile)
		}, "its TLS certificate was not accepted (tls: failed to verify certificate: x509: certificate signed by unknown authority): check master_tls_ca_file and master_tls_server_name"},
		{"wrong server name", func(cfg string) string {
			return cfg + "master_tls_server_name: redis.example\n"
		}, "x509: certificate is not valid for any names, but wanted to match redis.example): check master_tls_ca_file and master_tls_server_name"},
		{"no client certificate", func(cfg string) string {
			return replaceLine(replaceLine(cfg, "master_tls_cert_file:", ""), "master_tls_key_file:", "")
		}, "it refused the TLS handshake (remote error: tls: certificate required): if it requires a client certificate (tls-auth-clients), set master_tls_cert_file and master_tls_key_file"},
		{"client certificate of another CA", func(cfg string) string {
			pair, err := other.Issue("stranger")
			require.NoError(t, err)
			return replaceLine(replaceLine(cfg, "master_tls_cert_file:", "master_tls_cert_file: "+pair.CertFile), "master_tls_key_file:", "master_tls_key_file: "+pair.KeyFile)
		}, "it refused the client certificate of master_tls_cert_file: check that it is signed by a CA the master trusts"},
		{"plain TCP to a TLS-only master", func(cfg string) string {
			for _, f := range []string{"master_tls:", "master_tls_ca_file:", "master_tls_cert_file:", "master_tls_key_file:"} {
				cfg = replaceLine(cfg, f, "")
			}
			return cfg
		}, "if it serves TLS only, set master_tls: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good, err := os.ReadFile(m.config(t, t.TempDir(), nil))
			require.NoError(t, err)
			path := filepath.Join(t.TempDir(), "redlockd.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tc.edit(string(good))), 0o600))
			for cmd, out := range refusedAtStartup(t, path) {
				assert.Contains(t, out, "masters[0] ("+m.servers[0].Addr()+"): ", cmd)
				assert.Contains(t, out, tc.want, cmd)
				assert.NotContains(t, out, m.password)
				assert.NotContains(t, out, "not-the-password")
			}
		})
	}
}

// refusedAtStartup runs `redlockd serve` and `redlockd repair-fences
// --dry-run` with the config file at path, requires each to exit 1 within
// 30 s, and returns each one's output by command name.
func refusedAtStartup(t *testing.T, path string) map[string]string {
	t.Helper()
	outs := map[string]string{}
	for _, args := range [][]string{
		{"serve", "--config", path, "--listen", "127.0.0.1:0"},
		{"repair-fences", "--config", path, "--dry-run"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
		require.NoError(t, ctx.Err(), "%s did not stop at once: %s", args[0], out)
		cancel()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%s: exits with an error: %v\n%s", args[0], err, out)
		assert.Equal(t, 1, ee.ExitCode(), "%s", out)
		outs[args[0]] = string(out)
	}
	return outs
}

// replaceLine replaces the line of s that starts with prefix by with (a
// line of its own, or nothing when with is empty).
func replaceLine(s, prefix, with string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			if with == "" {
				continue
			}
			l = with
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// TestACLAllowsEveryScriptCommand: every command a script of this
// repository calls (redis.call / redis.pcall in any .lua file the product
// embeds) is allowed by the documented least-privilege ACL user and by
// `redlockd dev --tls`'s. A script that starts using a command the ACL
// does not list fails every vote on such a master (it happened with MGET);
// this catches it before a master does.
func TestACLAllowsEveryScriptCommand(t *testing.T) {
	used := scriptCommands(t)
	require.Contains(t, used, "mget", "the scan found the scripts' commands")
	for name, rules := range map[string]string{"the documented ACL line": readmeACLLine(t), "devACLRules": devACLRules} {
		allowed := map[string]bool{}
		for _, f := range strings.Fields(rules) {
			if c, ok := strings.CutPrefix(f, "+"); ok {
				allowed[strings.ToLower(c)] = true
			}
		}
		for cmd, files := range used {
			assert.True(t, allowed[cmd], "%s does not allow %s, which %v call", name, cmd, slices.Compact(slices.Sorted(slices.Values(files))))
		}
	}
}

// scriptCommands is every command a script of this repository calls
// (redis.call / redis.pcall in any .lua file the product embeds), lower
// case, with the files that call it.
func scriptCommands(t *testing.T) map[string][]string {
	t.Helper()
	call := regexp.MustCompile(`redis\.p?call\('([A-Za-z]+)'`)
	used := map[string][]string{}
	for _, dir := range []string{"../../redlock/scripts", "../../redlock/idempotency/scripts", "../../daemon/limits/scripts", "../../daemon/scripts"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, m := range call.FindAllStringSubmatch(string(src), -1) {
				cmd := strings.ToLower(m[1])
				used[cmd] = append(used[cmd], filepath.Base(f))
			}
		}
	}
	return used
}

// TestTLSToPlainMastersRefusedAtStartup: master_tls against masters that
// serve plain Redis. Their TLS handshake gets no answer at all (the
// ClientHello reads as an inline command that never ends), as with a
// master that is down; serve and repair-fences ask each such master a
// plain PING and stop at startup naming it and the setting, instead of
// serving 503s that say "context deadline exceeded".
func TestTLSToPlainMastersRefusedAtStartup(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(dir, "redis-ca")
	require.NoError(t, err)
	path := filepath.Join(dir, "redlockd.yaml")
	cfg := reloadConfig(fmt.Sprintf("e2e%d:", prefixSeq.Add(1)), [2]string{"acme", keyA}) +
		fmt.Sprintf("master_tls: true\nmaster_tls_ca_file: %s\n", ca.CertFile)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	for cmd, out := range refusedAtStartup(t, path) {
		for i, s := range servers {
			assert.Contains(t, out, fmt.Sprintf("masters[%d] (%s): it answers plain Redis, not TLS", i, s.Addr()), cmd)
		}
		assert.Contains(t, out, "set master_tls: false", cmd)
	}
}

// TestMasterClientCertificateOutOfValidityRefused: a client certificate
// for the masters that has expired is refused at startup, naming the file
// and the date, and by a reload, which keeps the certificate in use. A
// reload used to take it (200), and every master refused the daemon at its
// next connection: 503 for every lock (a break-it pass).
func TestMasterClientCertificateOutOfValidityRefused(t *testing.T) {
	dir := t.TempDir()
	m := startACLMasters(t, dir, 3, "redlockd-master-password-0123")
	cfgFile := m.config(t, dir, nil)
	expiredAt := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	expire := func() {
		t.Helper()
		_, err := m.ca.IssueValid("redlockd-client", expiredAt.Add(-24*time.Hour), expiredAt)
		require.NoError(t, err)
	}

	// Reload: the daemon keeps the valid certificate.
	addr, adminAddr := freeAddr(t), freeAddr(t)
	base := "http://" + addr
	d := startBinary(t, base, httpClient, nil, "--config", cfgFile, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")
	expire()
	resp, err := httpClient.Post("http://"+adminAddr+"/admin/reload", "", nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), "redlockd-client.crt: expired at "+expiredAt.Format(time.RFC3339))
	// New connections still present the valid certificate.
	for i := range m.servers {
		r := m.adminClient(i)
		require.NoError(t, r.Do(context.Background(), "CLIENT", "KILL", "USER", "redlockd").Err())
		r.Close()
	}
	require.Eventually(t, func() bool {
		st, _, _ := post(t, lockURL(base), keyA, `{"key":"tls:expired-reload","ttl":10}`)
		return st == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "the masters take the new connections: %s", d.logs)
	require.NoError(t, d.stop(t), "%s", d.logs)

	// Startup: refused, naming the file and the date.
	for cmd, out := range refusedAtStartup(t, cfgFile) {
		assert.Contains(t, out, "redlockd-client.crt: expired at "+expiredAt.Format(time.RFC3339), cmd)
	}
}

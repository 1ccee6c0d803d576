package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/certgen"
)

// httpsClient trusts ca and presents cert (when not empty), on a
// keep-alive transport of its own.
func httpsClient(t *testing.T, ca *certgen.CA, cert certgen.Pair) *http.Client {
	t.Helper()
	cfg, err := ca.ClientConfig(cert)
	require.NoError(t, err)
	tr := &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// metricOf returns the value of the series (name{labels}) in url's
// Prometheus text, or fails the test.
func metricOf(t *testing.T, c *http.Client, url, series string) float64 {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for l := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, l)
			return f
		}
	}
	t.Fatalf("no series %s in %s", series, url)
	return 0
}

// serverNotAfter is the NotAfter of the certificate url's server presents.
func serverNotAfter(t *testing.T, c *http.Client, url string) float64 {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body) // so that the connection is reused
	resp.Body.Close()
	return float64(resp.TLS.PeerCertificates[0].NotAfter.Unix())
}

// serverSerial GETs url and returns the serial of the server's certificate.
func serverSerial(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	return resp.TLS.PeerCertificates[0].SerialNumber.String()
}

// TestServeHTTPSWithClientCertificates runs the real binary with HTTPS and
// mutual TLS on both listeners: a client without a certificate is refused,
// `redlockd lock` works with --tls-ca/--tls-cert/--tls-key, and SIGHUP
// swaps the certificate without dropping the open keep-alive connection;
// a broken certificate file is refused and the old certificate stays.
func TestServeHTTPSWithClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(dir, "ca")
	require.NoError(t, err)
	server, err := ca.Issue("server", "127.0.0.1")
	require.NoError(t, err)
	client, err := ca.Issue("client")
	require.NoError(t, err)

	cfgFile := filepath.Join(dir, "redlockd.yaml")
	yaml := reloadConfig(fmt.Sprintf("e2e%d:", prefixSeq.Add(1)), [2]string{"acme", keyA}) +
		fmt.Sprintf("tls_cert_file: %s\ntls_key_file: %s\ntls_client_ca_file: %s\n", server.CertFile, server.KeyFile, ca.CertFile)
	require.NoError(t, os.WriteFile(cfgFile, []byte(yaml), 0o600))
	addr, adminAddr := freeAddr(t), freeAddr(t)
	base, admin := "https://"+addr, "https://"+adminAddr
	good := httpsClient(t, ca, client)
	d := startBinary(t, base, good, nil, "--config", cfgFile, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")

	serial1 := serverSerial(t, good, base+"/readyz")
	const expiry = `redlockd_tls_certificate_expiry_timestamp_seconds{certificate="listener"}`
	assert.Equal(t, serverNotAfter(t, good, base+"/readyz"), metricOf(t, good, admin+"/metrics", expiry))
	assert.Equal(t, serial1, serverSerial(t, good, admin+"/metrics"), "the admin listener serves the same certificate")
	_, err = httpsClient(t, ca, certgen.Pair{}).Get(base + "/readyz")
	assert.Error(t, err, "no client certificate")

	// The lock CLI over HTTPS with a client certificate.
	lockCLI := func(args ...string) (string, int) {
		cmd := exec.Command(binary, append([]string{"lock", "acquire", "--key", "tls:cli", "--ttl", "5s"}, args...)...)
		cmd.Env = append(os.Environ(), "REDLOCKD_API_KEY="+keyA)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}
	out, code := lockCLI("--url", base, "--tls-ca", ca.CertFile, "--tls-cert", client.CertFile, "--tls-key", client.KeyFile)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, `"acquired":true`)
	out, code = lockCLI("--url", base, "--tls-ca", ca.CertFile)
	assert.Equal(t, exitUnavailable, code, "no client certificate: the handshake fails: %s", out)
	// A client certificate of another CA is sent all the same, so the
	// daemon's refusal names the problem (before: "certificate required").
	other, err := certgen.NewCA(t.TempDir(), "other-ca")
	require.NoError(t, err)
	stranger, err := other.Issue("client")
	require.NoError(t, err)
	out, code = lockCLI("--url", base, "--tls-ca", ca.CertFile, "--tls-cert", stranger.CertFile, "--tls-key", stranger.KeyFile)
	assert.Equal(t, exitUnavailable, code, out)
	assert.Contains(t, out, "unknown certificate authority")
	assert.NotContains(t, out, "certificate required")
	out, code = lockCLI("--url", "HTTPS://"+addr, "--tls-ca", ca.CertFile, "--tls-cert", client.CertFile, "--tls-key", client.KeyFile)
	// It reaches the daemon over TLS: the key is held (by the first
	// acquire above), so 75, not a usage error (64) or no answer (69).
	assert.Equal(t, exitBusy, code, "a scheme is case-insensitive: %s", out)
	assert.Contains(t, out, `"acquired":false`)
	out, code = lockCLI("--url", "http://"+addr, "--tls-ca", ca.CertFile)
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, out, "the URL must start with https://")
	out, code = lockCLI("--url", base, "--tls-ca", ca.CertFile, "--tls-cert", client.CertFile)
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, out, "give both or neither")

	// A new certificate in the same files, then SIGHUP.
	_, err = ca.Issue("server", "127.0.0.1")
	require.NoError(t, err)
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return d.logs.count(`"msg":"reloaded"`) == 1 }, 10*time.Second, 10*time.Millisecond, "%s", d.logs)
	assert.Equal(t, serial1, serverSerial(t, good, base+"/readyz"), "the open connection was kept")
	serial2 := serverSerial(t, httpsClient(t, ca, client), base+"/readyz")
	assert.NotEqual(t, serial1, serial2, "a new connection gets the new certificate")
	assert.Equal(t, serverNotAfter(t, httpsClient(t, ca, client), base+"/readyz"), metricOf(t, good, admin+"/metrics", expiry), "the new certificate's end")
	assert.EqualValues(t, 1, metricOf(t, good, admin+"/metrics", `redlockd_config_reloads_total{result="ok"}`))

	// A broken certificate file: refused, the certificate in use stays.
	require.NoError(t, os.WriteFile(server.CertFile, []byte("-----BEGIN CERTIFICATE-----\nnope\n"), 0o600))
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return d.logs.count("reload refused") == 1 }, 10*time.Second, 10*time.Millisecond, "%s", d.logs)
	assert.Equal(t, serial2, serverSerial(t, httpsClient(t, ca, client), base+"/readyz"))
	assert.EqualValues(t, 1, metricOf(t, good, admin+"/metrics", `redlockd_config_reloads_total{result="refused"}`))
	st, env, _ := postWith(t, good, lockURL(base), keyA, `{"action":"status","key":"tls:cli"}`)
	assert.Equal(t, http.StatusOK, st, env.Msg)

	require.NoError(t, d.stop(t), "%s", d.logs)
	key, err := os.ReadFile(server.KeyFile)
	require.NoError(t, err)
	assert.NotContains(t, d.logs.String(), strings.TrimSpace(string(key))[30:70], "the key's content in the log")
}

// The real binary refuses a listener certificate that has expired or is
// not valid yet: at start (it exits naming the file and the date) and on
// reload (POST /admin/reload answers 400 naming them, the certificate in
// use stays).
func TestTLSCertificateOutOfValidityRefused(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(dir, "ca")
	require.NoError(t, err)
	expiredAt := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	validFrom := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	server, err := ca.IssueValid("server", expiredAt.Add(-24*time.Hour), expiredAt, "127.0.0.1")
	require.NoError(t, err)
	cfgFile := filepath.Join(dir, "redlockd.yaml")
	yaml := reloadConfig(fmt.Sprintf("e2e%d:", prefixSeq.Add(1)), [2]string{"acme", keyA}) +
		fmt.Sprintf("tls_cert_file: %s\ntls_key_file: %s\n", server.CertFile, server.KeyFile)
	require.NoError(t, os.WriteFile(cfgFile, []byte(yaml), 0o600))
	addr, adminAddr := freeAddr(t), freeAddr(t)
	args := []string{"--config", cfgFile, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s"}

	// Bounded, so that a daemon that starts anyway fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append([]string{"serve"}, args...)...).CombinedOutput()
	require.Error(t, err, "started with an expired certificate: %s", out)
	require.NoError(t, ctx.Err(), "started with an expired certificate: %s", out)
	assert.Contains(t, string(out), "TLS certificate "+server.CertFile+": expired at "+expiredAt.Format(time.RFC3339))
	assert.Contains(t, string(out), "redlockd: tls_cert_file, tls_key_file: daemon: TLS certificate", "the settings given, and only those")
	assert.NotContains(t, string(out), "tls_client_ca_file", "no client CA is set: the error does not name it (a black-box pass)")
	assert.NotContains(t, string(out), "redlockd serving", "a daemon that exits at its checks never said it serves")

	_, err = ca.Issue("server", "127.0.0.1")
	require.NoError(t, err)
	c := httpsClient(t, ca, certgen.Pair{})
	base, admin := "https://"+addr, "https://"+adminAddr
	d := startBinary(t, base, c, nil, args...)
	serial := serverSerial(t, c, base+"/readyz")
	for _, tc := range []struct {
		notBefore, notAfter time.Time
		want                string
	}{
		{expiredAt.Add(-24 * time.Hour), expiredAt, "expired at " + expiredAt.Format(time.RFC3339)},
		{validFrom, validFrom.Add(24 * time.Hour), "not valid before " + validFrom.Format(time.RFC3339)},
	} {
		_, err = ca.IssueValid("server", tc.notBefore, tc.notAfter, "127.0.0.1")
		require.NoError(t, err)
		resp, err := c.Post(admin+"/admin/reload", "", nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", body)
		assert.Contains(t, string(body), "TLS certificate "+server.CertFile+": "+tc.want)
		assert.Equal(t, serial, serverSerial(t, httpsClient(t, ca, certgen.Pair{}), base+"/readyz"), "the certificate in use stays")
	}
	assert.Equal(t, 2, d.logs.count("reload refused"), "%s", d.logs)
	require.NoError(t, d.stop(t), "%s", d.logs)
}

// TestServingLoggedOnlyWhenServing: "redlockd serving" is logged once
// every listener is open, and never by a daemon that then exits: an
// admin_listen address already in use stopped the daemon after it had
// said it was serving (a review found it).
func TestServingLoggedOnlyWhenServing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	cfgFile := filepath.Join(t.TempDir(), "redlockd.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(reloadConfig(fmt.Sprintf("e2e%d:", prefixSeq.Add(1)), [2]string{"acme", keyA})), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--config", cfgFile, "--listen", "127.0.0.1:0", "--admin-listen", taken.Addr().String()).CombinedOutput()
	require.Error(t, err, "started with its admin address taken: %s", out)
	require.NoError(t, ctx.Err(), "%s", out)
	assert.Contains(t, string(out), "admin listen on "+taken.Addr().String())
	assert.NotContains(t, string(out), "redlockd serving")

	addr, adminAddr := freeAddr(t), freeAddr(t)
	d := startBinary(t, "http://"+addr, httpClient, nil, "--config", cfgFile, "--listen", addr, "--admin-listen", adminAddr, "--drain-delay", "0s")
	require.Eventually(t, func() bool { return d.logs.count(`"msg":"redlockd serving"`) == 1 }, 10*time.Second, 10*time.Millisecond, "%s", d.logs)
	require.NoError(t, d.stop(t), "%s", d.logs)
}

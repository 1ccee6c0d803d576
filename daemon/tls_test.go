package daemon

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/certgen"
)

// tlsClient trusts ca and presents cert when it is not empty. Each client
// has its own transport, so its connections are its own.
func tlsClient(t *testing.T, ca *certgen.CA, cert certgen.Pair, edit ...func(*tls.Config)) *http.Client {
	t.Helper()
	cfg, err := ca.ClientConfig(cert)
	require.NoError(t, err)
	for _, e := range edit {
		e(cfg)
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// peerSerial GETs url and returns the status and the serial number of the
// certificate the server presented.
func peerSerial(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber.String()
}

// Both listeners serve HTTPS with the configured certificate, require a
// client certificate from the client CA, refuse TLS 1.1, and after Reload
// new handshakes get the new certificate while an open keep-alive
// connection keeps working on the old one.
func TestServerTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(dir, "ca")
	require.NoError(t, err)
	server, err := ca.Issue("server", "127.0.0.1")
	require.NoError(t, err)
	client, err := ca.Issue("client")
	require.NoError(t, err)
	other, err := certgen.NewCA(t.TempDir(), "other")
	require.NoError(t, err)
	stranger, err := other.Issue("stranger")
	require.NoError(t, err)

	st, err := NewServerTLS(TLSFiles{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.CertFile})
	require.NoError(t, err)
	ts := newTestServer(t, newFakeLocker(), func(o *Options) {
		o.TLS = st
		o.AdminListen = "127.0.0.1:0"
	})
	require.Eventually(t, func() bool { return ts.Server.AdminAddr() != "" }, 5*time.Second, time.Millisecond)
	base := strings.Replace(ts.URL, "http://", "https://", 1)
	admin := "https://" + ts.Server.AdminAddr()

	good := tlsClient(t, ca, client)
	code, serial1 := peerSerial(t, good, base+"/readyz")
	assert.Equal(t, http.StatusOK, code)
	code, _ = peerSerial(t, good, admin+"/metrics")
	assert.Equal(t, http.StatusOK, code, "the admin listener serves TLS too")

	for name, c := range map[string]*http.Client{
		"no client certificate":              tlsClient(t, ca, certgen.Pair{}),
		"a client certificate of another CA": tlsClient(t, ca, stranger),
		"TLS 1.1":                            tlsClient(t, ca, client, func(c *tls.Config) { c.MaxVersion = tls.VersionTLS11 }),
	} {
		_, err := c.Get(base + "/readyz")
		assert.Error(t, err, name)
	}
	// Plain HTTP on the TLS ports gets a 400 that says so, as net/http
	// answers on its own TLS connections (before: an empty reply).
	for _, addr := range []string{ts.Server.Addr(), ts.Server.AdminAddr()} {
		resp, err := http.Get("http://" + addr + "/readyz")
		require.NoError(t, err, "plain HTTP on the TLS port %s", addr)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Contains(t, string(body), "Client sent an HTTP request to an HTTPS server.")
	}

	// The framing checks read inside TLS: both framing headers are refused
	// and the connection closed, the pipelined request never served.
	dialCfg, err := ca.ClientConfig(client)
	require.NoError(t, err)
	conn, err := tls.Dial("tcp", ts.Server.Addr(), dialCfg)
	require.NoError(t, err)
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, rawLock("tls-smuggle", "Content-Length: 4", "Transfer-Encoding: chunked")+rawLock("tls-smuggled-next"))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	_, err = http.ReadResponse(br, nil)
	assert.Error(t, err, "nothing served after the refused request; the connection closed")
	conn.Close()

	// A new certificate; the keep-alive connection of good stays open.
	_, err = ca.Issue("server", "127.0.0.1")
	require.NoError(t, err)
	require.NoError(t, st.Reload())
	code, again := peerSerial(t, good, base+"/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, serial1, again, "the open connection was not dropped: same handshake")
	code, serial2 := peerSerial(t, tlsClient(t, ca, client), base+"/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.NotEqual(t, serial1, serial2, "a new connection gets the new certificate")

	// A broken file: Reload fails and the certificate in use stays.
	require.NoError(t, os.WriteFile(server.CertFile, []byte("not a certificate"), 0o600))
	err = st.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), server.CertFile)
	code, serial3 := peerSerial(t, tlsClient(t, ca, client), base+"/readyz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, serial2, serial3)
}

func TestNewServerTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(dir, "ca")
	require.NoError(t, err)
	server, err := ca.Issue("server", "127.0.0.1")
	require.NoError(t, err)
	keyPEM, err := os.ReadFile(server.KeyFile)
	require.NoError(t, err)
	for _, tc := range []struct {
		files TLSFiles
		want  string
	}{
		{TLSFiles{CertFile: server.CertFile}, "a certificate file and a key file are both required"},
		{TLSFiles{CertFile: dir + "/nope.crt", KeyFile: server.KeyFile}, dir + "/nope.crt"},
		{TLSFiles{CertFile: server.KeyFile, KeyFile: server.KeyFile}, server.KeyFile},
		{TLSFiles{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: server.KeyFile}, "no PEM certificate in it"},
	} {
		_, err := NewServerTLS(tc.files)
		require.Error(t, err, "%+v", tc.files)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), string(keyPEM[40:80]), "the key's content")
	}
}

// A certificate expired or not yet valid is refused at start and on
// reload, with an error naming the file and the date; on reload the
// certificate in use stays.
func TestServerTLSRefusesCertificateOutOfValidity(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA(dir, "ca")
	require.NoError(t, err)
	expiredAt := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	validFrom := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	issue := func(notBefore, notAfter time.Time) certgen.Pair {
		t.Helper()
		p, err := ca.IssueValid("server", notBefore, notAfter, "127.0.0.1")
		require.NoError(t, err)
		return p
	}
	bad := []struct {
		notBefore, notAfter time.Time
		want                string
	}{
		{expiredAt.Add(-24 * time.Hour), expiredAt, "expired at " + expiredAt.Format(time.RFC3339)},
		{validFrom, validFrom.Add(24 * time.Hour), "not valid before " + validFrom.Format(time.RFC3339)},
	}
	for _, tc := range bad {
		p := issue(tc.notBefore, tc.notAfter)
		_, err := NewServerTLS(TLSFiles{CertFile: p.CertFile, KeyFile: p.KeyFile})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "TLS certificate "+p.CertFile+": "+tc.want)
	}

	p := issue(time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	st, err := NewServerTLS(TLSFiles{CertFile: p.CertFile, KeyFile: p.KeyFile})
	require.NoError(t, err)
	_, inUse := st.Certificate()
	for _, tc := range bad {
		issue(tc.notBefore, tc.notAfter) // the same files
		err := st.Reload()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "TLS certificate "+p.CertFile+": "+tc.want)
		_, notAfter := st.Certificate()
		assert.Equal(t, inUse, notAfter, "the certificate in use stays")
	}
}

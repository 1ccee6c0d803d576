package client_test

import (
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/internal/testdaemon"
	"github.com/redlockd/redlockd/internal/testmasters"
)

var (
	servers   []*redisproc.Server
	binary    string
	prefixSeq atomic.Int64
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redlockd-client-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary, err = testdaemon.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testmasters.Run(m, 5, &servers)
	os.RemoveAll(dir)
	os.Exit(code)
}

func masterAddrs() []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// startDaemon runs the real `redlockd serve` over the five masters with a
// key prefix of its own; it is stopped at cleanup.
func startDaemon(t *testing.T, env ...string) *testdaemon.Daemon {
	t.Helper()
	d, err := testdaemon.Start(testdaemon.Options{
		Binary:    binary,
		Masters:   masterAddrs(),
		KeyPrefix: fmt.Sprintf("client%d:", prefixSeq.Add(1)),
		LogPath:   t.TempDir() + "/daemon.log",
		Env:       env,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Stop() })
	return d
}

// newClient returns a client of d with a transport of its own, whose idle
// connections are closed at cleanup (goleak checks the whole run).
func newClient(t *testing.T, d *testdaemon.Daemon, opts ...client.Option) *client.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	opts = append([]client.Option{client.WithHTTPClient(&http.Client{Transport: tr})}, opts...)
	c, err := client.New(d.URL, testdaemon.APIKey, opts...)
	require.NoError(t, err)
	return c
}

// pauseMasters SIGSTOPs the first n masters and resumes them at cleanup,
// then waits until the daemon d is ready again.
func pauseMasters(t *testing.T, n int, d *testdaemon.Daemon) {
	t.Helper()
	for _, s := range servers[:n] {
		require.NoError(t, s.Pause())
	}
	t.Cleanup(func() {
		for _, s := range servers[:n] {
			require.NoError(t, s.Resume())
		}
		waitReady(t, d.URL)
	})
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	require.Eventually(t, func() bool {
		resp, err := hc.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "daemon not ready again")
}

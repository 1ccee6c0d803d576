package apitest

import (
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/internal/testdaemon"
	"github.com/redlockd/redlockd/internal/testmasters"
)

var (
	servers   []*redisproc.Server
	binDir    string // holds the redlockd binary built for this run
	binary    string
	prefixSeq atomic.Int64
	// httpClient's idle connections are closed after each test (goleak).
	transport  = &http.Transport{}
	httpClient = &http.Client{Timeout: 30 * time.Second, Transport: transport}
)

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "redlockd-apitest")
	if err == nil {
		binary, err = testdaemon.Build(binDir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testmasters.Run(m, 5, &servers)
	os.RemoveAll(binDir)
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
// key prefix of its own and env (REDLOCKD_* settings) added to its
// environment, stopped at cleanup.
func startDaemon(t *testing.T, env ...string) *testdaemon.Daemon {
	t.Helper()
	d, err := testdaemon.Start(testdaemon.Options{
		Binary:    binary,
		Masters:   masterAddrs(),
		KeyPrefix: fmt.Sprintf("apitest%d:", prefixSeq.Add(1)),
		LogPath:   t.TempDir() + "/daemon.log",
		Env:       env,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		_ = d.Stop()
	})
	return d
}

// pauseMasters SIGSTOPs the first n masters; cleanup resumes them and
// waits until d is ready again.
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
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "daemon not ready again")
}

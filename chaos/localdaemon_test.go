package chaos

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// TestLocalDaemonReloadReplacesAPIKeys: the fuzzer's config reload gives
// the daemon a second account's key and takes it away again, over real
// HTTP, while the drill's own key works throughout.
func TestLocalDaemonReloadReplacesAPIKeys(t *testing.T) {
	srvs, err := redisproc.StartN(3, redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.Addr()
	}
	ld, err := startLocalDaemon("r", 0, addrs, DaemonConfig{}.withDefaults(), "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ld.close() })

	status := func(apiKey string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, ld.info.URL+"/v1/lock", strings.NewReader(`{"action":"status","key":"reload"}`))
		require.NoError(t, err)
		req.Header.Set("X-API-Key", apiKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	other := localAPIKey + "-other"
	assert.Equal(t, http.StatusUnauthorized, status(other), "before any reload")
	require.NoError(t, ld.reload(true))
	assert.NotEqual(t, http.StatusUnauthorized, status(other), "the reload added the second account's key")
	assert.NotEqual(t, http.StatusUnauthorized, status(localAPIKey))
	require.NoError(t, ld.reload(false))
	assert.Equal(t, http.StatusUnauthorized, status(other), "the next reload removed it")
	assert.NotEqual(t, http.StatusUnauthorized, status(localAPIKey), "the drill's key works throughout")
}

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// TestAdminLockList: `redlockd serve` with admin_listen and admin_token
// serves GET /admin/locks there, behind the token, with the fence the
// acquire returned; the public listener does not serve it.
func TestAdminLockList(t *testing.T) {
	const token = "admin-token-0123456789abcdef"
	adminAddr := freeAddr(t)
	var prefix string
	base := daemonURL(t, func(c *config.Config) { c.AdminListen, c.AdminToken, prefix = adminAddr, token, c.KeyPrefix })
	st, env, _ := post(t, lockURL(base), keyA, `{"action":"acquire","namespace":"shop","key":"order:pay:1","ttl":60}`)
	require.Equal(t, http.StatusOK, st)
	fence := env.Data["fence"]
	require.NotNil(t, fence)
	// The acquire answered at quorum; a SET landing on a master after the
	// listing scanned it changes the lock's holders during the listing,
	// which the listing does not promise to list. The lock's Redis key:
	// <prefix>lock:<len>:<account>:<len>:<namespace>:<len>:<key>.
	waitOnEveryMaster(t, prefix+"lock:4:acme:4:shop:11:order:pay:1")

	get := func(url, bearer string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := httpClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	// The listing may take several pages (the masters hold other tests' keys).
	var locks []map[string]any
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100)
		code, body := get("http://"+adminAddr+"/admin/locks?account=acme&limit=10&cursor="+cursor, token)
		require.Equal(t, http.StatusOK, code, body)
		var page struct {
			Locks      []map[string]any `json:"locks"`
			NextCursor string           `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &page), body)
		locks = append(locks, page.Locks...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	require.Len(t, locks, 1)
	assert.Equal(t, "shop", locks[0]["namespace"])
	assert.Equal(t, "order:pay:1", locks[0]["key"])
	assert.Equal(t, fence, locks[0]["fence"])
	assert.NotContains(t, locks[0], "token")

	code, body := get("http://"+adminAddr+"/admin/locks?account=acme", "")
	assert.Equal(t, http.StatusUnauthorized, code, body)
	code, body = get(base+"/admin/locks?account=acme", token)
	assert.Equal(t, http.StatusNotFound, code, body)
}

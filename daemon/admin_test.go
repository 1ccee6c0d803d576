package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adminURL is the admin listener of ts, once Serve has opened it.
func adminURL(t *testing.T, ts *testServer) string {
	t.Helper()
	require.Eventually(t, func() bool { return ts.Server.AdminAddr() != "" }, 5*time.Second, time.Millisecond)
	return "http://" + ts.Server.AdminAddr()
}

// raw sends method to url with header and returns the status and body.
func (ts *testServer) raw(t *testing.T, method, url string, header map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := ts.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

// With AdminListen, the operator endpoints move to the admin listener and
// the public one keeps the lock API, health and the contract; each
// listener's 404 lists what it serves.
func TestAdminListenerMovesOperatorEndpoints(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f, func(o *Options) { o.AdminListen = "127.0.0.1:0" })
	admin := adminURL(t, ts)

	for _, p := range []string{"/metrics", "/v1/stats", "/v1/history", "/", "/dashboard.js"} {
		st, body, _ := ts.raw(t, http.MethodGet, ts.URL+p, nil)
		assert.Equal(t, http.StatusNotFound, st, "public %s: %s", p, body)
		assert.Contains(t, body, "the endpoints are POST /v1/lock, POST /gateway/distlock, GET /healthz, GET /readyz and GET /openapi.yaml")
		st, body, _ = ts.raw(t, http.MethodGet, admin+p, nil)
		assert.Equal(t, http.StatusOK, st, "admin %s: %s", p, body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		st, _, _ := ts.raw(t, http.MethodGet, ts.URL+p, nil)
		assert.Equal(t, http.StatusOK, st, "public %s", p)
		st, _, _ = ts.raw(t, http.MethodGet, admin+p, nil)
		assert.Equal(t, http.StatusOK, st, "admin %s (the dashboard reads it)", p)
	}
	r := ts.lock(t, testKeyAcme, `{"key":"k"}`)
	assert.Equal(t, http.StatusOK, r.Status, r.Raw)

	st, body, _ := ts.raw(t, http.MethodPost, admin+"/v1/lock", nil)
	assert.Equal(t, http.StatusNotFound, st, "the lock API is not on the admin listener: %s", body)
	assert.Contains(t, body, "GET /metrics, GET /v1/stats, GET /v1/history, POST /admin/reload, GET /admin/locks and GET /admin/idempotency")
	st, body, h := ts.raw(t, http.MethodGet, admin+"/admin/reload", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, st, body)
	assert.Equal(t, "POST", h.Get("Allow"))
	st, body, _ = ts.raw(t, http.MethodPost, admin+"/admin/reload", nil)
	assert.Equal(t, http.StatusNotFound, st, "no Reload configured: %s", body)
	assert.Contains(t, body, "reload is not available")
}

// Without AdminListen nothing moves, and /admin/reload is not served.
func TestNoAdminListenerNoAdminRoutes(t *testing.T) {
	reloads := 0
	ts := newTestServer(t, newFakeLocker(), func(o *Options) {
		o.Reload = func(context.Context) (ReloadResult, error) { reloads++; return ReloadResult{}, nil }
	})
	st, body, _ := ts.raw(t, http.MethodPost, ts.URL+"/admin/reload", nil)
	assert.Equal(t, http.StatusNotFound, st, body)
	assert.NotContains(t, body, "/admin/reload\"") // named as the unknown path only
	assert.NotContains(t, body, "POST /admin/reload")
	assert.Zero(t, reloads)
	for _, p := range []string{"/metrics", "/v1/stats", "/v1/history", "/"} {
		st, _, _ := ts.raw(t, http.MethodGet, ts.URL+p, nil)
		assert.Equal(t, http.StatusOK, st, p)
	}
	assert.Empty(t, ts.Server.AdminAddr())
}

// AdminToken guards every admin route, as a bearer token or a basic
// authentication password; the public listener does not ask for it.
func TestAdminToken(t *testing.T) {
	const token = "admin-token-0123456789abcdef"
	ts := newTestServer(t, newFakeLocker(), func(o *Options) {
		o.AdminListen = "127.0.0.1:0"
		o.AdminToken = token
	})
	admin := adminURL(t, ts)
	for _, p := range []string{"/metrics", "/readyz", "/", "/nope"} {
		for _, h := range []map[string]string{
			nil,
			{"Authorization": "Bearer wrong-token-0123456789abcdef"},
			{"Authorization": "Bearer "},
			{"Authorization": token},
		} {
			st, body, hdr := ts.raw(t, http.MethodGet, admin+p, h)
			assert.Equal(t, http.StatusUnauthorized, st, "%s %v: %s", p, h, body)
			assert.Contains(t, hdr.Get("WWW-Authenticate"), "Basic")
			assert.NotContains(t, body, token)
		}
	}
	st, _, _ := ts.raw(t, http.MethodGet, admin+"/metrics", map[string]string{"Authorization": "Bearer " + token})
	assert.Equal(t, http.StatusOK, st)
	req, err := http.NewRequest(http.MethodGet, admin+"/", nil)
	require.NoError(t, err)
	req.SetBasicAuth("anyone", token)
	resp, err := ts.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "basic auth, for a browser")
	st, _, _ = ts.raw(t, http.MethodGet, ts.URL+"/readyz", nil)
	assert.Equal(t, http.StatusOK, st, "the public listener needs no admin token")

	o := validOptions(newFakeLocker())
	o.AdminToken = token
	_, err = New(nil, o)
	assert.ErrorContains(t, err, "AdminToken: needs AdminListen")
}

// Two Authorization headers are refused with 400 before either is looked
// at, as two X-API-Key headers are on the lock API: even when the first
// holds the right token.
func TestAdminRefusesTwoAuthorizationHeaders(t *testing.T) {
	const token = "admin-token-0123456789abcdef"
	ts := newTestServer(t, newFakeLocker(), func(o *Options) {
		o.AdminListen = "127.0.0.1:0"
		o.AdminToken = token
	})
	admin := adminURL(t, ts)
	for _, second := range []string{"Bearer " + token, "Bearer wrong-token-0123456789abcdef", "Basic YTpi"} {
		req, err := http.NewRequest(http.MethodGet, admin+"/metrics", nil)
		require.NoError(t, err)
		req.Header.Add("Authorization", "Bearer "+token)
		req.Header.Add("Authorization", second)
		resp, err := ts.client.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", body)
		assert.Contains(t, string(body), `"msg":"send exactly one Authorization header","code":"bad_request"`)
		assert.NotContains(t, string(body), token)
	}
	st, _, _ := ts.raw(t, http.MethodGet, admin+"/metrics", map[string]string{"Authorization": "Bearer " + token})
	assert.Equal(t, http.StatusOK, st, "one header with the token")
}

// SetAdminToken replaces the admin token for the next request: the old one
// gets 401 and the new one 200; a token where there was none closes the
// listener; an empty token while one is in force is refused and changes
// nothing; without an admin listener a token is refused.
func TestSetAdminToken(t *testing.T) {
	const tok1, tok2 = "admin-token-one-0123456789abcdef", "admin-token-two-0123456789abcdef"
	ts := newTestServer(t, newFakeLocker(), func(o *Options) { o.AdminListen = "127.0.0.1:0" })
	admin := adminURL(t, ts)
	status := func(token string) int {
		t.Helper()
		var h map[string]string
		if token != "" {
			h = map[string]string{"Authorization": "Bearer " + token}
		}
		st, _, _ := ts.raw(t, http.MethodGet, admin+"/v1/stats", h)
		return st
	}
	require.Equal(t, http.StatusOK, status(""), "no token yet")
	require.NoError(t, ts.Server.SetAdminToken(""), "none to remove: nothing to refuse")
	assert.Equal(t, http.StatusOK, status(""))

	require.NoError(t, ts.Server.SetAdminToken(tok1))
	assert.Equal(t, http.StatusUnauthorized, status(""), "a token where there was none")
	assert.Equal(t, http.StatusOK, status(tok1))

	require.NoError(t, ts.Server.SetAdminToken(tok2))
	assert.Equal(t, http.StatusUnauthorized, status(tok1), "the old token, at once")
	assert.Equal(t, http.StatusOK, status(tok2))

	err := ts.Server.SetAdminToken("")
	require.ErrorContains(t, err, "an empty token would leave the admin listener unauthenticated")
	assert.NotContains(t, err.Error(), tok2)
	assert.Equal(t, http.StatusUnauthorized, status(""), "a refused removal changes nothing")
	assert.Equal(t, http.StatusOK, status(tok2))

	noAdmin := newTestServer(t, newFakeLocker())
	assert.ErrorContains(t, noAdmin.Server.SetAdminToken(tok1), "needs Options.AdminListen")
}

// Admin requests read the token while SetAdminToken replaces it, without a
// lock (run with -race): a request with one of the two tokens gets 200 or
// 401, a third token always 401, and the last token set is the one in
// force.
func TestSetAdminTokenConcurrent(t *testing.T) {
	tokens := [2]string{"admin-token-one-0123456789abcdef", "admin-token-two-0123456789abcdef"}
	ts := newTestServer(t, newFakeLocker(), func(o *Options) {
		o.AdminListen = "127.0.0.1:0"
		o.AdminToken = tokens[0]
		o.AuthFailureBurst = 1000 // the 401s here are expected, not an attack
	})
	admin := adminURL(t, ts)
	get := func(token string) int {
		st, _, _ := ts.raw(t, http.MethodGet, admin+"/healthz", map[string]string{"Authorization": "Bearer " + token})
		return st
	}
	readersDone := make(chan struct{})
	var rotator, readers sync.WaitGroup
	rotator.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-readersDone:
				assert.NoError(t, ts.Server.SetAdminToken(tokens[1]))
				return
			default:
			}
			assert.NoError(t, ts.Server.SetAdminToken(tokens[i%2]))
		}
	})
	for g := range 4 {
		readers.Go(func() {
			for i := range 50 {
				assert.Contains(t, []int{http.StatusOK, http.StatusUnauthorized}, get(tokens[(g+i)%2]))
				assert.Equal(t, http.StatusUnauthorized, get("admin-token-three-0123456789abc"))
			}
		})
	}
	readers.Wait()
	close(readersDone)
	rotator.Wait()
	assert.Equal(t, http.StatusOK, get(tokens[1]), "the last one set")
	assert.Equal(t, http.StatusUnauthorized, get(tokens[0]))
}

// TestAdminTokenFailuresLimited: the scheme name is case-insensitive, and
// wrong admin tokens count against the source's failed-authentication
// bucket like bad API keys: after the burst (20 by default) the source gets
// 429 with Retry-After, whatever token it sends, and every failure is in
// redlockd_auth_failures_total{reason="admin_token"}.
func TestAdminTokenFailuresLimited(t *testing.T) {
	const token = "admin-token-0123456789abcdef"
	ts := newTestServer(t, newFakeLocker(), func(o *Options) {
		o.AdminListen = "127.0.0.1:0"
		o.AdminToken = token
	})
	admin := adminURL(t, ts)
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		st, body, _ := ts.raw(t, http.MethodGet, admin+"/metrics", map[string]string{"Authorization": scheme + " " + token})
		assert.Equal(t, http.StatusOK, st, "%s: %.200s", scheme, body)
	}
	statuses := map[int]int{}
	for range 25 {
		st, body, hdr := ts.raw(t, http.MethodGet, admin+"/metrics", map[string]string{"Authorization": "Bearer wrong-token-0123456789abcdef"})
		statuses[st]++
		if st == http.StatusTooManyRequests {
			assert.NotEmpty(t, hdr.Get("Retry-After"))
			// The admin listener's credential, not the lock API's.
			assert.Contains(t, body, "admin token in the Authorization header", body)
			assert.NotContains(t, body, "X-API-Key")
			assert.Contains(t, body, `"code":"too_many_auth_failures"`)
		}
	}
	assert.Equal(t, map[int]int{http.StatusUnauthorized: DefaultAuthFailureBurst, http.StatusTooManyRequests: 25 - DefaultAuthFailureBurst}, statuses)
	st, _, _ := ts.raw(t, http.MethodGet, admin+"/metrics", map[string]string{"Authorization": "Bearer " + token})
	assert.Equal(t, http.StatusTooManyRequests, st, "a limited source is refused before its token is looked at")
	var m dto.Metric
	require.NoError(t, ts.Server.metrics.authFailures[authAdminToken].Write(&m))
	assert.Equal(t, float64(DefaultAuthFailureBurst), m.GetCounter().GetValue())
}

// POST /admin/reload answers what Reload changed, 400 for a refused
// config, 500 for a failure.
func TestAdminReloadAnswers(t *testing.T) {
	var next func() (ReloadResult, error)
	ts := newTestServer(t, newFakeLocker(), func(o *Options) {
		o.AdminListen = "127.0.0.1:0"
		o.Reload = func(context.Context) (ReloadResult, error) { return next() }
	})
	admin := adminURL(t, ts)
	next = func() (ReloadResult, error) {
		return ReloadResult{Accounts: 2, Added: []string{"initech"}, Removed: []string{}, KeysChanged: []string{}, Certificates: true, Ignored: []string{"masters"}}, nil
	}
	st, body, _ := ts.raw(t, http.MethodPost, admin+"/admin/reload", nil)
	require.Equal(t, http.StatusOK, st, body)
	var env struct {
		Ret  string
		Data ReloadResult
	}
	require.NoError(t, json.Unmarshal([]byte(body), &env))
	assert.Equal(t, "ok", env.Ret)
	assert.Equal(t, []string{"initech"}, env.Data.Added)
	assert.Equal(t, []string{"masters"}, env.Data.Ignored)

	next = func() (ReloadResult, error) {
		return ReloadResult{}, &ReloadError{Err: errors.New("redlockd.yaml: api_keys[1].key: too short (3 bytes, need ≥ 16)")}
	}
	st, body, _ = ts.raw(t, http.MethodPost, admin+"/admin/reload", nil)
	assert.Equal(t, http.StatusBadRequest, st, body)
	assert.Contains(t, body, "reload refused, nothing changed: redlockd.yaml: api_keys[1].key: too short")

	next = func() (ReloadResult, error) { return ReloadResult{}, errors.New("disk on fire") }
	st, body, _ = ts.raw(t, http.MethodPost, admin+"/admin/reload", nil)
	assert.Equal(t, http.StatusInternalServerError, st, body)

	// A parameter or a body is refused before anything is reloaded: the
	// daemon reads its own file, whatever a caller names.
	called := false
	next = func() (ReloadResult, error) { called = true; return ReloadResult{}, nil }
	st, body, _ = ts.raw(t, http.MethodPost, admin+"/admin/reload?file=/tmp/other.yaml", nil)
	assert.Equal(t, http.StatusBadRequest, st, body)
	assert.Contains(t, body, `unknown parameter \"file\"; POST /admin/reload takes no parameters and no body`)
	resp, err := http.Post(admin+"/admin/reload", "application/yaml", strings.NewReader("api_keys: []"))
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, string(raw))
	assert.Contains(t, string(raw), "a body was sent; POST /admin/reload takes no parameters")
	assert.False(t, called, "nothing reloaded")
	st, body, _ = ts.raw(t, http.MethodPost, admin+"/admin/reload", nil)
	assert.Equal(t, http.StatusOK, st, body)
	assert.True(t, called)
	// What HTTP libraries send for a POST of no data is no body.
	for _, empty := range []string{"{}", " { } \n", "null"} {
		resp, err := http.Post(admin+"/admin/reload", "application/json", strings.NewReader(empty))
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%q: %s", empty, raw)
	}
}

// SetAPIKeys: a request whose key was accepted before finishes; from the
// swap on, the removed key is refused and the new one is served.
func TestSetAPIKeysInFlight(t *testing.T) {
	f := newFakeLocker()
	f.block = make(chan struct{})
	f.blocked = make(chan struct{}, 1)
	ts := newTestServer(t, f)

	inflight := make(chan *response, 1)
	go func() {
		inflight <- ts.lock(t, testKeyAcme, `{"key":"slow"}`)
	}()
	<-f.blocked

	const keyInitech = "initech-key-0123456789abcdef"
	res, err := ts.Server.SetAPIKeys([]APIKey{
		{Account: "globex", Hash: sha256.Sum256([]byte("globex-new-key-0123456789"))},
		{Account: "initech", Hash: sha256.Sum256([]byte(keyInitech))},
	})
	require.NoError(t, err)
	assert.Equal(t, ReloadResult{Accounts: 2, Added: []string{"initech"}, Removed: []string{"acme"}, KeysChanged: []string{"globex"}, Ignored: []string{}}, res)

	// Status: the fake blocks acquires only.
	const status = `{"action":"status","key":"k"}`
	assert.Equal(t, http.StatusUnauthorized, ts.lock(t, testKeyAcme, status).Status, "a removed account's key")
	assert.Equal(t, http.StatusUnauthorized, ts.lock(t, testKeyGlobex, status).Status, "a replaced key")
	assert.Equal(t, http.StatusOK, ts.lock(t, "globex-new-key-0123456789", status).Status)
	assert.Equal(t, http.StatusOK, ts.lock(t, keyInitech, status).Status)

	_, err = ts.Server.SetAPIKeys(nil)
	assert.ErrorContains(t, err, "at least one")
	assert.Equal(t, http.StatusOK, ts.lock(t, keyInitech, status).Status, "a refused set changes nothing")

	close(f.block)
	r := <-inflight
	assert.Equal(t, http.StatusOK, r.Status, "the request accepted before the swap finished: %s", r.Raw)
}

// The admin listener refuses ambiguous framing as the public one does:
// 400, and the connection closed before the pipelined request.
func TestAdminListenerFraming(t *testing.T) {
	ts := newTestServer(t, newFakeLocker(), func(o *Options) { o.AdminListen = "127.0.0.1:0" })
	admin := &testServer{URL: adminURL(t, ts)}
	next := "GET /metrics HTTP/1.1\r\nHost: redlockd\r\n\r\n"
	answers, closed := rawExchange(t, admin, "POST /admin/reload HTTP/1.1\r\nHost: redlockd\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+next)
	require.Len(t, answers, 1, "nothing pipelined after it served")
	assert.Equal(t, http.StatusBadRequest, answers[0].StatusCode)
	assert.True(t, closed)
}

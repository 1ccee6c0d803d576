package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
)

// TestIdempotencyProxyReplays: behind the gateway, a retried POST gets the
// first answer's status, headers and body byte for byte, and the upstream
// (a real HTTP server) saw one request, with the fence. Real daemon, real
// masters.
func TestIdempotencyProxyReplays(t *testing.T) {
	base := daemonURL(t)
	var seen atomic.Int32
	var mu sync.Mutex
	var fences []string
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := seen.Add(1)
		mu.Lock()
		fences = append(fences, r.Header.Get(client.HeaderIdempotencyFence))
		mu.Unlock()
		if r.URL.Path == "/slow" {
			<-release
		}
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte("read"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/42")
		w.Header().Set("X-Not-Replayed", "x")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":42,"n":` + string(rune('0'+n)) + "}\x00\xff"))
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	c, err := client.New(base, keyA)
	require.NoError(t, err)
	var routes routeList
	require.NoError(t, routes.Set("POST /orders"))
	gw := httptest.NewServer(newIdemProxy(idemProxySettings{upstream: u, require: routes, lease: 30 * time.Second, retention: time.Hour}, c))
	defer gw.Close()

	send := func(method, path, key, body string) (*http.Response, []byte) {
		req, err := http.NewRequest(method, gw.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set(client.HeaderIdempotencyKey, key)
		}
		req.Header.Set(client.HeaderIdempotencyFence, "999999") // spoofed: removed
		resp, err := gw.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	first, body1 := send(http.MethodPost, "/orders", "ord-1", `{"sku":"A","qty":1}`)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	for range 3 {
		again, body := send(http.MethodPost, "/orders", "ord-1", `{"sku":"A","qty":1}`)
		require.Equal(t, http.StatusCreated, again.StatusCode)
		require.True(t, bytes.Equal(body1, body), "%q != %q", body1, body)
		require.Equal(t, "/orders/42", again.Header.Get("Location"))
		require.Equal(t, "application/json", again.Header.Get("Content-Type"))
		require.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
		require.Empty(t, again.Header.Get("X-Not-Replayed"))
	}
	require.EqualValues(t, 1, seen.Load(), "the upstream saw one request")
	require.NotEqual(t, "999999", fences[0])
	require.NotEmpty(t, fences[0])

	mismatch, _ := send(http.MethodPost, "/orders", "ord-1", `{"sku":"A","qty":2}`)
	require.Equal(t, http.StatusUnprocessableEntity, mismatch.StatusCode)
	missing, _ := send(http.MethodPost, "/orders", "", `{"sku":"A","qty":1}`)
	require.Equal(t, http.StatusBadRequest, missing.StatusCode)
	require.EqualValues(t, 1, seen.Load())

	// Pass-through: GET, and POST off the required routes without a key.
	get, b := send(http.MethodGet, "/orders/42", "", "")
	require.Equal(t, http.StatusOK, get.StatusCode)
	require.Equal(t, "read", string(b))
	require.Empty(t, fences[len(fences)-1], "a client's Idempotency-Fence never reaches the upstream")

	// While the upstream works on an attempt, a retry gets 409.
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, _ := send(http.MethodPost, "/slow", "slow-1", "x")
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}()
	require.Eventually(t, func() bool { return seen.Load() == 3 }, 5*time.Second, 10*time.Millisecond)
	busy, _ := send(http.MethodPost, "/slow", "slow-1", "x")
	require.Equal(t, http.StatusConflict, busy.StatusCode)
	require.NotEmpty(t, busy.Header.Get("Retry-After"))
	close(release)
	<-done
	require.EqualValues(t, 3, seen.Load())
}

func TestIdempotencyProxyBadFlags(t *testing.T) {
	t.Setenv("REDLOCKD_API_KEY", "k")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--url", "http://127.0.0.1:1"}, "--upstream: required"},
		{[]string{"--url", "http://127.0.0.1:1", "--upstream", "ftp://x"}, "must be an absolute http or https URL"},
		{[]string{"--url", "http://127.0.0.1:1", "--upstream", "http://x", "--require", "GET /a"}, `method "GET": only POST and PATCH`},
		{[]string{"--url", "http://127.0.0.1:1", "--upstream", "http://x", "--retention", "700000"}, "--retention: 700000 is outside"},
	} {
		_, err := parseIdemProxyArgs(tc.args, io.Discard)
		require.ErrorContains(t, err, tc.msg, tc.args)
	}
}

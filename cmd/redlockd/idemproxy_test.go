package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/config"
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
	ra, err := strconv.Atoi(busy.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.LessOrEqual(t, ra, 5, "capped, not the whole 30 s lease")
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
		{[]string{"--url", "http://127.0.0.1:1", "--upstream", "http://x", "--lease", "50000"}, "--lease: 50000 is above half the default retention (86400 seconds): give --retention"},
	} {
		_, err := parseIdemProxyArgs(tc.args, io.Discard)
		require.ErrorContains(t, err, tc.msg, tc.args)
	}
}

// gatewayFor starts the gateway in front of h with the given lease.
func gatewayFor(t *testing.T, h http.Handler, lease time.Duration) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	return gatewayWith(t, h, idemProxySettings{lease: lease, retention: time.Hour})
}

// gatewayWith is gatewayFor with the gateway's settings (the upstream
// filled in).
func gatewayWith(t *testing.T, h http.Handler, set idemProxySettings) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	base := daemonURL(t)
	var seen atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(upstream.Close)
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	c, err := client.New(base, keyA)
	require.NoError(t, err)
	set.upstream = u
	gw := httptest.NewServer(newIdemProxy(set, c))
	t.Cleanup(gw.Close)
	return gw, &seen
}

// postUntilDecided sends the keyed POST until it is no longer 409 (an
// attempt in progress), for up to 20 s.
func postUntilDecided(t *testing.T, gw *httptest.Server, path, key, body string) (*http.Response, []byte) {
	t.Helper()
	return sendUntilDecided(t, gw, http.MethodPost, path, key, body, nil)
}

// sendUntilDecided is postUntilDecided with the method and more headers.
func sendUntilDecided(t *testing.T, gw *httptest.Server, method, path, key, body string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, err := http.NewRequest(method, gw.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		for k, vs := range hdr {
			req.Header[k] = vs
		}
		if key != "" {
			req.Header.Set(client.HeaderIdempotencyKey, key)
		}
		resp, err := gw.Client().Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			return resp, b
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIdempotencyProxyClientTimeoutChargesOnce: a client that gives up
// while the upstream works must not make the retry run the upstream again:
// the upstream's answer is stored although nobody read it, and the retry
// replays it.
func TestIdempotencyProxyClientTimeoutChargesOnce(t *testing.T) {
	gw, seen := gatewayFor(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(600 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("charged"))
	}), 30*time.Second)
	req, err := http.NewRequest(http.MethodPost, gw.URL+"/payments", strings.NewReader(`{"amt":100}`))
	require.NoError(t, err)
	req.Header.Set(client.HeaderIdempotencyKey, "pay-42")
	hc := &http.Client{Timeout: 100 * time.Millisecond}
	_, err = hc.Do(req)
	require.Error(t, err, "the client gives up before the upstream answers")
	resp, b := postUntilDecided(t, gw, "/payments", "pay-42", `{"amt":100}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get(client.HeaderIdempotentReplayed))
	require.Equal(t, "charged", string(b))
	require.EqualValues(t, 1, seen.Load(), "the upstream ran once")
}

// TestIdempotencyProxyUpstreamErrorIsTakeover: an upstream 5xx may come
// after the upstream did part of its work: the retry runs it again only
// as a take-over (Idempotency-Takeover: true, after the lease), never as
// a blind start.
func TestIdempotencyProxyUpstreamErrorIsTakeover(t *testing.T) {
	var takeover []string
	var mu sync.Mutex
	gw, seen := gatewayFor(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		takeover = append(takeover, r.Header.Get(client.HeaderIdempotencyTakeover))
		n := len(takeover)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}), time.Second)
	resp, _ := postUntilDecided(t, gw, "/payments", "pay-5xx", "x")
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	resp, _ = postUntilDecided(t, gw, "/payments", "pay-5xx", "x")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.EqualValues(t, 2, seen.Load())
	require.Equal(t, []string{"", "true"}, takeover, "the second run is a take-over")
}

// TestIdempotencyProxyConnectionCannotStripTheAttempt: a client that names
// Idempotency-Fence, Idempotency-Takeover, Idempotency-Key and the
// namespace header in its Connection header (so that a proxy drops them as
// hop-by-hop) still gets them to the upstream: the fence on every
// attempt, the take-over flag on the run after an upstream 5xx, the key
// and namespace the upstream looks its earlier work up by. Found by
// helpers: the upstream saw no fence, and ran a take-over without being
// told; later, no key and no namespace.
func TestIdempotencyProxyConnectionCannotStripTheAttempt(t *testing.T) {
	var mu sync.Mutex
	var fences, takeovers, keys, users []string
	gw, seen := gatewayWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fences = append(fences, r.Header.Get(client.HeaderIdempotencyFence))
		takeovers = append(takeovers, r.Header.Get(client.HeaderIdempotencyTakeover))
		keys = append(keys, r.Header.Get(client.HeaderIdempotencyKey))
		users = append(users, r.Header.Get("X-User-Id"))
		n := len(fences)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}), idemProxySettings{lease: time.Second, retention: time.Hour, nsHeader: "X-User-Id"})
	strip := http.Header{"Connection": {"Idempotency-Fence, idempotency-takeover, Idempotency-Key, x-user-id, X-Other"}, "X-User-Id": {"u1"}}
	resp, _ := sendUntilDecided(t, gw, http.MethodPost, "/payments", "pay-conn", "x", strip)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, _ = sendUntilDecided(t, gw, http.MethodPost, "/payments", "pay-conn", "x", strip)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.EqualValues(t, 2, seen.Load())
	require.NotEmpty(t, fences[0], "the first attempt's fence reached the upstream")
	require.NotEmpty(t, fences[1])
	require.NotEqual(t, fences[0], fences[1], "the take-over has a fence of its own")
	require.Equal(t, []string{"", "true"}, takeovers, "the upstream is told the second run is a take-over")
	require.Equal(t, []string{"pay-conn", "pay-conn"}, keys, "the key reached the upstream")
	require.Equal(t, []string{"u1", "u1"}, users, "the namespace header reached the upstream")
}

// TestIdempotencyProxyMethodCase: "post" is a POST to the gateway as it is
// to the upstream frameworks that upper-case methods: required routes
// refuse it without a key, and two with one key run the upstream once.
func TestIdempotencyProxyMethodCase(t *testing.T) {
	base := daemonURL(t)
	var seen atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := seen.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("o-" + strconv.Itoa(int(n))))
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	c, err := client.New(base, keyA)
	require.NoError(t, err)
	var routes routeList
	require.NoError(t, routes.Set("post /orders"), "a lower-case route method is POST")
	gw := httptest.NewServer(newIdemProxy(idemProxySettings{upstream: u, require: routes, lease: 30 * time.Second, retention: time.Hour}, c))
	defer gw.Close()

	resp, _ := sendUntilDecided(t, gw, "post", "/orders", "", "x", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "no key on a required route")
	require.Zero(t, seen.Load())
	first, b1 := sendUntilDecided(t, gw, "post", "/orders", "m1", "x", nil)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	again, b2 := sendUntilDecided(t, gw, "Post", "/orders", "m1", "x", nil)
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, string(b1), string(b2), "replayed")
	require.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
	upper, b3 := sendUntilDecided(t, gw, http.MethodPost, "/orders", "m1", "x", nil)
	require.Equal(t, http.StatusCreated, upper.StatusCode)
	require.Equal(t, string(b1), string(b3), "POST is the same intent as post")
	require.EqualValues(t, 1, seen.Load(), "the upstream ran once")
}

// TestIdempotencyProxyStoresAnswersUpToTheCap: an answer just under the
// 64 KiB cap (body plus replayed headers) is stored and replayed; a larger
// one is stored without its body, and its replay says so.
func TestIdempotencyProxyStoresAnswersUpToTheCap(t *testing.T) {
	gw, seen := gatewayFor(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 65400
		if r.URL.Path == "/huge" {
			n = 65500 // under 64 KiB, but above it with the replayed headers
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(bytes.Repeat([]byte("a"), n))
	}), 30*time.Second)
	first, b1 := postUntilDecided(t, gw, "/payments", "big-42", "x")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	again, b2 := postUntilDecided(t, gw, "/payments", "big-42", "x")
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
	require.True(t, bytes.Equal(b1, b2))
	require.EqualValues(t, 1, seen.Load())

	huge, _ := postUntilDecided(t, gw, "/huge", "huge-42", "x")
	require.Equal(t, http.StatusCreated, huge.StatusCode)
	replay, b := postUntilDecided(t, gw, "/huge", "huge-42", "x")
	require.Equal(t, http.StatusCreated, replay.StatusCode)
	require.Equal(t, "true", replay.Header.Get(client.HeaderIdempotentReplayed))
	require.Equal(t, "65500", replay.Header.Get(client.HeaderIdempotentBodyOmitted))
	require.Equal(t, "/payments/1", replay.Header.Get("Location"))
	require.Empty(t, b)
	require.EqualValues(t, 2, seen.Load())
}

// TestIdempotencyProxyAddsNoContentType: an answer the upstream sent
// without a Content-Type reaches the client without one, first and
// replayed, and so does a 5xx passed through (a black-box pass: net/http
// sniffed "text/plain; charset=utf-8" for each).
func TestIdempotencyProxyAddsNoContentType(t *testing.T) {
	gw, seen := gatewayFor(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // the upstream's server sniffs none either
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("upstream failed"))
			return
		}
		if r.URL.Path == "/typed" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("created"))
	}), 30*time.Second)
	first, b1 := postUntilDecided(t, gw, "/orders", "ct-1", "x")
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Equal(t, "created", string(b1))
	require.NotContains(t, first.Header, "Content-Type", "first answer")
	again, _ := postUntilDecided(t, gw, "/orders", "ct-1", "x")
	require.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
	require.NotContains(t, again.Header, "Content-Type", "replay")
	require.EqualValues(t, 1, seen.Load())

	failed, b := postUntilDecided(t, gw, "/fail", "ct-2", "x")
	require.Equal(t, http.StatusInternalServerError, failed.StatusCode)
	require.Equal(t, "upstream failed", string(b))
	require.NotContains(t, failed.Header, "Content-Type", "5xx passed through")

	// The upstream's own type still goes through, first and replayed.
	typed, _ := postUntilDecided(t, gw, "/typed", "ct-3", "x")
	require.Equal(t, "application/json", typed.Header.Get("Content-Type"))
	again, _ = postUntilDecided(t, gw, "/typed", "ct-3", "x")
	require.Equal(t, "application/json", again.Header.Get("Content-Type"))
	require.Equal(t, []string{"application/json"}, again.Header.Values("Content-Type"))
}

// TestIdempotencyProxyRequireMatchesSegments: --require "POST /orders"
// covers /orders and /orders/42 however spelt (//orders, /x/../orders),
// not /ordersX.
func TestIdempotencyProxyRequireMatchesSegments(t *testing.T) {
	var routes routeList
	require.NoError(t, routes.Set("POST /orders/"))
	for p, want := range map[string]bool{
		"/orders": true, "/orders/42": true, "//orders": true, "/x/../orders": true, "/orders/./": true,
		"/ordersX": false, "/order": false, "/": false,
	} {
		req := httptest.NewRequest(http.MethodPost, "http://gw", nil)
		req.URL.Path = p
		require.Equal(t, want, routes[0].matches(req), p)
	}
}

// TestIdempotencyProxyTwoKeysRefused: two Idempotency-Key headers are 400
// and nothing reaches the upstream.
func TestIdempotencyProxyTwoKeysRefused(t *testing.T) {
	gw, seen := gatewayFor(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), 30*time.Second)
	req, err := http.NewRequest(http.MethodPost, gw.URL+"/orders", strings.NewReader("x"))
	require.NoError(t, err)
	req.Header.Add(client.HeaderIdempotencyKey, "a")
	req.Header.Add(client.HeaderIdempotencyKey, "b")
	resp, err := gw.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Zero(t, seen.Load())
}

// TestIdempotencyProxyRefusesAmbiguousKeys: the gateway refuses with 400,
// before the upstream, what would name another request's record: an
// Idempotency-Key that is not valid UTF-8 (JSON carried "café-7" and
// "cafè-7" in Latin-1 as one key, and the second request got the first
// one's answer), and with --namespace-header a request whose namespace
// header is missing, repeated (a proxy that appends would let a client
// choose another user's namespace) or not valid UTF-8. Two users' equal
// keys stay apart.
func TestIdempotencyProxyRefusesAmbiguousKeys(t *testing.T) {
	base := daemonURL(t)
	var seen atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := seen.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(r.Header.Get("X-User-Id") + "-" + strconv.Itoa(int(n))))
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	c, err := client.New(base, keyA)
	require.NoError(t, err)
	gw := httptest.NewServer(newIdemProxy(idemProxySettings{upstream: u, lease: 30 * time.Second, nsHeader: "X-User-Id"}, c))
	defer gw.Close()
	send := func(key string, users ...string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, gw.URL+"/orders", strings.NewReader("x"))
		require.NoError(t, err)
		req.Header[client.HeaderIdempotencyKey] = []string{key}
		if len(users) > 0 {
			req.Header["X-User-Id"] = users
		}
		resp, err := gw.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		key   string
		users []string
		msg   string
	}{
		{"caf\xe9-7", []string{"alice"}, "Idempotency-Key: must be valid UTF-8"},
		{"ord-1", nil, "X-User-Id: required with Idempotency-Key"},
		{"ord-1", []string{"alice", "bob"}, "X-User-Id: sent more than once"},
		{"ord-1", []string{"b\xf6b"}, "X-User-Id: must be valid UTF-8"},
		{"ord-1", []string{"", "alice"}, "X-User-Id: sent more than once"},
	} {
		st, body := send(tc.key, tc.users...)
		require.Equal(t, http.StatusBadRequest, st, "%q %q: %s", tc.key, tc.users, body)
		require.Contains(t, body, tc.msg)
	}
	require.Zero(t, seen.Load(), "no refused request reached the upstream")

	st, a1 := send("café-7", "alice")
	require.Equal(t, http.StatusCreated, st)
	st, b1 := send("café-7", "bob")
	require.Equal(t, http.StatusCreated, st)
	require.NotEqual(t, a1, b1, "bob's request is not alice's")
	st, a2 := send("café-7", "alice")
	require.Equal(t, http.StatusCreated, st)
	require.Equal(t, a1, a2, "alice's retry replays her answer")
	require.EqualValues(t, 2, seen.Load())
}

// TestIdempotencyProxyDefaultRetentionFitsTheDaemon: without --retention
// the gateway leaves the retention to the daemon (its default, capped at
// idempotency_max_retention). It used to send 86400 s, which a daemon
// with a smaller cap refused for every keyed request, as a 400 blaming the
// client's Idempotency-Key header.
func TestIdempotencyProxyDefaultRetentionFitsTheDaemon(t *testing.T) {
	base := daemonURL(t, func(c *config.Config) { c.IdempotencyMaxRetention = config.Duration(2 * time.Minute) })
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer upstream.Close()
	t.Setenv("REDLOCKD_API_KEY", keyA)
	s, err := parseIdemProxyArgs([]string{"--url", base, "--upstream", upstream.URL}, io.Discard)
	require.NoError(t, err)
	c, err := client.New(base, keyA)
	require.NoError(t, err)
	gw := httptest.NewServer(newIdemProxy(s, c))
	defer gw.Close()
	resp, body := postUntilDecided(t, gw, "/orders", "ret-1", "x")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)

	// A --retention above the daemon's cap is the gateway's setting, not
	// the client's: 500 naming it.
	s, err = parseIdemProxyArgs([]string{"--url", base, "--upstream", upstream.URL, "--retention", "86400"}, io.Discard)
	require.NoError(t, err)
	gw2 := httptest.NewServer(newIdemProxy(s, c))
	defer gw2.Close()
	resp, body = postUntilDecided(t, gw2, "/orders", "ret-2", "x")
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "the idempotency settings of this service are refused by redlockd: retention: 86400")
}

// TestIdempotencyProxyNamesItsOwnFailures: a Begin refused for the
// service's reasons, not the client's, is answered for what it is and
// reported (OnError "begin"): the daemon refusing the gateway's API key
// is 502, the gateway's account past its rate is 503 with the daemon's
// Retry-After. Both used to be a bare 503 "retry later" with Retry-After 1
// and nothing logged (a break-it pass).
func TestIdempotencyProxyNamesItsOwnFailures(t *testing.T) {
	rate, burst := 0.01, 1
	base := daemonURL(t, func(c *config.Config) {
		c.APIKeys = append(c.APIKeys, config.APIKey{Name: "gw", Key: "gateway-key-0123456789abcdef",
			Limits: config.Limits{Rate: &rate, Burst: &burst}})
	})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	var mu sync.Mutex
	var reported []string
	gateway := func(apiKey string) *httptest.Server {
		c, err := client.New(base, apiKey)
		require.NoError(t, err)
		h := client.Middleware(c, client.MiddlewareOptions{
			Options: []client.IdemOption{client.WithLease(30 * time.Second)},
			OnError: func(op, key string, err error) {
				mu.Lock()
				reported = append(reported, op+" "+key)
				mu.Unlock()
			},
		}, httputil.NewSingleHostReverseProxy(u))
		gw := httptest.NewServer(h)
		t.Cleanup(gw.Close)
		return gw
	}
	post := func(gw *httptest.Server, key string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, gw.URL+"/orders", strings.NewReader("x"))
		require.NoError(t, err)
		req.Header.Set(client.HeaderIdempotencyKey, key)
		resp, err := gw.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	limited := gateway("gateway-key-0123456789abcdef")
	resp, body := post(limited, "k2")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "the first call is within the burst: %s", body)
	resp, body = post(limited, "k3")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Contains(t, body, "past its limits (rate_limited)")
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.Greater(t, ra, 1, "the daemon's Retry-After (about 100 s at 0.01/s), not 1")

	// Last, since the daemon then refuses every key from this source for a
	// while: past its burst of refused keys from one source (20), its
	// answer is 429 too_many_auth_failures, still the API key's fault.
	wrong := gateway("not-the-key-0123456789abcdef")
	for i := range 25 {
		resp, body := post(wrong, "k1")
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, "request %d: %s", i, body)
		require.Contains(t, body, "redlockd refuses this service's API key")
	}

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, reported, 26)
	require.Equal(t, "begin k3", reported[0])
	require.Equal(t, "begin k1", reported[25])
}

// slowedDaemon is a front of the daemon at base that holds every lock
// request whose body holds action for delay before passing it on.
func slowedDaemon(t *testing.T, base, action string, delay time.Duration) *httptest.Server {
	t.Helper()
	target, err := url.Parse(base)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if bytes.Contains(b, []byte(`"action":"`+action+`"`)) {
			time.Sleep(delay)
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front
}

// TestIdempotencyProxyStoresBeforeItAnswers: the client gets the answer
// only once it is stored, whatever its size. A black-box pass: an answer
// above about 4 KB (net/http's buffer) reached the client before its
// store; with the gateway killed then, the record stayed IN_PROGRESS and
// the retry ran the upstream again, whose answer replays from then on,
// not the one the client had.
func TestIdempotencyProxyStoresBeforeItAnswers(t *testing.T) {
	base := daemonURL(t)
	front := slowedDaemon(t, base, "idem_complete", time.Second)
	for _, size := range []int{10, 100 << 10} {
		body := strings.Repeat("a", size)
		upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, body)
		}))
		u, err := url.Parse(upstream.URL)
		require.NoError(t, err)
		c, err := client.New(front.URL, keyA)
		require.NoError(t, err)
		gw := httptest.NewServer(newIdemProxy(idemProxySettings{upstream: u, lease: 30 * time.Second, retention: time.Hour}, c))
		key := fmt.Sprintf("store-first-%d-%d", size, time.Now().UnixNano())
		req, err := http.NewRequest(http.MethodPost, gw.URL+"/orders", strings.NewReader("x"))
		require.NoError(t, err)
		req.Header.Set(client.HeaderIdempotencyKey, key)
		resp, err := gw.Client().Do(req)
		require.NoError(t, err)
		// The answer's head has arrived: the record is stored by now.
		_, env, _ := post(t, lockURL(base), keyA, `{"action":"idem_get","key":"`+key+`"}`)
		assert.Equal(t, "COMPLETED", env.Data["state"], "%d-byte answer: the record when the client got it", size)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Len(t, got, size)
		gw.Close()
		upstream.Close()
	}
}

// TestIdempotencyProxyKeepsTheUpstreamCallPastALostLease: the upstream
// call goes on when the attempt's lease is lost (its extends reach the
// daemon only after it ended), and its answer is passed on and stored. A
// black-box pass: the gateway cancelled the call and answered an empty 502
// the moment the lease was lost, and the retry ran the upstream again.
func TestIdempotencyProxyKeepsTheUpstreamCallPastALostLease(t *testing.T) {
	base := daemonURL(t)
	front := slowedDaemon(t, base, "idem_extend", 1500*time.Millisecond)
	var seen atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		time.Sleep(3 * time.Second)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	c, err := client.New(front.URL, keyA)
	require.NoError(t, err)
	gw := httptest.NewServer(newIdemProxy(idemProxySettings{upstream: u, lease: time.Second, retention: time.Hour}, c))
	defer gw.Close()
	key := fmt.Sprintf("lost-lease-%d", time.Now().UnixNano())
	resp, body := postUntilDecided(t, gw, "/orders", key, "x")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	require.Equal(t, "done", string(body))
	again, body := postUntilDecided(t, gw, "/orders", key, "x")
	require.Equal(t, http.StatusCreated, again.StatusCode, "%s", body)
	require.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
	require.EqualValues(t, 1, seen.Load(), "the upstream ran once")
}

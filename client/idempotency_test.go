package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/testdaemon"
)

// TestIdempotentRunsOnce: overlapping and later calls of one key run fn
// once; the others get ErrInProgress or the stored answer; another
// fingerprint gets ErrFingerprintMismatch. Real daemon, real masters.
func TestIdempotentRunsOnce(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()
	fp := client.Fingerprint([]byte(`{"order":"o-9","amount":100}`))
	var runs atomic.Int32
	release := make(chan struct{})
	fn := func(ctx context.Context, a client.Attempt) (client.Answer, error) {
		runs.Add(1)
		<-release
		return client.Answer{Status: 201, Headers: map[string]string{"Content-Type": "text/plain"}, Body: []byte("charged " + strconv.FormatInt(a.Fence, 10))}, nil
	}
	var first client.Answer
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		first, err = c.Idempotent(ctx, "pay-cb-1", fp, fn)
		assert.NoError(t, err)
	})
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	for range 3 {
		_, err := c.Idempotent(ctx, "pay-cb-1", fp, fn)
		require.ErrorIs(t, err, client.ErrInProgress)
		var e *client.Error
		require.ErrorAs(t, err, &e)
		require.Positive(t, e.RetryAfter)
	}
	close(release)
	wg.Wait()
	for range 3 {
		got, err := c.Idempotent(ctx, "pay-cb-1", fp, fn)
		require.NoError(t, err)
		require.Equal(t, first, got)
	}
	require.EqualValues(t, 1, runs.Load())
	_, err := c.Idempotent(ctx, "pay-cb-1", client.Fingerprint([]byte(`{"amount":200}`)), fn)
	require.ErrorIs(t, err, client.ErrFingerprintMismatch)
	require.EqualValues(t, 1, runs.Load())

	// An error from fn aborts: the next call runs fn again.
	boom := errors.New("card declined, retryable")
	_, err = c.Idempotent(ctx, "pay-cb-2", fp, func(context.Context, client.Attempt) (client.Answer, error) { return client.Answer{}, boom })
	require.ErrorIs(t, err, boom)
	got, err := c.Idempotent(ctx, "pay-cb-2", fp, func(context.Context, client.Attempt) (client.Answer, error) {
		return client.Answer{Status: 200, Body: []byte("ok")}, nil
	})
	require.NoError(t, err)
	require.Equal(t, []byte("ok"), got.Body)

	// A panic in fn aborts too, and goes on: the next call runs fn at
	// once, not after the lease (found by a black-box pass).
	func() {
		defer func() { assert.Equal(t, "panic in fn", recover()) }()
		_, _ = c.Idempotent(ctx, "pay-cb-3", fp, func(context.Context, client.Attempt) (client.Answer, error) { panic("panic in fn") })
	}()
	got, err = c.Idempotent(ctx, "pay-cb-3", fp, func(context.Context, client.Attempt) (client.Answer, error) {
		return client.Answer{Status: 200, Body: []byte("after the panic")}, nil
	})
	require.NoError(t, err, "not in progress")
	require.Equal(t, []byte("after the panic"), got.Body)
}

// TestMiddlewareReplays: a retried POST through the middleware gets the
// first answer byte for byte, and the handler ran once with the fence.
func TestMiddlewareReplays(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	var runs atomic.Int32
	var fences []string
	var mu sync.Mutex
	h := client.Middleware(c, client.MiddlewareOptions{Require: func(*http.Request) bool { return true }}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		a, ok := client.AttemptFrom(r.Context())
		assert.True(t, ok)
		mu.Lock()
		fences = append(fences, r.Header.Get(client.HeaderIdempotencyFence))
		mu.Unlock()
		assert.Equal(t, strconv.FormatInt(a.Fence, 10), r.Header.Get(client.HeaderIdempotencyFence))
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":1,"run":` + strconv.Itoa(int(n)) + `,"echo":"` + string(b) + `"}`))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(key, body string) (*http.Response, []byte) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set(client.HeaderIdempotencyKey, key)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	resp1, body1 := post("order-req-1", "qty=1")
	require.Equal(t, http.StatusCreated, resp1.StatusCode)
	for range 3 {
		resp, body := post("order-req-1", "qty=1")
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.True(t, bytes.Equal(body1, body), "%s != %s", body1, body)
		require.Equal(t, "/orders/1", resp.Header.Get("Location"))
		require.Equal(t, "true", resp.Header.Get(client.HeaderIdempotentReplayed))
	}
	resp, _ := post("order-req-1", "qty=2")
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	resp, _ = post("", "qty=1")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.EqualValues(t, 1, runs.Load())
	require.Len(t, fences, 1)
	require.NotEqual(t, "", fences[0])
}

// TestMiddlewareTooLargeAnswerIsStoredWithoutItsBody: an answer above the
// daemon's limit is stored without its body, and OnError is told so
// ("complete-without-body"), not that the answer was lost (a helper saw
// the gateway log "not stored; a retry after the lease is a take-over"
// for an answer it had stored). The retry replays the status and says
// the body was left out.
func TestMiddlewareTooLargeAnswerIsStoredWithoutItsBody(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	var mu sync.Mutex
	var ops []string
	var runs atomic.Int32
	body := bytes.Repeat([]byte("x"), 200<<10) // above the daemon's 64 KiB
	h := client.Middleware(c, client.MiddlewareOptions{
		MaxAnswerBytes: 1 << 20,
		OnError: func(op, key string, err error) {
			mu.Lock()
			ops = append(ops, op)
			mu.Unlock()
		},
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func() *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/reports", strings.NewReader("r"))
		require.NoError(t, err)
		req.Header.Set(client.HeaderIdempotencyKey, "big-1")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, http.StatusCreated, post().StatusCode)
	again := post()
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, strconv.Itoa(len(body)), again.Header.Get(client.HeaderIdempotentBodyOmitted))
	require.EqualValues(t, 1, runs.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"complete-without-body"}, ops)
}

// TestMiddlewareReplaysEveryLineOfAListHeader: an answer with several
// Link and Cache-Control lines replays all of them (as one comma-separated
// value each: the same meaning, RFC 9110 section 5.3); a record keeps one
// value per name, and kept only the first line (a black-box pass: 1 of 20
// Link lines replayed). Of a one-value header sent twice, the first.
func TestMiddlewareReplaysEveryLineOfAListHeader(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	var runs atomic.Int32
	links := []string{`</a>; rel="next"`, `</b>; rel="prev"`, `</c>; rel="last"`}
	h := client.Middleware(c, client.MiddlewareOptions{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		for _, l := range links {
			w.Header().Add("Link", l)
		}
		w.Header().Add("Cache-Control", "no-store")
		w.Header().Add("Cache-Control", "private")
		w.Header().Add("Location", "/orders/1")
		w.Header().Add("Location", "/orders/2")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("ok"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func() *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("q"))
		require.NoError(t, err)
		req.Header.Set(client.HeaderIdempotencyKey, "links-1")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, http.StatusCreated, post().StatusCode)
	again := post()
	require.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
	assert.Equal(t, strings.Join(links, ", "), strings.Join(again.Header.Values("Link"), ", "))
	assert.Equal(t, "no-store, private", strings.Join(again.Header.Values("Cache-Control"), ", "))
	assert.Equal(t, []string{"/orders/1"}, again.Header.Values("Location"))
	require.EqualValues(t, 1, runs.Load())
}

// TestMiddlewareReplayAddsNoContentType: an answer the handler wrote
// without a Content-Type (and kept net/http from sniffing one) is replayed
// without one; net/http sniffed "text/plain; charset=utf-8" for the replay
// (a black-box pass, through the gateway).
func TestMiddlewareReplayAddsNoContentType(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	var runs atomic.Int32
	h := client.Middleware(c, client.MiddlewareOptions{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header()["Content-Type"] = nil
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("created"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func() *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("q"))
		require.NoError(t, err)
		req.Header.Set(client.HeaderIdempotencyKey, "no-type-1")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	first := post()
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.NotContains(t, first.Header, "Content-Type")
	again := post()
	require.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
	require.NotContains(t, again.Header, "Content-Type")
	require.EqualValues(t, 1, runs.Load())
}

// TestMiddlewareHeadersAboveTheCapAreLeftOut: an answer whose kept
// headers alone are above the cap (a 70 KB Link) is stored without its
// body and without the headers that do not fit, named in
// Idempotent-Headers-Omitted, with the gateway's cap at the daemon's
// (64 KiB) and above it (1 MiB: the daemon refuses, and the gateway
// stores a smaller answer). The daemon refused the whole answer, it was
// not stored, and the upstream ran again at every retry after the lease
// (a black-box pass).
func TestMiddlewareHeadersAboveTheCapAreLeftOut(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	for _, maxBytes := range []int{0, 1 << 20} {
		t.Run(fmt.Sprintf("MaxAnswerBytes=%d", maxBytes), func(t *testing.T) {
			var runs atomic.Int32
			var ops []string
			var mu sync.Mutex
			big := `</` + strings.Repeat("x", 70_000) + `>; rel="next"`
			h := client.Middleware(c, client.MiddlewareOptions{
				MaxAnswerBytes: maxBytes,
				OnError: func(op, key string, err error) {
					mu.Lock()
					ops = append(ops, op)
					mu.Unlock()
				},
			}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.Header().Set("Link", big)
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write([]byte("done"))
			}))
			srv := httptest.NewServer(h)
			defer srv.Close()
			key := fmt.Sprintf("bighdr-%d", maxBytes)
			post := func() *http.Response {
				req, err := http.NewRequest(http.MethodPost, srv.URL+"/reports", strings.NewReader("r"))
				require.NoError(t, err)
				req.Header.Set(client.HeaderIdempotencyKey, key)
				resp, err := srv.Client().Do(req)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp
			}
			first := post()
			require.Equal(t, http.StatusOK, first.StatusCode)
			assert.Equal(t, big, first.Header.Get("Link"), "the first answer is the upstream's, whole")
			again := post()
			require.Equal(t, http.StatusOK, again.StatusCode)
			assert.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
			assert.Equal(t, "Link", again.Header.Get(client.HeaderIdempotentHeadersOmitted))
			assert.Equal(t, "4", again.Header.Get(client.HeaderIdempotentBodyOmitted))
			assert.Equal(t, "text/plain", again.Header.Get("Content-Type"))
			assert.Empty(t, again.Header.Get("Link"))
			require.EqualValues(t, 1, runs.Load(), "the upstream ran once")
			mu.Lock()
			defer mu.Unlock()
			if maxBytes > 64<<10 {
				assert.Equal(t, []string{"complete-without-body"}, ops)
			} else {
				assert.Empty(t, ops)
			}
		})
	}
}

// TestNilAttemptIsInvalid: Complete, Abort and ExtendAttempt of a nil
// Attempt answer ErrInvalid, as every other bad argument does, instead of
// panicking (a black-box pass: Abort(ctx, nil) panicked).
func TestNilAttemptIsInvalid(t *testing.T) {
	c, err := client.New("http://127.0.0.1:1", "key-0123456789abcdef")
	require.NoError(t, err)
	ctx := context.Background()
	require.ErrorIs(t, c.Complete(ctx, nil, client.Answer{Status: 200}), client.ErrInvalid)
	require.ErrorIs(t, c.Abort(ctx, nil), client.ErrInvalid)
	require.ErrorIs(t, c.ExtendAttempt(ctx, nil, time.Second), client.ErrInvalid)
}

// daemonFront is a proxy in front of the daemon at base that asks do, for
// each idempotency request, what to do with it: "" passes it on, "drop"
// closes the connection without an answer, "503" answers 503.
func daemonFront(t *testing.T, base string, do func(action string) string) string {
	t.Helper()
	target, err := url.Parse(base)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		var head struct {
			Action string `json:"action"`
		}
		_ = json.Unmarshal(b, &head)
		switch do(head.Action) {
		case "drop":
			conn, _, err := http.NewResponseController(w).Hijack()
			require.NoError(t, err)
			_ = conn.Close()
			return
		case "503":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"ret":"error","code":"quorum_unavailable","data":{},"msg":"test front","remain_quota":-1}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front.URL
}

// clientOf is newClient for a daemon (or a front of one) at url.
func clientOf(t *testing.T, url string) *client.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(url, testdaemon.APIKey, client.WithHTTPClient(&http.Client{Transport: tr}))
	require.NoError(t, err)
	return c
}

// opLog records the ops a MiddlewareOptions.OnError is told of.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) record(op, _ string, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, op)
}

func (l *opLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// postKeyed sends a keyed POST to srv and returns the answer and body.
func postKeyed(t *testing.T, srv *httptest.Server, key string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("x"))
	require.NoError(t, err)
	req.Header.Set(client.HeaderIdempotencyKey, key)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// TestMiddlewareRetriesACompleteThatGotNoAnswer: a Complete that got no
// answer (the daemon restarting) is sent again, and the client gets the
// answer only once it is stored. A black-box pass: a daemon killed and
// restarted within the lease refused the Complete's connection, the
// answer went out unstored, and the upstream ran again as a take-over.
func TestMiddlewareRetriesACompleteThatGotNoAnswer(t *testing.T) {
	d := startDaemon(t)
	var completes atomic.Int32
	front := daemonFront(t, d.URL, func(action string) string {
		if action == "idem_complete" && completes.Add(1) == 1 {
			return "drop"
		}
		return ""
	})
	c := clientOf(t, front)
	var ops opLog
	var runs atomic.Int32
	srv := httptest.NewServer(client.Middleware(c, client.MiddlewareOptions{OnError: ops.record}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	})))
	defer srv.Close()
	resp, body := postKeyed(t, srv, "complete-no-answer")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "done", string(body))
	again, body := postKeyed(t, srv, "complete-no-answer")
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, "done", string(body))
	require.Equal(t, "true", again.Header.Get(client.HeaderIdempotentReplayed))
	require.EqualValues(t, 1, runs.Load())
	require.GreaterOrEqual(t, completes.Load(), int32(2), "the Complete was sent again")
	require.Empty(t, ops.list())
}

// TestMiddlewarePassesOnAnAnswerDeclaredTooLargeToHold: an answer whose
// Content-Length is above MaxHeldAnswerBytes is passed on from its first
// byte (a black-box pass: the first 32 MiB of a trickled 40 MB answer were
// held first), and still stored.
func TestMiddlewarePassesOnAnAnswerDeclaredTooLargeToHold(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	proceed := make(chan struct{})
	var ops opLog
	srv := httptest.NewServer(client.Middleware(c, client.MiddlewareOptions{MaxHeldAnswerBytes: 1000, OnError: ops.record}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3000")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, strings.Repeat("a", 1000))
		_ = http.NewResponseController(w).Flush()
		<-proceed
		_, _ = io.WriteString(w, strings.Repeat("b", 2000))
	})))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader("x"))
	require.NoError(t, err)
	req.Header.Set(client.HeaderIdempotencyKey, "declared-large")
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		got <- result{resp, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		close(proceed)
		t.Fatal("the answer's head was held back: its Content-Length says it is too large to hold")
	}
	close(proceed)
	require.NoError(t, r.err)
	body, err := io.ReadAll(r.resp.Body)
	r.resp.Body.Close()
	require.NoError(t, err)
	require.Len(t, body, 3000)
	again, replayed := postKeyed(t, srv, "declared-large")
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, body, replayed)
	require.Equal(t, []string{"answer-sent-before-store"}, ops.list())
}

// TestMiddlewareReportsALeaseLostToFailedExtends: extends that fail (here
// 503, as with a quorum of masters paused) until the lease's validity is
// over lose the lease: it is reported (op "lease") and, by default, the
// handler's context ends. A black-box pass: masters paused past the lease
// lost it with nothing logged.
func TestMiddlewareReportsALeaseLostToFailedExtends(t *testing.T) {
	d := startDaemon(t)
	front := daemonFront(t, d.URL, func(action string) string {
		if action == "idem_extend" {
			return "503"
		}
		return ""
	})
	c := clientOf(t, front)
	var ops opLog
	var cancelled atomic.Bool
	srv := httptest.NewServer(client.Middleware(c, client.MiddlewareOptions{Options: []client.IdemOption{client.WithLease(time.Second)}, OnError: ops.record}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cancelled.Store(true)
		case <-time.After(8 * time.Second):
		}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	postKeyed(t, srv, "lease-lost")
	assert.True(t, cancelled.Load(), "the handler's context did not end with the lease")
	require.Contains(t, ops.list(), "lease")
}

package client_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
)

// TestWaitStoppedAtOnceIsNotABusyLoop: a daemon that answers every
// waiting acquire at once with wait_stopped (one that closed its waits a
// moment before each request reached it) gets the acquire again at most
// every 100 ms, each for what is left of the wait, and Acquire returns
// "held" when the wait is over. The daemon's side of wait_stopped is
// tested on the real daemon (cmd/redlockd TestShutdownAnswersWaiters,
// TestLockRunWaitsAcrossADaemonRestart); this stub only answers the
// documented shape, to drive the client's pacing.
func TestWaitStoppedAtOnceIsNotABusyLoop(t *testing.T) {
	srv, sent := waitStub(t, func(int, http.ResponseWriter) bool { return false })
	defer srv.Close()
	c, err := client.New(srv.URL, "0123456789abcdef0123")
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Acquire(context.Background(), "k", 10*time.Second, client.WithWait(time.Second))
	took := time.Since(start)
	require.ErrorIs(t, err, client.ErrLockHeld)
	assert.Contains(t, err.Error(), "shutting down")
	waits := sent()
	assert.GreaterOrEqual(t, took, 900*time.Millisecond, "it waits out its wait")
	assert.LessOrEqual(t, len(waits), 12, "sent %d times in %v: at most every 100 ms", len(waits), took)
	require.GreaterOrEqual(t, len(waits), 2, "sent again after wait_stopped")
	assert.Equal(t, int64(1000), waits[0])
	for i := 1; i < len(waits); i++ {
		assert.Less(t, waits[i], waits[i-1], "each resend asks for what is left of the wait: %v", waits)
	}
}

// TestWaitStoppedResendEndsWithTheWait: the resend after wait_stopped asks
// for what is left of the wait counted from before the first request —
// not a whole wait again from the answer — and a resend whose connection
// is reset with no answer (a listener closing as it connected) is tried
// again, not returned as unavailable while the wait lasts.
func TestWaitStoppedResendEndsWithTheWait(t *testing.T) {
	srv, sent := waitStub(t, func(n int, w http.ResponseWriter) bool {
		switch n {
		case 1: // the wait, cut short by a shutdown after 600 ms
			time.Sleep(600 * time.Millisecond)
			return false
		case 2: // no answer: the connection is reset
			conn, _, err := w.(http.Hijacker).Hijack()
			require.NoError(t, err)
			_ = conn.(*net.TCPConn).SetLinger(0)
			_ = conn.Close()
		default:
			_, _ = w.Write([]byte(`{"ret":"ok","data":{"action":"acquire","key":"k","acquired":true,"token":"0123456789abcdef0123456789abcdef","ttl":10,"fence":7,"validity_ms":9000,"elapsed_ms":1},"msg":"","remain_quota":-1}`))
		}
		return true
	})
	defer srv.Close()
	c, err := client.New(srv.URL, "0123456789abcdef0123")
	require.NoError(t, err)
	l, err := c.Acquire(context.Background(), "k", 10*time.Second, client.WithWait(time.Second))
	require.NoError(t, err, "granted on the third request")
	assert.Equal(t, int64(7), l.Fence())
	waits := sent()
	require.Len(t, waits, 3)
	assert.Equal(t, int64(1000), waits[0])
	assert.LessOrEqual(t, waits[1], int64(400), "what is left of the 1 s wait after the 600 ms answer: %v", waits)
	assert.Less(t, waits[2], waits[1], "%v", waits)
}

// waitStub is an HTTP server that records each acquire's wait_ms and
// hands the request (numbered from 1) to answer; when answer returns
// false, it answers acquired:false with wait_stopped, as a daemon
// shutting down does. sent returns the wait_ms values so far.
func waitStub(t *testing.T, answer func(n int, w http.ResponseWriter) bool) (srv *httptest.Server, sent func() []int64) {
	var mu sync.Mutex
	var waits []int64
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			WaitMS int64 `json:"wait_ms"`
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		mu.Lock()
		waits = append(waits, req.WaitMS)
		n := len(waits)
		mu.Unlock()
		if answer(n, w) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close")
		_, _ = w.Write([]byte(`{"ret":"ok","data":{"action":"acquire","key":"k","acquired":false,"retry_after":1,"wait_stopped":true},"msg":"lock is held by another owner; this daemon is shutting down, so the wait ended before wait_ms: retry, on another replica","remain_quota":-1}`))
	}))
	return srv, func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(waits)
	}
}

// TestWaitOutlastsADaemonNotYetListening: a waiting acquire sent while no
// daemon listens (started before it, or between a restart's two
// processes) is sent again every 100 ms for what is left of the wait, and
// is granted by the daemon that comes up; so is one whose first request
// was reset with no answer (a daemon killed with it in hand). Found by a
// helper: both gave up at once (exit 69) with most of the wait left.
// Without a wait, nothing is retried.
func TestWaitOutlastsADaemonNotYetListening(t *testing.T) {
	granted := `{"ret":"ok","data":{"action":"acquire","key":"k","acquired":true,"token":"0123456789abcdef0123456789abcdef","ttl":10,"fence":9,"validity_ms":9000,"elapsed_ms":1},"msg":"","remain_quota":-1}`
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nobody listens there for now
	c, err := client.New("http://"+addr, "0123456789abcdef0123")
	require.NoError(t, err)

	_, err = c.Acquire(context.Background(), "k", 10*time.Second)
	require.ErrorIs(t, err, client.ErrUnavailable, "no wait: no retry")

	var mu sync.Mutex
	var waits []int64
	go func() {
		time.Sleep(400 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if !assert.NoError(t, err) {
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				WaitMS int64 `json:"wait_ms"`
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			mu.Lock()
			waits = append(waits, req.WaitMS)
			n := len(waits)
			mu.Unlock()
			if n == 1 { // killed with the request in hand: reset, no answer
				conn, _, _ := w.(http.Hijacker).Hijack()
				_ = conn.(*net.TCPConn).SetLinger(0)
				_ = conn.Close()
				return
			}
			_, _ = w.Write([]byte(granted))
		})}
		t.Cleanup(func() { _ = srv.Close() })
		_ = srv.Serve(l)
	}()
	start := time.Now()
	l, err := c.Acquire(context.Background(), "k", 10*time.Second, client.WithWait(3*time.Second))
	require.NoError(t, err, "granted by the daemon that came up")
	assert.Equal(t, int64(9), l.Fence())
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, waits, 2, "the reset request, then the grant")
	assert.Less(t, waits[0], int64(2700), "what was left of the 3 s wait: %v", waits)
	assert.Less(t, waits[1], waits[0], "%v", waits)
}

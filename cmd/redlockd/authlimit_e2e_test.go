package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redlockd/redlockd/config"
)

// setCalls sums INFO commandstats' SET calls over the running masters
// (Redis counts the calls a script makes): an acquire's vote runs SET NX,
// while an idle daemon's background scripts (health probes, the max TTL
// and placement registries: ZADD, GET, MGET) run none. EVALSHA counts
// moved with the placement registry every health interval.
func setCalls(t *testing.T) int64 {
	t.Helper()
	var n int64
	for _, s := range servers {
		if !s.Running() {
			continue
		}
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		info, err := r.Info(context.Background(), "commandstats").Result()
		r.Close()
		require.NoError(t, err)
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_set:calls="); ok {
				v, _, _ := strings.Cut(rest, ",")
				c, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				n += c
			}
		}
	}
	return n
}

// metricValue reads one sample of base's /metrics, 0 when absent.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := httpClient.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// 10,000 requests with bad API keys from one source: the first
// auth_failure_burst (and what refills meanwhile) get 401, the rest 429
// with Retry-After, none reaches a master (EVALSHA counts on the real
// masters unchanged), each is counted by reason, and the log gets at most
// a few lines a second. A valid key from another address still works
// (and does reach the masters: the count can move).
func TestAuthFailuresLimitedPerSource(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	const burst, perMinute = 20, 1 // a token a minute: none comes back during the test
	base := ""
	base, _ = startDaemonLog(t, zap.New(core), func(c *config.Config) {
		c.AuthFailureBurst, c.AuthFailuresPerMinute = burst, perMinute
		// No account limits: their sync with the masters runs EVALSHA in
		// the background, which would hide what this test counts.
		noCap := 0
		c.AccountDefaults.MaxLocks = &noCap
	})
	before := setCalls(t)

	const total, conns = 10000, 8
	var mu sync.Mutex
	statuses := map[int]int{}
	retryAfter := ""
	start := time.Now()
	var wg sync.WaitGroup
	for c := range conns {
		wg.Go(func() {
			cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
			defer cl.CloseIdleConnections()
			for i := c; i < total; i += conns {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/lock", strings.NewReader(`{"key":"authfail"}`))
				req.Header.Set("X-API-Key", fmt.Sprintf("bad-key-%06d-0123456789", i))
				resp, err := cl.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				if resp.StatusCode == http.StatusTooManyRequests && retryAfter == "" {
					retryAfter = resp.Header.Get("Retry-After")
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d bad keys in %v: %v", total, elapsed, statuses)

	refilled := int(elapsed.Seconds()*perMinute/60) + 1
	assert.GreaterOrEqual(t, statuses[http.StatusUnauthorized], burst)
	assert.LessOrEqual(t, statuses[http.StatusUnauthorized], burst+refilled, "401s beyond the burst and its refill")
	assert.Equal(t, total, statuses[http.StatusUnauthorized]+statuses[http.StatusTooManyRequests], "only 401 and 429")
	ra, err := strconv.Atoi(retryAfter)
	require.NoError(t, err, "Retry-After %q", retryAfter)
	assert.GreaterOrEqual(t, ra, 1)
	assert.Equal(t, before, setCalls(t), "a bad key reached the masters")

	assert.Equal(t, float64(statuses[http.StatusUnauthorized]), metricValue(t, base, `redlockd_auth_failures_total{reason="unknown_key"}`))
	assert.Equal(t, float64(statuses[http.StatusTooManyRequests]), metricValue(t, base, `redlockd_auth_failures_total{reason="source_limited"}`))
	assert.Equal(t, float64(statuses[http.StatusTooManyRequests]), metricValue(t, base, `redlockd_requests_total{action="unknown",result="auth_limited"}`))

	lines := logs.FilterMessage("authentication failed").Len()
	assert.Positive(t, lines)
	assert.LessOrEqual(t, lines, 5*(int(elapsed.Seconds())+2), "failed authentications are logged at a bounded rate")
	for _, e := range logs.All() {
		assert.NotContains(t, fmt.Sprint(e.ContextMap()), "bad-key-", "a key in a log line")
	}

	// The limited source is refused whatever key it sends …
	st, env, h := post(t, lockURL(base), keyA, `{"key":"authfail-good"}`)
	assert.Equal(t, http.StatusTooManyRequests, st)
	assert.Equal(t, "too_many_auth_failures", env.Code)
	assert.NotEmpty(t, h.Get("Retry-After"))
	// … and `redlockd lock` from it exits 64, an authentication problem
	// as the 401s before it, not 77, an account limit to retry.
	code, _, errOut := runLock(t, base, "acquire", "--key", "authfail-cli")
	assert.Equal(t, 64, code, errOut)
	assert.Contains(t, errOut, "HTTP 429 too_many_auth_failures")
	// … while another source with a valid key is served, by the masters.
	other := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)},
	}).DialContext}}
	req, err := http.NewRequest(http.MethodPost, lockURL(base), strings.NewReader(`{"key":"authfail-good"}`))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", keyA)
	resp, err := other.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	assert.Contains(t, string(raw), `"acquired":true`)
	assert.Greater(t, setCalls(t), before, "the valid request reached the masters")
}

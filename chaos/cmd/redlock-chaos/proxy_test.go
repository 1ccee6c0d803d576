package main

// `redlock-chaos proxy` as the drill overlay runs it: real TCP, a real
// redis-server behind it, faults switched over its control API with the
// client DockerTarget uses.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/chaos"
	"github.com/redlockd/redlockd/internal/redisproc"
)

func TestProxyFlags(t *testing.T) {
	cases := []struct {
		args []string
		want []string // every one must appear in the error
	}{
		{nil, []string{"--upstream is required", "--listen is required", "--control is required"}},
		{[]string{"--upstream", "redis1", "--listen", ":6379", "--control", ":7000"}, []string{`--upstream "redis1": want host:port`}},
		{[]string{"--upstream", ":6379", "--listen", ":6379", "--control", ":7000"}, []string{`--upstream ":6379": the host is missing`}},
		{[]string{"--upstream", "redis1:0", "--listen", ":6379", "--control", ":7000"}, []string{`--upstream "redis1:0": port "0": want a number from 1 to 65535`}},
		{[]string{"--upstream", "redis1:6379", "--listen", ":http", "--control", ":7000"}, []string{`--listen ":http": port "http"`}},
		{[]string{"--upstream", "redis1:6379", "--listen", ":6379", "--listen", "0.0.0.0:6379", "--control", ":6379"}, []string{
			`--listen "0.0.0.0:6379": port 6379 is already taken by --listen ":6379"`,
			`--control ":6379": port 6379 is already taken by --listen ":6379"`,
		}},
		{[]string{"--upstream", "redis1:6379", "--listen", ":6379", "--control", ":70000"}, []string{`--control ":70000": port "70000"`}},
		{[]string{"--upstream", "redis1:6379", "--listen", ":6379", "--control", ":7000", "extra"}, []string{`unexpected argument "extra"`}},
	}
	for _, c := range cases {
		err := run(context.Background(), append([]string{"proxy"}, c.args...), io.Discard, io.Discard)
		require.Error(t, err, "%v", c.args)
		for _, w := range c.want {
			assert.Contains(t, err.Error(), w, "%v", c.args)
		}
	}
	var usage strings.Builder
	err := run(context.Background(), []string{"proxy", "-h"}, io.Discard, &usage)
	assert.ErrorIs(t, err, flag.ErrHelp)
	assert.Contains(t, usage.String(), "POST /latency?d=150ms")
}

// startChaosProxy runs `redlock-chaos proxy` in this process until the
// test ends, and returns a control client and the listeners' addresses.
func startChaosProxy(t *testing.T, upstream string, listeners int) (*chaos.ProxyClient, string, []string) {
	t.Helper()
	args := []string{"proxy", "--upstream", upstream, "--control", "127.0.0.1:0"}
	for range listeners {
		args = append(args, "--listen", "127.0.0.1:0")
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, io.Discard, pw)
		_ = pw.Close()
		done <- err
	}()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			t.Log(sc.Text())
			select {
			case lines <- sc.Text():
			default: // nobody reads past the first line
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err, "the proxy stops cleanly on SIGTERM (context cancelled)")
		case <-time.After(10 * time.Second):
			t.Error("the proxy did not stop")
		}
	})
	var first string
	select {
	case first = <-lines:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy printed nothing")
	}
	m := regexp.MustCompile(`control API on (\S+)$`).FindStringSubmatch(first)
	require.NotNil(t, m, "first line names the control address: %q", first)
	base := "http://" + m[1]
	pc := chaos.NewProxyClient(base, nil)
	st, err := pc.State(context.Background())
	require.NoError(t, err)
	assert.Equal(t, upstream, st.Upstream)
	require.Len(t, st.Listeners, listeners)
	var addrs []string
	for _, l := range st.Listeners {
		assert.Equal(t, healthy(l), l, "no fault at start")
		addrs = append(addrs, l.Addr)
	}
	return pc, base, addrs
}

// healthy is l with no fault in force.
func healthy(l chaos.ProxyState) chaos.ProxyState {
	return chaos.ProxyState{Addr: l.Addr, Latency: "0s", Links: l.Links}
}

// proxyClient is a go-redis client through addr: one connection, no
// retries, so every failure shows.
func proxyClient(t *testing.T, addr string, timeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, PoolSize: 1, MaxRetries: -1, DisableIdentity: true,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func runID(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`run_id:(\w+)`).FindStringSubmatch(info)
	require.NotNil(t, m, "INFO server has a run_id")
	return m[1]
}

func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyFaults(t *testing.T) {
	srv, err := redisproc.Start(redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	pc, _, addrs := startChaosProxy(t, srv.Addr(), 2)
	ctx := context.Background()
	a, b := proxyClient(t, addrs[0], 2*time.Second), proxyClient(t, addrs[1], 2*time.Second)
	require.NoError(t, a.Set(ctx, "k", "v", 0).Err())
	got, err := b.Get(ctx, "k").Result()
	require.NoError(t, err, "both listeners reach the same upstream")
	assert.Equal(t, "v", got)
	st, err := pc.State(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Listeners[0].Links)
	assert.Equal(t, 1, st.Listeners[1].Links)

	t.Run("latency on one listener", func(t *testing.T) {
		require.NoError(t, pc.SetLatency(ctx, 0, 100*time.Millisecond))
		start := time.Now()
		require.NoError(t, a.Ping(ctx).Err())
		assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "both directions delayed")
		start = time.Now()
		require.NoError(t, b.Ping(ctx).Err())
		assert.Less(t, time.Since(start), 200*time.Millisecond, "listener 1 is not slowed")
		st, err := pc.State(ctx)
		require.NoError(t, err)
		assert.Equal(t, "100ms", st.Listeners[0].Latency)
		assert.Equal(t, "0s", st.Listeners[1].Latency)
		require.NoError(t, pc.SetLatency(ctx, chaos.AllListeners, 0))
	})

	t.Run("blackhole", func(t *testing.T) {
		require.NoError(t, pc.SetBlackhole(ctx, chaos.AllListeners, true))
		short := proxyClient(t, addrs[1], 300*time.Millisecond)
		err := short.Ping(ctx).Err()
		assert.True(t, timeout(err), "a blackhole hangs, it does not refuse: %v", err)
		err = a.WithTimeout(300 * time.Millisecond).Ping(ctx).Err()
		assert.True(t, timeout(err), "open connections hang too: %v", err)
		st, err := pc.State(ctx)
		require.NoError(t, err)
		assert.True(t, st.Listeners[0].Blackhole && st.Listeners[1].Blackhole)
		require.NoError(t, pc.Heal(ctx, chaos.AllListeners))
		// go-redis dropped the connections that timed out: new ones work.
		require.NoError(t, short.Ping(ctx).Err())
		require.NoError(t, a.Ping(ctx).Err())
	})

	t.Run("reject one listener", func(t *testing.T) {
		require.NoError(t, pc.SetReject(ctx, 1, true))
		err := b.Ping(ctx).Err()
		require.Error(t, err, "listener 1 resets its connections")
		assert.False(t, timeout(err), "a reject fails at once: %v", err)
		require.Error(t, b.Ping(ctx).Err(), "and every new one")
		require.NoError(t, a.Ping(ctx).Err(), "listener 0 is not cut off")
		require.NoError(t, pc.SetReject(ctx, 1, false))
		require.NoError(t, b.Ping(ctx).Err())
	})

	t.Run("reset once", func(t *testing.T) {
		// A raw connection: go-redis checks a pooled connection before
		// reusing it and would quietly dial a new one.
		raw, err := net.Dial("tcp", addrs[0])
		require.NoError(t, err)
		defer raw.Close()
		r := bufio.NewReader(raw)
		_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = io.WriteString(raw, "PING\r\n")
		require.NoError(t, err)
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "+PONG\r\n", line)
		require.NoError(t, pc.Reset(ctx, chaos.AllListeners))
		_, err = r.ReadString('\n')
		require.Error(t, err, "the open connection was reset")
		assert.False(t, timeout(err), "at once: %v", err)
		require.NoError(t, a.Ping(ctx).Err(), "a new connection works")
	})

	t.Run("upstream restarts empty", func(t *testing.T) {
		before := runID(t, a)
		require.NoError(t, srv.Kill())
		require.Error(t, a.Ping(ctx).Err(), "the upstream is gone: the client's connection ends with it")
		require.Error(t, a.Ping(ctx).Err(), "and a new one is reset: nothing to dial")
		require.NoError(t, srv.Restart())
		// Dialed anew for every connection: the same proxy reaches the
		// new process, and a client sees its new run_id (what makes the
		// daemons quarantine a master that restarted empty).
		after := runID(t, a)
		assert.NotEqual(t, before, after)
		n, err := a.Exists(ctx, "k").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the data went with the old process")
	})
}

func TestProxyControlErrors(t *testing.T) {
	srv, err := redisproc.Start(redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	pc, base, _ := startChaosProxy(t, srv.Addr(), 1)
	ctx := context.Background()
	for _, c := range []struct {
		method, path string
		status       int
		want         string
	}{
		{http.MethodPost, "/blackhole", http.StatusBadRequest, "blackhole: on=true or on=false is required"},
		{http.MethodPost, "/reject?on=maybe", http.StatusBadRequest, `reject: on="maybe": want true or false`},
		{http.MethodPost, "/latency", http.StatusBadRequest, "latency: d is required"},
		{http.MethodPost, "/latency?d=fast", http.StatusBadRequest, `latency: d="fast": want a duration`},
		{http.MethodGet, "/latency?d=1s", http.StatusMethodNotAllowed, "GET /latency: use POST"},
		{http.MethodPost, "/state", http.StatusMethodNotAllowed, ""},
		{http.MethodPost, "/slow", http.StatusNotFound, ""},
	} {
		req, err := http.NewRequest(c.method, base+c.path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, c.status, resp.StatusCode, "%s %s: %s", c.method, c.path, body)
		assert.Contains(t, string(body), c.want, "%s %s", c.method, c.path)
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{pc.SetLatency(ctx, chaos.AllListeners, -time.Second), `d="-1s": want a duration of 0 or more`},
		{pc.SetBlackhole(ctx, 1, true), `listener="1": want 0..0`},
		{pc.Reset(ctx, 7), `listener="7": want 0..0`},
	} {
		require.Error(t, c.err)
		assert.Contains(t, c.err.Error(), "400 Bad Request")
		assert.Contains(t, c.err.Error(), c.want)
	}
	st, err := pc.State(ctx)
	require.NoError(t, err)
	assert.Equal(t, healthy(st.Listeners[0]), st.Listeners[0], "a refused change changes nothing")
}

package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer answers every line with the same line, on loopback.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newTestProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := NewStaticProxy(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *lineConn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &lineConn{c, bufio.NewReader(c)}
}

// roundTrip sends line and returns the answer, or an error after timeout.
func (c *lineConn) roundTrip(line string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	s, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return s[:len(s)-1], nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)
}

func TestProxyPassesThrough(t *testing.T) {
	p := newTestProxy(t)
	c := dial(t, p)
	for _, s := range []string{"PING", "hello world", "x"} {
		got, err := c.roundTrip(s, 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
}

func TestProxyLatency(t *testing.T) {
	p := newTestProxy(t)
	c := dial(t, p)
	_, err := c.roundTrip("warm", 2*time.Second)
	require.NoError(t, err)
	p.SetLatency(100 * time.Millisecond)
	start := time.Now()
	got, err := c.roundTrip("slow", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "slow", got)
	// Both directions are delayed: at least two latencies per round trip.
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	p.SetLatency(0)
	start = time.Now()
	_, err = c.roundTrip("fast", 2*time.Second)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 150*time.Millisecond, "latency removed (generous bound for a loaded machine)")
}

func TestProxyLatencyKeepsOrder(t *testing.T) {
	p := newTestProxy(t)
	c := dial(t, p)
	p.SetLatency(20 * time.Millisecond)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	for i := range 50 {
		_, err := io.WriteString(c, string(rune('a'+i%26))+"\n")
		require.NoError(t, err)
	}
	for i := range 50 {
		s, err := c.r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, string(rune('a'+i%26))+"\n", s, "chunk %d out of order", i)
	}
}

func TestProxyBlackhole(t *testing.T) {
	p := newTestProxy(t)
	c := dial(t, p)
	_, err := c.roundTrip("before", 2*time.Second)
	require.NoError(t, err)
	p.SetBlackhole(true)
	_, err = c.roundTrip("late", 200*time.Millisecond)
	require.Error(t, err)
	assert.True(t, isTimeout(err), "a blackhole hangs instead of failing: %v", err)

	fresh := dial(t, p) // accepted, waits for the blackhole to lift
	_, err = fresh.roundTrip("waiting", 200*time.Millisecond)
	assert.True(t, isTimeout(err), "%v", err)

	p.SetBlackhole(false)
	// What was sent during the blackhole lands now, in order, as TCP
	// retransmissions do once a partition heals.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	got, err := c.r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "late\n", got)
	_ = fresh.SetReadDeadline(time.Now().Add(2 * time.Second))
	got, err = fresh.r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "waiting\n", got)
	got, err = dial(t, p).roundTrip("after", 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "after", got)
}

func TestProxyReject(t *testing.T) {
	p := newTestProxy(t)
	c := dial(t, p)
	_, err := c.roundTrip("before", 2*time.Second)
	require.NoError(t, err)
	p.SetReject(true)
	_, err = c.roundTrip("after reject", 2*time.Second)
	require.Error(t, err)
	assert.True(t, isReset(err), "open connections are reset: %v", err)

	// A new connection is reset either during the dial itself (the RST can
	// beat connect's return on loopback) or on its first round trip.
	fc, err := net.Dial("tcp", p.Addr())
	if err == nil {
		t.Cleanup(func() { fc.Close() })
		_, err = (&lineConn{fc, bufio.NewReader(fc)}).roundTrip("new", 2*time.Second)
	}
	require.Error(t, err)
	assert.True(t, isReset(err), "new connections are reset: %v", err)

	p.SetReject(false)
	got, err := dial(t, p).roundTrip("healed", 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "healed", got)
}

func TestProxyReset(t *testing.T) {
	p := newTestProxy(t)
	c := dial(t, p)
	_, err := c.roundTrip("before", 2*time.Second)
	require.NoError(t, err)
	p.Reset()
	_, err = c.roundTrip("after", 2*time.Second)
	require.Error(t, err)
	assert.True(t, isReset(err), "%v", err)
	got, err := dial(t, p).roundTrip("new", 2*time.Second)
	require.NoError(t, err, "a reset is once: new connections work")
	assert.Equal(t, "new", got)
}

func TestProxyHoldReplies(t *testing.T) {
	p := newTestProxy(t)
	c := dial(t, p)
	p.HoldReplies(true)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err := io.WriteString(c, "one\ntwo\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Held() > 0 }, 2*time.Second, 5*time.Millisecond, "the upstream answered into the hold")
	_ = c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	_, err = c.r.ReadString('\n')
	require.True(t, isTimeout(err), "nothing is delivered while held: %v", err)

	p.HoldReplies(false)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for _, want := range []string{"one\n", "two\n"} {
		got, err := c.r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, want, got, "held replies arrive in order")
	}
	assert.Equal(t, 0, p.Held())
}

func TestProxyUpstreamDown(t *testing.T) {
	p, err := NewStaticProxy("127.0.0.1:1") // tcpmux: nothing listens there
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err == nil { // the reset may also come before Dial returns
		defer c.Close()
		_, err = (&lineConn{c, bufio.NewReader(c)}).roundTrip("x", 3*time.Second)
	}
	require.Error(t, err)
	assert.True(t, isReset(err), "a refused upstream is a reset for the client: %v", err)
}

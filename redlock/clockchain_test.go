package redlock

import (
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// delayProxy is a TCP proxy in front of one master that delays every chunk
// by a settable amount in each direction (request: client to master;
// reply: master to client), keeping the order of the bytes. It models a
// slow or asymmetric network path, within the per-master timeout.
type delayProxy struct {
	ln         net.Listener
	up         string
	req, reply atomic.Int64 // ns
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      []net.Conn
}

func startDelayProxy(t *testing.T, upstream string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &delayProxy{ln: ln, up: upstream}
	p.wg.Go(func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, down, up)
			p.mu.Unlock()
			p.wg.Go(func() { p.pump(up, down, &p.req) })
			p.wg.Go(func() { p.pump(down, up, &p.reply) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) set(req, reply time.Duration) {
	p.req.Store(int64(req))
	p.reply.Store(int64(reply))
}

// pump copies src to dst, each chunk delivered delay after it was read.
func (p *delayProxy) pump(dst, src net.Conn, delay *atomic.Int64) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 4096)
	p.wg.Go(func() {
		defer dst.Close()
		for c := range ch {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d) // the injected latency itself
			}
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	})
	defer close(ch)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(time.Duration(delay.Load()))}
		}
		if err != nil {
			return
		}
	}
}

// skewedBehindProxy is skewedMasters with master 4 (the one whose clock the
// test drives) reached through a delayProxy.
func skewedBehindProxy(t *testing.T) ([]*redis.Options, []*redis.Client, *delayProxy, func(time.Duration) error, func(float64) error) {
	t.Helper()
	opts, rdbs, clock := skewedMasters(t)
	p := startDelayProxy(t, opts[4].Addr)
	opts[4] = &redis.Options{Addr: p.Addr()}
	return opts, rdbs, p, clock.Jump, clock.SetRate
}

// TestFastClockOverASlowLink: master 4's path is slow (30ms each way,
// within the 100ms per-master timeout), so its clock readings are too
// imprecise for the comparison with the other masters, and each reading
// is checked only against the previous one, within their uncertainty
// (60ms). Its clock then runs 25% fast: 25ms per 100ms probe, never a
// "jump" from one reading to the next, while A's key on it (ttl 2s)
// expires ~400ms early. B must not win while A is valid.
func TestFastClockOverASlowLink(t *testing.T) {
	ctx := context.Background()
	opts, rdbs, p, _, setRate := skewedBehindProxy(t)
	const pmt = 100 * time.Millisecond
	c := clockClient(t, opts, WithPerMasterTimeout(pmt), WithHealthInterval(100*time.Millisecond))
	key := "clock:" + t.Name()
	first := placeOnly(t, c, rdbs, key, 2*time.Second, 2, 3, 4)
	p.set(30*time.Millisecond, 30*time.Millisecond)
	require.Eventually(t, func() bool {
		r := c.masters[4].st.lastReading.Load()
		return r != nil && time.Duration(r.uncert) > pmt/8
	}, 5*time.Second, time.Millisecond, "a reading of master 4 through the delay")
	require.NoError(t, setRate(1.25))
	require.Eventually(t, func() bool { return rdbs[4].Exists(ctx, key).Val() == 0 }, 5*time.Second, time.Millisecond)
	_, err := c.Acquire(ctx, key, 2*time.Second, WithRetry(NoRetry()))
	won := time.Now()
	if err == nil {
		assert.False(t, won.Before(first.ValidUntil()), "B won %v before A's validity ended", first.ValidUntil().Sub(won))
	}
	require.Greater(t, first.Validity(), time.Duration(0), "B asked while A was valid")
	require.ErrorIs(t, err, ErrNotObtained)
	assert.False(t, c.Masters()[4].Counting, "master 4 is held out")
}

// TestClockForwardThenBackBetweenReadings: master 4's clock jumps 30s
// forward, A's key there expires, and the clock jumps back before any
// reading of it (probes an hour apart). The offset is where the last
// reading saw it: nothing tells B's vote from a sane one, and B wins
// while A is valid. A known gap (docs/safety.md, "Clock faults": "Not seen"),
// kept as its reproduction: REDLOCK_KNOWN_GAPS=1 runs it, and it fails.
func TestClockForwardThenBackBetweenReadings(t *testing.T) {
	if os.Getenv("REDLOCK_KNOWN_GAPS") == "" {
		t.Skip("known gap (docs/safety.md, Clock faults: a jump forward undone before any reading); REDLOCK_KNOWN_GAPS=1 runs it")
	}
	ctx := context.Background()
	opts, rdbs, clock := skewedMasters(t)
	c := clockClient(t, opts, WithHealthInterval(time.Hour), WithPerMasterTimeout(200*time.Millisecond))
	key := "clock:" + t.Name()
	first := placeOnly(t, c, rdbs, key, 20*time.Second, 2, 3, 4)
	offsetNear := func(want time.Duration) func() bool {
		return func() bool {
			d := time.Until(rdbs[4].Time(ctx).Val()) - want
			return d > -time.Second && d < time.Second
		}
	}
	require.NoError(t, clock.Jump(30*time.Second))
	require.Eventually(t, func() bool { return rdbs[4].Exists(ctx, key).Val() == 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, clock.Jump(-30*time.Second))
	require.Eventually(t, offsetNear(0), 10*time.Second, time.Millisecond)
	_, err := c.Acquire(ctx, key, 20*time.Second, WithRetry(NoRetry()))
	require.Greater(t, first.Validity(), 15*time.Second)
	require.ErrorIs(t, err, ErrNotObtained, "a second holder while A is valid")
}

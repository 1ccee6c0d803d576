package redlock

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// timeDropper is a TCP proxy in front of one master that, while on, drops
// every command that is a bare TIME (the health probe's clock reading, a
// round trip of its own): the probe's TIME times out, as it does when the
// rest of the probe used up the health timeout, while the scripts, which
// read TIME inside Lua, answer.
type timeDropper struct {
	ln  net.Listener
	on  atomic.Bool
	hit atomic.Int64 // TIME commands dropped
}

func newTimeDropper(t *testing.T, upstream string) *timeDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &timeDropper{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				cn.Close()
				continue
			}
			go func() { _, _ = io.Copy(cn, up); cn.Close() }()
			go func() {
				defer up.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := cn.Read(buf)
					if err != nil {
						return
					}
					data := buf[:n]
					if p.on.Load() {
						// Every TIME command in the read, not only a read
						// that is one: under load a read can carry more
						// than one command, and the probe's TIME went
						// through (a run beside the Docker drills).
						var dropped int64
						data, dropped = dropTimeCommands(data)
						p.hit.Add(dropped)
					}
					if len(data) == 0 {
						continue
					}
					if _, err := up.Write(data); err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *timeDropper) addr() string { return p.ln.Addr().String() }

// timeCommand is TIME as go-redis sends it, in lower case.
var timeCommand = []byte("*1\r\n$4\r\ntime\r\n")

// dropTimeCommands returns b without its TIME commands (in any case), and
// how many it dropped.
func dropTimeCommands(b []byte) ([]byte, int64) {
	lower := bytes.ToLower(b)
	var out []byte
	var n int64
	for {
		i := bytes.Index(lower, timeCommand)
		if i < 0 {
			return append(out, b...), n
		}
		out = append(out, b[:i]...)
		b, lower = b[i+len(timeCommand):], lower[i+len(timeCommand):]
		n++
	}
}

// TestRepairMarkerQuarantineWhenTheFirstClockReadFails: master 0 restarts
// empty while a 20s lock stands on masters 0, 1 and 2; the running Client
// repairs it from a quorum, and the repair marker keeps it out until the
// lock has ended. A daemon started then reads that marker in its first
// probe round, but the round's TIME (a round trip of its own after the
// rest of the probe, on the same health timeout) times out. The marker
// rule ran anyway, found no clock reading to convert <until> with and
// applied no quarantine: at the next probe master 0 counted, and the
// daemon granted the key on masters 0, 3 and 4 while the lock stood.
func TestRepairMarkerQuarantineWhenTheFirstClockReadFails(t *testing.T) {
	ctx := context.Background()
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	a := newClient(t, WithMarkerKey(marker), WithMaxTTL(time.Minute), WithHealthInterval(20*time.Millisecond))
	key := newKey(t)
	lock := placeOn(t, a, key, 20*time.Second, 0, 1, 2)
	restartEmpty(t, 0)
	rdbs := direct(t)
	require.Eventually(t, func() bool {
		return !a.masters[0].st.conds.has(condRepairPending) && a.Masters()[0].State == MasterQuarantined
	}, 10*time.Second, 10*time.Millisecond, "the running Client repairs master 0 from a quorum: %v", states(a))
	mk, ok := parseMarker(rdbs[0].Get(ctx, marker).Val())
	require.True(t, ok && mk.repaired && mk.until.After(lock.ValidUntil()), "the repair marker keeps master 0 out until the lock has ended: %+v", mk)

	p := newTimeDropper(t, servers[0].Addr())
	opts := masterOptions()
	opts[0].Addr = p.addr()
	p.on.Store(true)
	b, err := New(opts, WithMarkerKey(marker), WithMaxTTL(time.Minute), WithHealthInterval(20*time.Millisecond), WithPerMasterTimeout(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	p.on.Store(false)
	require.NotZero(t, p.hit.Load(), "the first probe's TIME was dropped")
	require.Eventually(t, func() bool {
		return b.masters[0].st.lastReading.Load() != nil && b.Masters()[4].Counting
	}, 10*time.Second, 10*time.Millisecond, "the daemon reads master 0's clock: %v", states(b))
	b.probeAll()
	b.afterProbes()

	st := b.Masters()[0]
	assert.False(t, st.Counting, "master 0 stays out until its repair marker's <until>: %+v", st)
	assert.True(t, time.Now().Add(st.QuarantineLeft).After(lock.ValidUntil()), "quarantined past the lock's end: %+v", st)
	got, err := b.Acquire(ctx, key, time.Second, WithRetry(NoRetry()))
	if err == nil {
		_ = got.Release(ctx)
	}
	require.Error(t, err, "no second holder while the 20s lock stands (valid for %v more)", time.Until(lock.ValidUntil()))
	require.True(t, time.Now().Before(lock.ValidUntil()))
}

// TestSnapshotRestartSeenWhenTheFirstClockReadFails: the same missed clock
// reading hid a master restarted from an old snapshot (its marker older
// than its start, which the Client derives from that reading) from a
// Client started later: it counted at once.
func TestSnapshotRestartSeenWhenTheFirstClockReadFails(t *testing.T) {
	ctx := context.Background()
	rdbs := direct(t)
	require.Eventually(t, func() bool {
		_, uptime, _, ok := parseInfoServer(rdbs[0].Info(ctx, "server").Val())
		return ok && uptime >= 2*time.Second
	}, 10*time.Second, 50*time.Millisecond)
	marker := "marker:" + newKey(t)
	plantMarker(marker)
	now, err := rdbs[0].Time(ctx).Result()
	require.NoError(t, err)
	_, uptime, _, _ := parseInfoServer(rdbs[0].Info(ctx, "server").Val())
	require.NoError(t, rdbs[0].Set(ctx, marker, fmt.Sprintf("redlockd %d", now.Add(-uptime-time.Hour).UnixMilli()), 0).Err())

	p := newTimeDropper(t, servers[0].Addr())
	opts := masterOptions()
	opts[0].Addr = p.addr()
	p.on.Store(true)
	c, err := New(opts, WithMarkerKey(marker), WithMaxTTL(time.Minute), WithHealthInterval(20*time.Millisecond), WithPerMasterTimeout(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	p.on.Store(false)
	require.NotZero(t, p.hit.Load(), "the first probe's TIME was dropped")
	require.Eventually(t, func() bool {
		return c.masters[0].st.lastReading.Load() != nil && c.Masters()[4].Counting
	}, 10*time.Second, 10*time.Millisecond, "the Client reads master 0's clock: %v", states(c))
	c.probeAll()
	c.afterProbes()
	st := c.Masters()[0]
	assert.False(t, st.Counting, "%+v", st)
	assert.Contains(t, st.QuarantineReason, "data older than its restart")
}

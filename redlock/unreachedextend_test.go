package redlock

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdConn models a master that read nothing more from one connection (a
// pause that hit just after a pipeline reached its socket): a write
// containing every byte string of trigger is accepted and kept, with all
// later writes on the connection, until release(); Close waits for it.
type holdConn struct {
	net.Conn
	mu     sync.Mutex
	held   [][]byte
	hold   bool
	closed bool
	r      *holdDialer
}

type holdDialer struct {
	trigger atomic.Pointer[[][]byte]
	mu      sync.Mutex
	conns   []*holdConn
	caught  atomic.Int32
}

func (d *holdDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	hc := &holdConn{Conn: c, r: d}
	d.mu.Lock()
	d.conns = append(d.conns, hc)
	d.mu.Unlock()
	return hc, nil
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hold {
		if tr := c.r.trigger.Load(); tr != nil {
			all := true
			for _, s := range *tr {
				all = all && bytes.Contains(p, s)
			}
			if all {
				c.hold = true
				c.r.trigger.Store(nil)
				c.r.caught.Add(1)
			}
		}
	}
	if c.hold {
		c.held = append(c.held, bytes.Clone(p))
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *holdConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.closed = true
		return nil
	}
	return c.Conn.Close()
}

// release delivers every held write, in order, then closes the connections
// whose Close was deferred.
func (d *holdDialer) release() {
	d.mu.Lock()
	conns := append([]*holdConn(nil), d.conns...)
	d.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		if c.hold {
			for _, p := range c.held {
				_, _ = c.Conn.Write(p)
			}
			c.held, c.hold = nil, false
			if c.closed {
				time.Sleep(50 * time.Millisecond) // let the master run them
				_ = c.Conn.Close()
			}
		}
		c.mu.Unlock()
	}
}

// holdClient is a Client (100ms per-master timeout, 20ms health
// interval) with master 0 dialled through d.
func holdClient(t *testing.T, d *holdDialer, opts ...Option) *Client {
	t.Helper()
	marker := "marker:" + t.Name() + ":hold"
	plantMarker(marker)
	mo := masterOptions()
	mo[0].Dialer = d.dial
	opts = append([]Option{WithPerMasterTimeout(100 * time.Millisecond), WithHealthInterval(20 * time.Millisecond), WithMarkerKey(marker)}, opts...)
	c, err := New(mo, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { d.release(); _ = c.Close() })
	return c
}

// TestExtendOfSomeKeysForgetsTheSetsRecord: a multi-key lock granted
// while master 0's lane was stuck (recorded: never reached), then extended
// in part — one key by key and token (Client.Extend, as the daemon does
// for a request naming that key), or a subset (ExtendMulti) — or whole.
// The extend's restore writes the keys with the token on master 0 and
// stays in master 0's socket (holdDialer: the master stopped reading that
// connection). The extend must forget the set's record, so that the set's
// release is queued behind the restore and deletes what it wrote. Found in
// review of 9d36a8e, whose record was keyed by the set's keys: an extend
// of some of them left it, the release was kept for the health loop
// instead, its retry ran before the restore, and the key with the lock's
// token survived the answered release (this test failed for "one key" and
// "subset").
func TestExtendOfSomeKeysForgetsTheSetsRecord(t *testing.T) {
	for _, mode := range []string{"one key", "subset", "set"} {
		t.Run(mode, func(t *testing.T) {
			d := &holdDialer{}
			a := holdClient(t, d)
			ctx := context.Background()
			rdbs := direct(t)
			key := newKey(t)
			keys := []string{key, key + ":b", key + ":c"}
			resume := stickLane(t, a, 0, key)
			l, err := a.AcquireMulti(ctx, keys, 10*time.Second)
			require.NoError(t, err)
			require.EqualValues(t, 1, a.unreached.n.Load(), "the grant records master 0")
			resume()
			countsAgain(t, a, key)

			d.trigger.Store(&[][]byte{[]byte("restore"), []byte(l.Token())})
			switch mode {
			case "one key":
				_, err = a.Extend(ctx, key, l.Token(), 10*time.Second)
			case "subset":
				_, err = a.ExtendMulti(ctx, keys[:2], l.Token(), 10*time.Second)
			case "set":
				_, err = a.ExtendMulti(ctx, keys, l.Token(), 10*time.Second)
			}
			require.NoError(t, err)
			require.EqualValues(t, 1, d.caught.Load(), "the restore to master 0 was written to its socket and held there")
			assert.EqualValues(t, 0, a.unreached.n.Load(), "the extend forgot the set's record")
			time.Sleep(150 * time.Millisecond) // the lane is stuck past the per-master timeout

			n, err := a.ReleaseMulti(ctx, keys, l.Token())
			require.NoError(t, err)
			assert.Equal(t, 4, n, "four masters deleted the set at once")
			assert.True(t, queuedMultiRelease(a, 0, key, l.token), "the release is queued behind the restore on master 0's lane")
			// Let the health loop retry whatever was kept (the master answers
			// its probes).
			require.Eventually(t, func() bool { return !unreleased(a, 0, key, l.token) }, 5*time.Second, 10*time.Millisecond)
			d.release() // the master reads its socket again: the restore runs
			time.Sleep(300 * time.Millisecond)
			v, _ := rdbs[0].Get(ctx, key).Result()
			pttl, _ := rdbs[0].PTTL(ctx, key).Result()
			assert.NotEqual(t, l.Token(), v, "after the release answered, master 0 still holds %s with the lock's token (pttl %v)", key, pttl)
		})
	}
}

// TestMovingExtendMultiForgetsTheOldGroupsRecord: during a change of
// groups, Moving.ExtendMulti extends group a's part of a set in two calls
// (the keys that stay, then the old copies of the keys that move), neither
// of them the set acquired there; each must forget a's record, so that
// Moving.ReleaseMulti's release of that part is queued behind their
// restore on master 0 (held in its socket, holdDialer). The library's own
// path into what TestExtendOfSomeKeysForgetsTheSetsRecord shows (found in
// the same review).
func TestMovingExtendMultiForgetsTheOldGroupsRecord(t *testing.T) {
	d := &holdDialer{}
	marker := "marker:" + t.Name() + ":review"
	plantMarker(marker)
	mo := masterOptions()[:3]
	mo[0].Dialer = d.dial
	ma, err := New(mo, WithPerMasterTimeout(100*time.Millisecond), WithHealthInterval(20*time.Millisecond), WithMarkerKey(marker))
	require.NoError(t, err)
	t.Cleanup(func() { d.release(); _ = ma.Close() })
	srvs, err := redisproc.StartN(3, redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	bo := make([]*redis.Options, 3)
	for i, s := range srvs {
		bo[i] = &redis.Options{Addr: s.Addr()}
	}
	mb, err := New(bo, WithPerMasterTimeout(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mb.Close() })
	from, err := NewGroups(Group{"a", ma})
	require.NoError(t, err)
	to, err := NewGroups(Group{"a", ma}, Group{"b", mb})
	require.NoError(t, err)
	mv := NewMoving(from, to)
	p := to.Placement()
	prefix := newKey(t)
	set := []string{keysOn(p, 0, 1, prefix)[0], keysOn(p, 1, 1, prefix)[0]} // stays on a, moves to b
	ctx := context.Background()

	resume := stickLane(t, ma, 0, set[0])
	ml, err := mv.AcquireMulti(ctx, set, 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 1, ma.unreached.n.Load(), "group a's Client recorded master 0")
	resume()
	countsAgain(t, ma, set[0])
	d.trigger.Store(&[][]byte{[]byte("restore"), []byte(ml.Token())})
	_, err = mv.ExtendMulti(ctx, set, ml.Token(), 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 1, d.caught.Load(), "a restore to master 0 was written to its socket and held there")
	assert.EqualValues(t, 0, ma.unreached.n.Load(), "the moving extend forgot group a's record")
	time.Sleep(150 * time.Millisecond)
	_, err = mv.ReleaseMulti(ctx, set, ml.Token())
	require.NoError(t, err)
	assert.True(t, queuedMultiRelease(ma, 0, set[0], ml.Token()), "the release is queued behind the restore on master 0's lane")
	d.release()
	time.Sleep(300 * time.Millisecond)
	v, _ := direct(t)[0].Get(ctx, set[0]).Result()
	assert.NotEqual(t, ml.Token(), v, "master 0 still holds %s with the set's token after the release answered", set[0])
}

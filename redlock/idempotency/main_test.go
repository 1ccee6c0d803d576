package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/internal/testmasters"
	"github.com/redlockd/redlockd/redlock"
)

// servers are five real redis-server masters shared by the package's
// tests; a test that restarts or flushes masters uses a deployment (marker
// and fencing counter) of its own, so the others are unaffected.
var servers []*redisproc.Server

func TestMain(m *testing.M) {
	os.Exit(testmasters.Run(m, 5, &servers))
}

var seq atomic.Int64

// deployment is a marker and fencing counter of its own on the masters,
// planted as an established deployment's.
type deployment struct{ marker, fence string }

func newDeployment(t *testing.T) deployment { return newDeploymentB(t) }

func newDeploymentB(t testing.TB) deployment {
	t.Helper()
	n := seq.Add(1)
	d := deployment{marker: fmt.Sprintf("idt%d:marker", n), fence: fmt.Sprintf("idt%d:fence", n)}
	ctx := context.Background()
	for _, s := range servers {
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, d.marker+":horizon", "0", 0)
			p.SetNX(ctx, d.fence, "0", 0)
			p.Set(ctx, d.marker, fmt.Sprintf("redlockd %d", time.Now().UnixMilli()), 0)
			return nil
		})
		_ = r.Close()
		require.NoError(t, err)
	}
	return d
}

// store returns a Store over a redlock Client of its own (one per daemon
// replica), closed at cleanup.
func (d deployment) store(t *testing.T, opts ...Option) *Store { return d.storeB(t, opts...) }

func (d deployment) storeB(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := New(d.client(t), opts...)
	require.NoError(t, err)
	return s
}

// client returns a redlock Client over the deployment, closed at cleanup;
// opts come after the defaults.
func (d deployment) client(t testing.TB, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	masters := make([]*redis.Options, len(servers))
	for i, s := range servers {
		masters[i] = &redis.Options{Addr: s.Addr()}
	}
	c, err := redlock.New(masters, append([]redlock.Option{redlock.WithMarkerKey(d.marker), redlock.WithFenceKey(d.fence),
		redlock.WithPerMasterTimeout(500 * time.Millisecond), redlock.WithHealthInterval(100 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitCounting waits until every master in idx counts for c's votes.
func waitCounting(t *testing.T, c *redlock.Client, within time.Duration, idx ...int) {
	t.Helper()
	require.Eventually(t, func() bool {
		ms := c.Masters()
		for _, i := range idx {
			if !ms[i].Counting {
				return false
			}
		}
		return true
	}, within, 50*time.Millisecond, "masters %v counting", idx)
}

func newKey(t *testing.T) string {
	return fmt.Sprintf("idt:%s:%d", t.Name(), seq.Add(1))
}

func fp(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func flushAll(addr string) error {
	r := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer r.Close()
	return r.FlushAll(context.Background()).Err()
}

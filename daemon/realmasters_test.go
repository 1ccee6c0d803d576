package daemon

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

// shared are five redis-server masters, started by the first test or
// benchmark that needs them and stopped after all of them.
var shared struct {
	once    sync.Once
	servers []*redisproc.Server
	err     error
}

func init() {
	testMainSetup = append(testMainSetup, func() (func(), error) {
		return func() {
			if shared.servers != nil {
				_ = redisproc.StopAll(shared.servers)
			}
		}, nil
	})
}

func realMasters() ([]*redisproc.Server, error) {
	shared.once.Do(func() {
		shared.servers, shared.err = redisproc.StartN(5, redisproc.Options{})
	})
	return shared.servers, shared.err
}

var deploySeq atomic.Int64

// deployment is a key prefix of its own on the five real masters, as
// `redlockd serve` lays it out: its fencing counter "<prefix>fence" and
// marker "<prefix>marker" planted on every master that runs, so the
// masters count as an established deployment's.
type deployment struct {
	prefix  string
	servers []*redisproc.Server
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	servers, err := realMasters()
	require.NoError(t, err, "redis-server")
	d := &deployment{prefix: fmt.Sprintf("rt%d:", deploySeq.Add(1)), servers: servers}
	ctx := context.Background()
	for _, s := range servers {
		if !s.Running() {
			continue
		}
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, d.prefix+"marker:horizon", "0", 0)
			p.SetNX(ctx, d.prefix+"fence", "0", 0)
			p.Set(ctx, d.prefix+"marker", "redlockd", 0)
			return nil
		})
		_ = r.Close()
		require.NoError(t, err)
	}
	return d
}

// locker returns a new redlock Client over the deployment (one per
// daemon), closed at cleanup, with the per-master timeout the daemon
// tests under -race can meet.
func (d *deployment) locker(t *testing.T) MasterLocker {
	t.Helper()
	addrs := make([]string, len(d.servers))
	for i, s := range d.servers {
		addrs[i] = s.Addr()
	}
	return NewRedlockLocker(d.clientOn(t, addrs))
}

// clientOn is locker's redlock Client, over the masters at addrs (the
// deployment's keys; other addresses stand for another group).
func (d *deployment) clientOn(t *testing.T, addrs []string) *redlock.Client {
	t.Helper()
	masters := make([]*redis.Options, len(addrs))
	for i, a := range addrs {
		masters[i] = &redis.Options{Addr: a}
	}
	c, err := redlock.New(masters,
		redlock.WithFenceKey(d.prefix+"fence"), redlock.WithMarkerKey(d.prefix+"marker"),
		redlock.WithPerMasterTimeout(500*time.Millisecond), redlock.WithMaxLockDelay(redlock.MaxLockDelay))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// server starts a daemon over the deployment (a Server with a redlock
// Client of its own, KeyPrefix the deployment's).
func (d *deployment) server(t *testing.T) *testServer {
	t.Helper()
	return newTestServer(t, d.locker(t), func(o *Options) { o.KeyPrefix = d.prefix })
}

// kill SIGKILLs the masters idx and restarts them (empty) at cleanup.
func (d *deployment) kill(t *testing.T, idx ...int) {
	t.Helper()
	for _, i := range idx {
		require.NoError(t, d.servers[i].Kill())
	}
	t.Cleanup(func() {
		for _, i := range idx {
			require.NoError(t, d.servers[i].Restart())
		}
	})
}

// waitPTTLAbove waits (up to 5 s) until each key's PTTL on every running
// master is above min. An acquire's writes to masters past those it
// heard, and a master's late answer, can land just after: a test
// that reads what every master holds (a status or listing through another
// Client, or the masters themselves) waits for them here. With min 0 it
// waits until every running master holds every key.
func (d *deployment) waitPTTLAbove(t *testing.T, min time.Duration, keys ...string) {
	t.Helper()
	ctx := context.Background()
	for _, s := range d.servers {
		if !s.Running() {
			continue
		}
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		require.Eventually(t, func() bool {
			cmds, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.PTTL(ctx, k)
				}
				return nil
			})
			if err != nil {
				return false
			}
			for _, c := range cmds {
				if c.(*redis.DurationCmd).Val() <= min {
					return false
				}
			}
			return true
		}, 5*time.Second, 5*time.Millisecond, "PTTL of %d keys (%q…) above %v on %s", len(keys), keys[0], min, s.Addr())
		_ = r.Close()
	}
}

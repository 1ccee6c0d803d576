package redlock

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/internal/testmasters"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// servers are the five real redis-server masters shared by this package's
// tests. Tests that kill, pause or restart masters restore them before
// they end (see withMasters), and every test uses keys of its own.
var servers []*redisproc.Server

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // dial failures to killed masters are expected here
	os.Exit(testmasters.Run(m, 5, &servers))
}

var keySeq atomic.Int64

// newKey returns a key no other test uses.
func newKey(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("test:%s:%d", t.Name(), keySeq.Add(1))
}

func masterOptions() []*redis.Options {
	out := make([]*redis.Options, len(servers))
	for i, s := range servers {
		out[i] = &redis.Options{Addr: s.Addr()}
	}
	return out
}

// newClient returns a Client over the five test masters, closed at cleanup.
// Its per-master timeout is 500ms unless opts say otherwise: the suite runs
// under -race next to other packages on two cores, and a test about quorum
// logic must not fail because a healthy master took 60ms to be scheduled.
// Tests about timeouts set their own.
func newClient(t *testing.T, opts ...Option) *Client {
	t.Helper()
	// A marker key of its own: tests restart masters empty, and a shared
	// marker would (rightly) get those quarantined by every later Client.
	marker := fmt.Sprintf("marker:%s:%d", t.Name(), keySeq.Add(1))
	plantMarker(marker)
	opts = append([]Option{WithPerMasterTimeout(500 * time.Millisecond), WithMarkerKey(marker)}, opts...)
	c, err := New(masterOptions(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// plantMarker writes the deployment state of the marker key (the marker,
// its lease horizon, and the default fencing counter where it is missing)
// on every master that runs and is not paused: newClient models a Client of
// an established deployment, whose masters kept their state (a brand-new
// deployment with a master down waits for it;
// TestNewDeploymentWaitsForEveryMaster covers that). A running master is
// retried for up to 10s: one that missed its marker because the machine was
// busy would be quarantined by the new Client and silently change what the
// test measures (a negative control then counts one vote short).
func plantMarker(marker string) {
	var wg sync.WaitGroup
	for _, s := range servers {
		if !s.Running() || s.Paused() {
			continue // a down or paused master keeps none
		}
		wg.Go(func() {
			r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for {
				_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, marker+":horizon", "0", 0)
					p.SetNX(ctx, "redlock:fence", "0", 0)
					p.Set(ctx, marker, "redlockd", 0)
					return nil
				})
				if err == nil || ctx.Err() != nil || !s.Running() || s.Paused() {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// direct returns plain go-redis clients to each master, for inspecting and
// planting keys behind the Client's back.
func direct(t *testing.T) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, len(servers))
	for i, s := range servers {
		out[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// holders returns the indexes of masters on which key holds value.
func holders(t *testing.T, rdbs []*redis.Client, key, value string) []int {
	t.Helper()
	var out []int
	for i, r := range rdbs {
		if !servers[i].Running() {
			continue
		}
		v, err := r.Get(context.Background(), key).Result()
		if err == redis.Nil {
			continue
		}
		require.NoError(t, err, "master %d", i)
		if v == value {
			out = append(out, i)
		}
	}
	return out
}

// withMasters applies fault to the masters in idx and undoes it at cleanup.
// fault is "kill" (SIGKILL; undo restarts empty) or "pause" (SIGSTOP; undo
// SIGCONT).
func withMasters(t *testing.T, fault string, idx ...int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Go(func() {
			switch fault {
			case "kill":
				require.NoError(t, servers[i].Kill())
			case "pause":
				require.NoError(t, servers[i].Pause())
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, i := range idx {
			wg.Go(func() {
				switch fault {
				case "kill":
					require.NoError(t, servers[i].Restart())
				case "pause":
					require.NoError(t, servers[i].Resume())
				}
			})
		}
		wg.Wait()
	})
}

func bits(mask int) []int {
	var out []int
	for i := range 5 {
		if mask&(1<<i) != 0 {
			out = append(out, i)
		}
	}
	return out
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

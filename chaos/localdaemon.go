package chaos

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/daemon"
	"github.com/redlockd/redlockd/redlock"
)

// The account and API key of the in-process daemons (loopback only).
const (
	localAccount = "chaos"
	localAPIKey  = "chaos-drill-key-0123456789abcdef"
)

// DaemonConfig is the timing of the daemons a ProcessTarget starts, and of
// the library clients a drill makes: the same knobs as `redlockd serve`.
type DaemonConfig struct {
	// PerMasterTimeout, default 150ms: generous, because the drills share
	// two loaded cores with -race builds and a healthy master must not look
	// failed for being scheduled late.
	PerMasterTimeout time.Duration
	// HealthInterval, default 150ms, so restarts and drift are seen fast.
	// Not lower: the clock guard keeps 30 samples and needs them to span
	// 3s before it judges drift, so below ~103ms it never does.
	HealthInterval time.Duration
	// MaxTTL is the longest TTL and so the length of every quarantine;
	// default 5s (a drill's TTLs are a few seconds at most).
	MaxTTL time.Duration
	// DriftFactor, default 0.01.
	DriftFactor float64
}

func (c DaemonConfig) withDefaults() DaemonConfig {
	if c.PerMasterTimeout == 0 {
		c.PerMasterTimeout = 150 * time.Millisecond
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = 150 * time.Millisecond
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = 5 * time.Second
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = 0.01
	}
	return c
}

// clientOptions are the redlock options `redlockd serve` derives from the
// same settings (cmd/redlockd/serve.go), plus extra.
func (c DaemonConfig) clientOptions(space KeySpace, extra ...redlock.Option) []redlock.Option {
	return append([]redlock.Option{
		redlock.WithPerMasterTimeout(c.PerMasterTimeout),
		redlock.WithDriftFactor(c.DriftFactor),
		redlock.WithHealthInterval(c.HealthInterval),
		redlock.WithMaxTTL(c.MaxTTL),
		redlock.WithFenceKey(space.FenceKey()),
		redlock.WithMarkerKey(space.MarkerKey()),
		// A lane stuck behind a blackholed master holds every later call
		// for that key's lane until the stall timeout; keep it short.
		redlock.WithStallTimeout(max(2*time.Second, c.PerMasterTimeout)),
	}, extra...)
}

// newClient is a redlock.Client over addrs with the drill's options.
func newClient(addrs []string, opts []redlock.Option) (*redlock.Client, error) {
	masters := make([]*redis.Options, len(addrs))
	for i, a := range addrs {
		masters[i] = &redis.Options{Addr: a}
	}
	return redlock.New(masters, opts...)
}

// localDaemon is a daemon.Server with its redlock.Client, serving on a
// loopback port in this process.
type localDaemon struct {
	info   Daemon
	client *redlock.Client
	cancel context.CancelFunc
	done   chan error

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
}

// startLocalDaemon starts a daemon of view over masters, serving on listen
// ("127.0.0.1:0" for a free port; a stopped daemon's address to start it
// again where its clients reach it).
func startLocalDaemon(name string, view int, masters []string, c DaemonConfig, listen string) (*localDaemon, error) {
	space := KeySpace{Prefix: "redlock:", Account: localAccount}
	client, err := newClient(masters, c.clientOptions(space))
	if err != nil {
		return nil, err
	}
	srv, err := daemon.New(nil, &daemon.Options{
		APIKeys:         []daemon.APIKey{{Account: localAccount, Hash: sha256.Sum256([]byte(localAPIKey))}},
		KeyPrefix:       space.Prefix,
		DefaultTTL:      1,
		MaxTTL:          int(c.MaxTTL / time.Second),
		MaxWait:         10 * time.Second,
		ShutdownTimeout: 2 * time.Second,
		Locker:          daemon.NewRedlockLocker(client),
	})
	if err != nil {
		client.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		client.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &localDaemon{
		info:   Daemon{Name: name, URL: "http://" + ln.Addr().String(), APIKey: localAPIKey, View: view, PerMasterTimeout: c.PerMasterTimeout},
		client: client,
		cancel: cancel,
		done:   make(chan error, 1),
	}
	go func() { d.done <- srv.Serve(ctx, ln) }()
	return d, nil
}

// close stops the daemon and its client; later calls return the first
// call's result.
func (d *localDaemon) close() error {
	d.closeOnce.Do(func() {
		d.cancel()
		var err error
		select {
		case err = <-d.done:
		case <-time.After(10 * time.Second):
			err = errors.New("chaos: local daemon did not stop")
		}
		d.closeErr = errors.Join(err, d.client.Close())
		d.closed.Store(true)
	})
	return d.closeErr
}

// stopped reports whether close has run.
func (d *localDaemon) stopped() bool { return d.closed.Load() }

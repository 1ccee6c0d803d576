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
		// As serve does: every client reads the delay records.
		redlock.WithMaxLockDelay(redlock.MaxLockDelay),
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

// localDaemon is a daemon.Server with its redlock.Clients (one per master
// group), serving on a loopback port in this process.
type localDaemon struct {
	info    Daemon
	srv     *daemon.Server
	clients []*redlock.Client // per master group
	cancel  context.CancelFunc
	done    chan error

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
}

// startLocalDaemon starts a daemon of view over masters, serving on listen
// ("127.0.0.1:0" for a free port; a stopped daemon's address to start it
// again where its clients reach it).
func startLocalDaemon(name string, view int, masters []string, c DaemonConfig, listen string) (*localDaemon, error) {
	return startGroupedDaemon(name, view, [][]string{masters}, c, listen)
}

// startGroupedDaemon starts a daemon of view over master groups (the
// addresses of each group's masters; groups named by groupName), served
// as `redlockd serve` serves master_groups when there is more than one.
func startGroupedDaemon(name string, view int, groups [][]string, c DaemonConfig, listen string) (*localDaemon, error) {
	space := KeySpace{Prefix: "redlock:", Account: localAccount}
	var clients []*redlock.Client
	var lgs []redlock.Group
	fail := func(err error) (*localDaemon, error) {
		for _, cl := range clients {
			cl.Close()
		}
		return nil, err
	}
	for i, addrs := range groups {
		client, err := newClient(addrs, c.clientOptions(space))
		if err != nil {
			return fail(err)
		}
		clients = append(clients, client)
		lgs = append(lgs, redlock.Group{Name: groupName(i), Client: client})
	}
	locker := daemon.NewRedlockLocker(lgs[0].Client)
	if len(lgs) > 1 {
		var err error
		if locker, err = daemon.NewGroupsLocker(lgs); err != nil {
			return fail(err)
		}
	}
	srv, err := daemon.New(nil, &daemon.Options{
		APIKeys:         []daemon.APIKey{{Account: localAccount, Hash: sha256.Sum256([]byte(localAPIKey))}},
		KeyPrefix:       space.Prefix,
		DefaultTTL:      time.Second,
		MaxTTL:          c.MaxTTL.Truncate(time.Second), // the API has whole seconds
		MaxWait:         10 * time.Second,
		ShutdownTimeout: 2 * time.Second,
		Locker:          locker,
		Health:          locker,
	})
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &localDaemon{
		info:    Daemon{Name: name, URL: "http://" + ln.Addr().String(), APIKey: localAPIKey, View: view, PerMasterTimeout: c.PerMasterTimeout},
		srv:     srv,
		clients: clients,
		cancel:  cancel,
		done:    make(chan error, 1),
	}
	go func() { d.done <- srv.Serve(ctx, ln) }()
	return d, nil
}

// masters is every master's status as the daemon sees it, group after
// group (the target's master order).
func (d *localDaemon) masters() []redlock.MasterStatus {
	var out []redlock.MasterStatus
	for _, c := range d.clients {
		out = append(out, c.Masters()...)
	}
	return out
}

// quorumAvailable reports whether every group has a quorum counting.
func (d *localDaemon) quorumAvailable() bool {
	for _, c := range d.clients {
		if !c.QuorumAvailable() {
			return false
		}
	}
	return true
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
		errs := []error{err}
		for _, c := range d.clients {
			errs = append(errs, c.Close())
		}
		d.closeErr = errors.Join(errs...)
		d.closed.Store(true)
	})
	return d.closeErr
}

// reload applies a configuration read again, as SIGHUP or POST
// /admin/reload make `redlockd serve` do (cmd/redlockd/reload.go): the
// API keys replaced, here by the drill's own and, with other, a second
// account's. The drill's account and key stay as they were.
func (d *localDaemon) reload(other bool) error {
	keys := []daemon.APIKey{{Account: localAccount, Hash: sha256.Sum256([]byte(localAPIKey))}}
	if other {
		keys = append(keys, daemon.APIKey{Account: localAccount + "-other", Hash: sha256.Sum256([]byte(localAPIKey + "-other"))})
	}
	_, err := d.srv.SetAPIKeys(keys)
	return err
}

// stopped reports whether close has run.
func (d *localDaemon) stopped() bool { return d.closed.Load() }

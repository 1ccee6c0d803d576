package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/clockshim"
	"github.com/redlockd/redlockd/redlock"
)

// ErrNoDocker is returned, wrapped, by NewDockerTarget when no Docker
// engine answers.
var ErrNoDocker = errors.New("chaos: no Docker engine")

// DockerOptions configures NewDockerTarget.
type DockerOptions struct {
	// Project is the compose project name (docker-compose -p), default
	// "redlockd". Containers are found by its labels.
	Project string
	// Services are the masters' compose service names, in the daemons'
	// configuration order; default redis1..redis5.
	Services []string
	// DaemonServices are the daemons' service names, default redlockd-a,
	// redlockd-b.
	DaemonServices []string
	// ProxyServices are the `redlock-chaos proxy` services between the
	// daemons and the masters (docker/chaos.compose.yml), in master order;
	// default proxy1..proxy5. Listener i of each serves daemon i. When the
	// project has none, the daemons reach the masters directly and
	// Latency, Blackhole and Reset are unsupported.
	ProxyServices []string
	// ProxyControlPort is the port of the proxies' control API, default
	// 7000.
	ProxyControlPort int
	// Daemons are the daemons' base URLs as this host reaches them
	// (published on loopback), one per daemon service.
	Daemons []string
	// APIKey and Account: an API key the daemons accept and its account.
	APIKey, Account string
	// KeyPrefix is the daemons' key_prefix, default "redlock:".
	KeyPrefix string
	// PerMasterTimeout is the daemons' per_master_timeout, for call bounds.
	PerMasterTimeout time.Duration
	// Endpoint is the Docker endpoint; "" uses $DOCKER_HOST or the default
	// socket.
	Endpoint string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// DockerTarget drills the docker-compose deployment: five Redis containers
// on one compose network and the redlockd daemons serving them.
//
// Faults: Kill (docker kill), Pause/Resume (docker pause/unpause), Stop and
// Start, RestartEmpty (the container is replaced by a fresh one created
// from the same configuration, so its data is gone and its address may
// change; the daemons find it again by its service name), Partition of
// every view (docker network disconnect/connect: the daemons and this host
// lose the master), and the clock shim when the Redis containers preload it
// (REDIS_LD_PRELOAD, see docker-compose.yml) with a /clock bind mount.
//
// The drill's own library clients run on this host and reach the masters at
// their container addresses on the compose network, through a Proxy per
// (view, master). The daemons reach master m through the container proxyN
// (`redlock-chaos proxy`, N = m+1), daemon i through its listener i: so
// Latency, Blackhole and Reset act on both paths (without tc netem on
// the host), and Partition of view i (0 or 1) cuts off library view i and
// daemon i alike. Without the proxy containers (a deployment without
// docker/chaos.compose.yml), the daemons reach the masters directly:
// Latency, Blackhole and Reset are unsupported, and a view partition cuts
// off the library clients only.
type DockerTarget struct {
	opts    DockerOptions
	dc      *docker.Client
	network string
	daemons []Daemon
	hc      *http.Client

	mu           sync.Mutex
	ids          []string // current container ID per master
	daemonIDs    []string
	proxies      [][]*Proxy
	ctl          []*ProxyClient // the daemons' proxy per master; nil without them
	clocks       []*clockshim.Clock
	paused       map[int]bool
	killed       map[int]bool
	disconnected map[int]bool
	viewCut      map[[2]int]bool
	clockSet     map[int]bool
	slowed       map[int]bool
	blackholed   map[int]bool
}

// NewDockerTarget finds the running compose deployment and prepares the
// host-side proxies. It returns an error wrapping ErrNoDocker when no
// Docker engine answers, and a plain error when the deployment is not up.
func NewDockerTarget(ctx context.Context, o DockerOptions) (*DockerTarget, error) {
	if o.Project == "" {
		o.Project = "redlockd"
	}
	if len(o.Services) == 0 {
		o.Services = []string{"redis1", "redis2", "redis3", "redis4", "redis5"}
	}
	if len(o.DaemonServices) == 0 {
		o.DaemonServices = []string{"redlockd-a", "redlockd-b"}
	}
	if len(o.ProxyServices) == 0 {
		o.ProxyServices = []string{"proxy1", "proxy2", "proxy3", "proxy4", "proxy5"}
	}
	if o.ProxyControlPort == 0 {
		o.ProxyControlPort = 7000
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "redlock:"
	}
	if o.PerMasterTimeout == 0 {
		o.PerMasterTimeout = 50 * time.Millisecond
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	dc, err := DockerClient(o.Endpoint)
	if err != nil {
		return nil, err
	}
	t := &DockerTarget{
		opts: o, dc: dc, hc: &http.Client{Timeout: 5 * time.Second},
		paused: map[int]bool{}, killed: map[int]bool{}, disconnected: map[int]bool{},
		viewCut: map[[2]int]bool{}, clockSet: map[int]bool{},
		slowed: map[int]bool{}, blackholed: map[int]bool{},
	}
	ok := false
	defer func() {
		if !ok {
			_ = t.Close()
		}
	}()
	for _, svc := range o.Services {
		c, err := t.find(ctx, svc)
		if err != nil {
			return nil, err
		}
		t.ids = append(t.ids, c.ID)
		for name := range c.NetworkSettings.Networks {
			if t.network == "" || strings.HasSuffix(name, "_redlock") {
				t.network = name
			}
		}
		t.clocks = append(t.clocks, t.clockOf(c))
	}
	for _, svc := range o.DaemonServices {
		c, err := t.find(ctx, svc)
		if err != nil {
			return nil, err
		}
		t.daemonIDs = append(t.daemonIDs, c.ID)
	}
	if err := t.findProxies(ctx); err != nil {
		return nil, err
	}
	for i, u := range o.Daemons {
		// Views 0 and 1 are this host's library clients. Behind the chaos
		// proxies, daemon i shares view i: Partition of that view cuts off
		// its listener too. Without them the daemons see the masters from
		// the compose network, a view of their own.
		view := 2 + i
		if t.ctl != nil && i < 2 {
			view = i
		}
		t.daemons = append(t.daemons, Daemon{
			Name: string(rune('a' + i)), URL: u, APIKey: o.APIKey,
			View: view, PerMasterTimeout: o.PerMasterTimeout,
		})
	}
	for range 2 { // the two library views
		var row []*Proxy
		for m := range o.Services {
			p, err := NewProxy(func() (string, error) { return t.masterAddr(context.Background(), m) })
			if err != nil {
				return nil, err
			}
			row = append(row, p)
		}
		t.proxies = append(t.proxies, row)
	}
	if t.ctl != nil {
		if err := t.checkDaemonsBehindProxies(ctx); err != nil {
			return nil, err
		}
	}
	o.Logf("chaos: compose target: project %s, network %s, masters %v, daemons %v, clock shim %v, daemons behind chaos proxies %v",
		o.Project, t.network, t.DirectAddrs(), o.Daemons, t.Supports(FaultClock), t.ctl != nil)
	ok = true
	return t, nil
}

// findProxies finds the proxy containers of the project, reaches
// their control API, and lifts any fault an earlier drill left in force
// (one that was interrupted). None at all is fine (t.ctl stays nil); some
// but not all, one not running, or one whose API does not answer is an
// error.
func (t *DockerTarget) findProxies(ctx context.Context) error {
	var found []*docker.Container
	var missing []string
	for _, svc := range t.opts.ProxyServices {
		c, err := t.find(ctx, svc)
		if errors.Is(err, errNoService) {
			missing = append(missing, svc)
			continue
		}
		if err != nil {
			return err
		}
		found = append(found, c)
	}
	switch {
	case len(found) == 0:
		t.opts.Logf("chaos: compose project %s has no chaos proxies (%s): the daemons reach the masters directly; no latency, blackhole or reset faults (docker/chaos.compose.yml adds them)",
			t.opts.Project, strings.Join(t.opts.ProxyServices, ", "))
		return nil
	case len(missing) > 0:
		return fmt.Errorf("chaos: compose project %q has chaos proxies but no %s: want one per master (%s)",
			t.opts.Project, strings.Join(missing, ", "), strings.Join(t.opts.ProxyServices, ", "))
	case len(found) != len(t.ids):
		return fmt.Errorf("chaos: %d chaos proxies (%s) for %d masters: want one per master",
			len(found), strings.Join(t.opts.ProxyServices, ", "), len(t.ids))
	}
	for i, c := range found {
		svc := t.opts.ProxyServices[i]
		if !c.State.Running {
			return fmt.Errorf("chaos: %s is not running (%s, exit code %d): was the drill image (CHAOS_IMAGE) built? Build it (make images) and bring the deployment up again; `docker logs %s` says more",
				svc, c.State.StateString(), c.State.ExitCode, strings.TrimPrefix(c.Name, "/"))
		}
		n, ok := c.NetworkSettings.Networks[t.network]
		if !ok || n.IPAddress == "" {
			return fmt.Errorf("chaos: %s is not on network %s", svc, t.network)
		}
		pc := NewProxyClient("http://"+net.JoinHostPort(n.IPAddress, strconv.Itoa(t.opts.ProxyControlPort)), t.hc)
		// Just started with the deployment: give its API a moment.
		var st ProxyControlState
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; {
			if st, err = pc.State(ctx); err == nil || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err != nil {
			return fmt.Errorf("chaos: %s's control API: %w", svc, err)
		}
		if len(st.Listeners) < len(t.opts.DaemonServices) {
			return fmt.Errorf("chaos: %s has %d listeners for %d daemons: want one per daemon (--listen, in daemon order)", svc, len(st.Listeners), len(t.opts.DaemonServices))
		}
		for _, l := range st.Listeners {
			if l.Latency != "0s" || l.Blackhole || l.Reject {
				t.opts.Logf("chaos: %s still has faults from an earlier drill (%+v): lifting them", svc, st.Listeners)
				if err := pc.Heal(ctx, AllListeners); err != nil {
					return err
				}
				break
			}
		}
		t.ctl = append(t.ctl, pc)
	}
	return nil
}

// checkDaemonsBehindProxies checks, from each daemon's /readyz, that daemon
// i reaches master m through listener i of proxy m: a daemon that reached
// the masters some other way would not see the faults, and the drill would
// pass for the wrong reason.
func (t *DockerTarget) checkDaemonsBehindProxies(ctx context.Context) error {
	for i, u := range t.opts.Daemons {
		r, err := t.readyz(ctx, u)
		if err != nil {
			return fmt.Errorf("chaos: check the daemons' masters: %w", err)
		}
		for m, pc := range t.ctl {
			st, err := pc.State(ctx)
			if err != nil {
				return err
			}
			if i >= len(st.Listeners) {
				return fmt.Errorf("chaos: %s has no listener %d for daemon %s", t.opts.ProxyServices[m], i, u)
			}
			_, port, err := net.SplitHostPort(st.Listeners[i].Addr)
			if err != nil {
				return fmt.Errorf("chaos: %s's listener %d: %w", t.opts.ProxyServices[m], i, err)
			}
			if want := net.JoinHostPort(t.opts.ProxyServices[m], port); r.Masters[m].Addr != want {
				return fmt.Errorf("chaos: daemon %s reaches master %d at %s, not through the chaos proxy at %s: its faults would not reach it (docker/chaos.compose.yml sets REDLOCKD_MASTERS)",
					u, m, r.Masters[m].Addr, want)
			}
		}
	}
	return nil
}

// DockerClient connects to the Docker engine (endpoint "" for $DOCKER_HOST
// or the default socket) and pings it; without an engine the error wraps
// ErrNoDocker.
func DockerClient(endpoint string) (*docker.Client, error) {
	pool, err := dockertest.NewPool(endpoint)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	if err := pool.Client.Ping(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	return pool.Client, nil
}

// errNoService is returned, wrapped, by find when the project has no
// container of the service.
var errNoService = errors.New("bring the deployment up first (make images up)")

// find returns the container of a compose service of the project.
func (t *DockerTarget) find(ctx context.Context, service string) (*docker.Container, error) {
	cs, err := t.dc.ListContainers(docker.ListContainersOptions{
		All: true, Context: ctx,
		Filters: map[string][]string{"label": {
			"com.docker.compose.project=" + t.opts.Project,
			"com.docker.compose.service=" + service,
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: list containers: %w", err)
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("chaos: compose project %q has no %s container: %w", t.opts.Project, service, errNoService)
	}
	return t.dc.InspectContainerWithContext(cs[0].ID, ctx)
}

// clockOf returns a Clock over the container's /clock bind mount when the
// container preloads the shim, else nil.
func (t *DockerTarget) clockOf(c *docker.Container) *clockshim.Clock {
	preload, file := "", ""
	for _, e := range c.Config.Env {
		if v, ok := strings.CutPrefix(e, "LD_PRELOAD="); ok {
			preload = v
		}
		if v, ok := strings.CutPrefix(e, clockshim.EnvVar+"="); ok {
			file = v
		}
	}
	if !strings.Contains(preload, "clockshim") || file == "" {
		return nil
	}
	for _, m := range c.Mounts {
		if rel, ok := strings.CutPrefix(file, m.Destination+"/"); ok && m.Source != "" {
			if _, err := os.Stat(m.Source); err != nil {
				return nil // not on this host (a remote engine)
			}
			clk, err := clockshim.NewClock(filepath.Join(m.Source, rel))
			if err != nil {
				t.opts.Logf("chaos: clock file for %s: %v", c.Name, err)
				return nil
			}
			return clk
		}
	}
	return nil
}

func (t *DockerTarget) id(m int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ids[m]
}

// masterAddr returns master m's address on the compose network now.
func (t *DockerTarget) masterAddr(ctx context.Context, m int) (string, error) {
	c, err := t.dc.InspectContainerWithContext(t.id(m), ctx)
	if err != nil {
		return "", err
	}
	n, ok := c.NetworkSettings.Networks[t.network]
	if !ok || n.IPAddress == "" {
		return "", fmt.Errorf("chaos: %s is not on network %s", t.opts.Services[m], t.network)
	}
	return net.JoinHostPort(n.IPAddress, "6379"), nil
}

// Name implements Target.
func (t *DockerTarget) Name() string { return "compose" }

// Masters implements Target.
func (t *DockerTarget) Masters() int { return len(t.ids) }

// Views implements Target: the two host views of the library clients.
func (t *DockerTarget) Views() int { return len(t.proxies) }

// MasterAddrs implements Target.
func (t *DockerTarget) MasterAddrs(view int) []string {
	out := make([]string, len(t.ids))
	for i, p := range t.proxies[view] {
		out[i] = p.Addr()
	}
	return out
}

// DirectAddrs implements Target: the containers' addresses now ("" for
// one that has none, being disconnected or down).
func (t *DockerTarget) DirectAddrs() []string {
	out := make([]string, len(t.ids))
	for i := range t.ids {
		out[i], _ = t.masterAddr(context.Background(), i)
	}
	return out
}

// Daemons implements Target.
func (t *DockerTarget) Daemons() []Daemon { return t.daemons }

// Space implements Target.
func (t *DockerTarget) Space() KeySpace {
	return KeySpace{Prefix: t.opts.KeyPrefix, Account: t.opts.Account, Namespace: "chaos"}
}

// Supports implements Target.
func (t *DockerTarget) Supports(kind FaultKind) bool {
	switch kind {
	case FaultKill, FaultPause, FaultRestart, FaultPartition, FaultViewPartition:
		return true
	case FaultLatency, FaultBlackhole, FaultReset:
		return t.ctl != nil
	case FaultClock:
		return t.clocks[0] != nil
	case FaultHoldReply:
		return len(t.daemons) > 0
	}
	return false
}

// readyz is the part of GET /readyz the drills read.
type readyz struct {
	// LongestMaxTTLS is the longest max TTL the daemon knows of on the
	// masters, its own or another client's (redlock.Client.LongestMaxTTL).
	LongestMaxTTLS int64 `json:"longest_max_ttl_s"`
	Masters        []struct {
		Addr   string `json:"addr"`
		Counts bool   `json:"counts"`
		State  string `json:"state"`
	} `json:"masters"`
}

func (t *DockerTarget) readyz(ctx context.Context, url string) (readyz, error) {
	var r readyz
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return r, err
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, fmt.Errorf("%s/readyz: %w", url, err)
	}
	if len(r.Masters) != len(t.ids) {
		return r, fmt.Errorf("%s/readyz lists %d masters, want %d", url, len(r.Masters), len(t.ids))
	}
	return r, nil
}

// DaemonCounting returns, per master, whether the daemon at url (one of
// DockerOptions.Daemons) counts it, from its /readyz.
func (t *DockerTarget) DaemonCounting(ctx context.Context, url string) ([]bool, error) {
	r, err := t.readyz(ctx, url)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(r.Masters))
	for i, m := range r.Masters {
		out[i] = m.Counts
	}
	return out, nil
}

// Counting reports, per master, whether every daemon counts its vote (its
// /readyz says counts:true).
func (t *DockerTarget) Counting(ctx context.Context) ([]bool, error) {
	out := make([]bool, len(t.ids))
	for i := range out {
		out[i] = true
	}
	for _, d := range t.daemons {
		c, err := t.DaemonCounting(ctx, d.URL)
		if err != nil {
			return nil, err
		}
		for i, counts := range c {
			out[i] = out[i] && counts
		}
	}
	return out, nil
}

// Ready implements Target.
func (t *DockerTarget) Ready(ctx context.Context) error {
	var last error
	for {
		c, err := t.Counting(ctx)
		if err == nil {
			all := true
			for _, ok := range c {
				all = all && ok
			}
			if all {
				return nil
			}
			err = fmt.Errorf("masters counting: %v", c)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: compose deployment not ready: %v (%w)", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (t *DockerTarget) check(m int) error {
	if m < 0 || m >= len(t.ids) {
		return fmt.Errorf("chaos: master %d out of range 0..%d", m, len(t.ids)-1)
	}
	return nil
}

func (t *DockerTarget) set(flags map[int]bool, m int, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if on {
		flags[m] = true
	} else {
		delete(flags, m)
	}
}

// Kill implements Injector: docker kill (SIGKILL).
func (t *DockerTarget) Kill(ctx context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	if err := t.dc.KillContainer(docker.KillContainerOptions{ID: t.id(m), Signal: docker.SIGKILL, Context: ctx}); err != nil {
		return fmt.Errorf("chaos: docker kill %s: %w", t.opts.Services[m], err)
	}
	t.set(t.killed, m, true)
	return nil
}

// Stop is docker stop: SIGTERM, then SIGKILL after timeout. With no
// persistence the master's data is gone when it starts again.
func (t *DockerTarget) Stop(_ context.Context, m int, timeout time.Duration) error {
	if err := t.check(m); err != nil {
		return err
	}
	if err := t.dc.StopContainer(t.id(m), uint(timeout/time.Second)); err != nil {
		return fmt.Errorf("chaos: docker stop %s: %w", t.opts.Services[m], err)
	}
	t.set(t.killed, m, true)
	return nil
}

// Start is docker start of the same container, after Kill or Stop; it
// returns once the master answers PING.
func (t *DockerTarget) Start(ctx context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	if err := t.dc.StartContainerWithContext(t.id(m), nil, ctx); err != nil {
		var already *docker.ContainerAlreadyRunning
		if !errors.As(err, &already) {
			return fmt.Errorf("chaos: docker start %s: %w", t.opts.Services[m], err)
		}
	}
	t.set(t.killed, m, false)
	return t.waitPing(ctx, m)
}

// Pause implements Injector: docker pause (the cgroup freezer).
func (t *DockerTarget) Pause(ctx context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	if err := t.dc.PauseContainer(t.id(m)); err != nil {
		return fmt.Errorf("chaos: docker pause %s: %w", t.opts.Services[m], err)
	}
	t.set(t.paused, m, true)
	return nil
}

// Resume implements Injector: docker unpause.
func (t *DockerTarget) Resume(ctx context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	if err := t.dc.UnpauseContainer(t.id(m)); err != nil {
		return fmt.Errorf("chaos: docker unpause %s: %w", t.opts.Services[m], err)
	}
	t.set(t.paused, m, false)
	return nil
}

// RestartEmpty implements Injector: the container is removed and a fresh
// one is created from its configuration (same name, labels, command,
// environment, mounts, network alias) and started: its data is gone and
// it has a new run_id. It returns once the master answers PING.
func (t *DockerTarget) RestartEmpty(ctx context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	svc := t.opts.Services[m]
	old, err := t.dc.InspectContainerWithContext(t.id(m), ctx)
	if err != nil {
		return fmt.Errorf("chaos: inspect %s: %w", svc, err)
	}
	if err := t.dc.RemoveContainer(docker.RemoveContainerOptions{ID: old.ID, Force: true, Context: ctx}); err != nil {
		return fmt.Errorf("chaos: remove %s: %w", svc, err)
	}
	cfg := *old.Config
	cfg.Hostname = "" // the old one is the old container's ID
	hc := *old.HostConfig
	hc.NetworkMode = t.network
	c, err := t.dc.CreateContainer(docker.CreateContainerOptions{
		Name: strings.TrimPrefix(old.Name, "/"), Config: &cfg, HostConfig: &hc, Context: ctx,
		NetworkingConfig: &docker.NetworkingConfig{EndpointsConfig: map[string]*docker.EndpointConfig{
			t.network: {Aliases: []string{svc}},
		}},
	})
	if err != nil {
		return fmt.Errorf("chaos: create a fresh %s: %w", svc, err)
	}
	t.mu.Lock()
	t.ids[m] = c.ID
	delete(t.killed, m)
	delete(t.paused, m)
	delete(t.disconnected, m)
	t.mu.Unlock()
	if err := t.dc.StartContainerWithContext(c.ID, nil, ctx); err != nil {
		return fmt.Errorf("chaos: start the fresh %s: %w", svc, err)
	}
	return t.waitPing(ctx, m)
}

// waitPing waits until master m answers PING on its container address.
func (t *DockerTarget) waitPing(ctx context.Context, m int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		addr, err := t.masterAddr(ctx, m)
		if err == nil {
			rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
			err = rdb.Ping(ctx).Err()
			_ = rdb.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %s does not answer PING: %w", t.opts.Services[m], err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Partition implements Injector. AllViews: docker network disconnect (or
// connect) of the master's container; view 0 or 1: the host proxies of
// that library view reject connections.
func (t *DockerTarget) Partition(ctx context.Context, view, m int, on bool) error {
	if err := t.check(m); err != nil {
		return err
	}
	if view != AllViews {
		if view < 0 || view >= len(t.proxies) {
			return fmt.Errorf("%w: partition of view %d (only the library views 0 and 1 have their own path)", ErrUnsupported, view)
		}
		t.proxies[view][m].SetReject(on)
		t.mu.Lock()
		if on {
			t.viewCut[[2]int{view, m}] = true
		} else {
			delete(t.viewCut, [2]int{view, m})
		}
		t.mu.Unlock()
		if t.ctl != nil && view < len(t.opts.DaemonServices) { // daemon view's listener
			if err := t.ctl[m].SetReject(ctx, view, on); err != nil {
				return fmt.Errorf("chaos: partition of view %d from %s: %w", view, t.opts.ProxyServices[m], err)
			}
		}
		return nil
	}
	var err error
	if on {
		err = t.dc.DisconnectNetwork(t.network, docker.NetworkConnectionOptions{Container: t.id(m), Force: true, Context: ctx})
	} else {
		err = t.dc.ConnectNetwork(t.network, docker.NetworkConnectionOptions{
			Container: t.id(m), Context: ctx,
			EndpointConfig: &docker.EndpointConfig{Aliases: []string{t.opts.Services[m]}},
		})
	}
	if err != nil {
		return fmt.Errorf("chaos: docker network %s %s: %w", map[bool]string{true: "disconnect", false: "connect"}[on], t.opts.Services[m], err)
	}
	t.set(t.disconnected, m, on)
	if !on {
		return t.waitPing(ctx, m)
	}
	return nil
}

// proxied reports ErrUnsupported, wrapped, for a fault that needs the
// chaos proxies when there are none.
func (t *DockerTarget) proxied(m int, fault string) error {
	if err := t.check(m); err != nil {
		return err
	}
	if t.ctl == nil {
		return fmt.Errorf("%w: %s on the compose target needs the chaos proxies of docker/chaos.compose.yml (project %q has no %s)",
			ErrUnsupported, fault, t.opts.Project, t.opts.ProxyServices[m])
	}
	return nil
}

// Latency implements Injector: the host proxies of both library views and
// the daemons' proxy in front of master m delay every chunk by d.
func (t *DockerTarget) Latency(ctx context.Context, m int, d time.Duration) error {
	if err := t.proxied(m, "latency"); err != nil {
		return err
	}
	if d > 0 {
		t.set(t.slowed, m, true) // healed by HealAll even if the call below fails
	}
	for _, row := range t.proxies {
		row[m].SetLatency(d)
	}
	if err := t.ctl[m].SetLatency(ctx, AllListeners, d); err != nil {
		return fmt.Errorf("chaos: latency on %s: %w", t.opts.ProxyServices[m], err)
	}
	if d <= 0 {
		t.set(t.slowed, m, false)
	}
	return nil
}

// Blackhole implements Injector on the host proxies of both library views
// and the daemons' proxy in front of master m.
func (t *DockerTarget) Blackhole(ctx context.Context, m int, on bool) error {
	if err := t.proxied(m, "blackhole"); err != nil {
		return err
	}
	if on {
		t.set(t.blackholed, m, true)
	}
	for _, row := range t.proxies {
		row[m].SetBlackhole(on)
	}
	if err := t.ctl[m].SetBlackhole(ctx, AllListeners, on); err != nil {
		return fmt.Errorf("chaos: blackhole on %s: %w", t.opts.ProxyServices[m], err)
	}
	if !on {
		t.set(t.blackholed, m, false)
	}
	return nil
}

// Reset implements Injector: every open connection to master m, the
// library views' and the daemons', is reset once.
func (t *DockerTarget) Reset(ctx context.Context, m int) error {
	if err := t.proxied(m, "connection reset"); err != nil {
		return err
	}
	for _, row := range t.proxies {
		row[m].Reset()
	}
	if err := t.ctl[m].Reset(ctx, AllListeners); err != nil {
		return fmt.Errorf("chaos: reset on %s: %w", t.opts.ProxyServices[m], err)
	}
	return nil
}

// ClockJump implements Injector through the shim's control file.
func (t *DockerTarget) ClockJump(_ context.Context, m int, d time.Duration) error {
	if err := t.check(m); err != nil {
		return err
	}
	if t.clocks[m] == nil {
		return fmt.Errorf("%w: the Redis containers do not preload the clock shim (make chaos sets REDIS_EXTRA and REDIS_LD_PRELOAD)", ErrUnsupported)
	}
	t.set(t.clockSet, m, true)
	return t.clocks[m].Jump(d)
}

// ClockRate implements Injector through the shim's control file.
func (t *DockerTarget) ClockRate(_ context.Context, m int, rate float64) error {
	if err := t.check(m); err != nil {
		return err
	}
	if t.clocks[m] == nil {
		return fmt.Errorf("%w: the Redis containers do not preload the clock shim (make chaos sets REDIS_EXTRA and REDIS_LD_PRELOAD)", ErrUnsupported)
	}
	t.set(t.clockSet, m, true)
	return t.clocks[m].SetRate(rate)
}

// HealAll implements Target: unpause, reconnect, replace killed masters
// with fresh containers, lift view partitions, latency and blackholes, put
// clocks back.
func (t *DockerTarget) HealAll(ctx context.Context) error {
	t.mu.Lock()
	paused, killed, disc := keysOf(t.paused), keysOf(t.killed), keysOf(t.disconnected)
	slowed, blackholed := keysOf(t.slowed), keysOf(t.blackholed)
	cuts := make([][2]int, 0, len(t.viewCut))
	for k := range t.viewCut {
		cuts = append(cuts, k)
	}
	clocks := keysOf(t.clockSet)
	t.clockSet = map[int]bool{}
	t.mu.Unlock()
	var errs []error
	for _, m := range blackholed {
		errs = append(errs, t.Blackhole(ctx, m, false))
	}
	for _, m := range slowed {
		errs = append(errs, t.Latency(ctx, m, 0))
	}
	for _, m := range paused {
		errs = append(errs, t.Resume(ctx, m))
	}
	for _, m := range disc {
		errs = append(errs, t.Partition(ctx, AllViews, m, false))
	}
	for _, m := range killed {
		errs = append(errs, t.RestartEmpty(ctx, m))
	}
	for _, k := range cuts {
		errs = append(errs, t.Partition(ctx, k[0], k[1], false))
	}
	for _, m := range clocks {
		errs = append(errs, t.clocks[m].Reset())
	}
	return errors.Join(errs...)
}

func keysOf(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Recover is the operator's procedure for masters that lost their data
// beyond what the daemons can repair on their own (more than N − quorum at
// once: a fencing counter is repaired from a quorum of counting masters,
// and fewer remain, so the daemons fail closed): `redlockd repair-fences`,
// i.e. redlock.RepairFences on every master, with maxTTL as its MaxTTL
// (the repaired masters stay out that long; RepairFences' default is a
// day). The running daemons accept the repair at their next probe and
// count each repaired master once that quarantine is over; Recover waits
// for that.
func (t *DockerTarget) Recover(ctx context.Context, maxTTL time.Duration) error {
	masters := make([]*redis.Options, len(t.ids))
	for m := range t.ids {
		addr, err := t.masterAddr(ctx, m)
		if err != nil {
			return err
		}
		masters[m] = &redis.Options{Addr: addr}
	}
	sp := t.Space()
	res, err := redlock.RepairFences(ctx, masters, redlock.RepairOptions{FenceKey: sp.FenceKey(), MarkerKey: sp.Prefix + "marker", MaxTTL: maxTTL})
	if err != nil {
		return fmt.Errorf("chaos: recover: repair-fences: %w", err)
	}
	t.opts.Logf("chaos: recover: repair-fences raised every fencing counter to %d (highest found %d)", res.Target, res.Highest)
	if err := t.longerMaxTTL(ctx, maxTTL, res.RegisteredMaxTTL); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return t.Ready(rctx)
}

// longerMaxTTL returns an error naming the cause when the masters a repair
// wrote are kept out longer than maxTTL, the drill's own bound: a client
// other than the drill's (registered, the longest max TTL RepairFences
// read on the masters) or a daemon that saw one allows longer locks. Those
// masters then rightly stay out for that TTL after the repair, and Recover
// would only time out. The usual cause: the drill overlay was brought up
// over a deployment that `make up` had started with the plain compose file
// (max_ttl 600), whose daemons registered 600 s on the masters; each
// daemon keeps the longest max TTL it has seen for as long as it runs.
func (t *DockerTarget) longerMaxTTL(ctx context.Context, maxTTL, registered time.Duration) error {
	longest, who := registered, "registered on the masters"
	for _, d := range t.daemons {
		r, err := t.readyz(ctx, d.URL)
		if err != nil {
			return err
		}
		if l := time.Duration(r.LongestMaxTTLS) * time.Second; l > longest {
			longest, who = l, "known to the daemon at "+d.URL
		}
	}
	if longest <= maxTTL {
		return nil
	}
	return fmt.Errorf("chaos: recover: a max TTL of %v (%s) is longer than the drill's %v: the repaired masters stay out that long after the repair, as they must while a lock of that client may stand; drill a deployment whose clients all use the drill's max TTL (make down, then make chaos)", longest, who, maxTTL)
}

// Close lifts every fault of the daemons' proxies and closes the host
// proxies. The deployment keeps running.
func (t *DockerTarget) Close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for m, pc := range t.ctl {
		if err := pc.Heal(ctx, AllListeners); err != nil {
			errs = append(errs, fmt.Errorf("chaos: lift the faults of %s: %w", t.opts.ProxyServices[m], err))
		}
	}
	for _, row := range t.proxies {
		for _, p := range row {
			errs = append(errs, p.Close())
		}
	}
	t.hc.CloseIdleConnections()
	return errors.Join(errs...)
}

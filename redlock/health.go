package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterState says whether a master's votes count, and if not, why. Its
// values are the strings the daemon's /readyz shows.
type MasterState string

// The states of a master, in the order Masters decides them.
const (
	// MasterDown: it did not answer its last probe or refuses connections.
	MasterDown MasterState = "down"
	// MasterRepairing: it lost its data; its votes are excluded until its
	// fencing counter is repaired from a quorum, or by `redlockd
	// repair-fences` when no quorum kept its data.
	MasterRepairing MasterState = "repairing"
	// MasterWaiting: it answers, but the marker rule has not decided yet:
	// no master has a marker and some have not answered yet.
	MasterWaiting MasterState = "waiting"
	// MasterQuarantined: its votes are excluded for a while (restart
	// without data, clock jump, drift).
	MasterQuarantined MasterState = "quarantined"
	// MasterUp: it answers and its votes count.
	MasterUp MasterState = "up"
)

// MasterStatus is a snapshot of what the Client knows about one master.
type MasterStatus struct {
	Index int
	Addr  string
	State MasterState
	Up    bool // answered its last probe and accepts connections
	// Counting is whether its votes count towards a quorum right now.
	Counting bool
	// QuarantineReason and QuarantineLeft explain MasterQuarantined (and
	// QuarantineReason MasterRepairing).
	QuarantineReason string
	QuarantineLeft   time.Duration
	// Drifting: its clock ran at a rate differing from ours by more than
	// the drift factor over the last window.
	Drifting bool
	// ClockOffset is its wall clock minus ours at the last probe; DriftRatio
	// the rate at which that offset changes (0.01 = 10ms per second).
	ClockOffset time.Duration
	DriftRatio  float64
	RunID       string
	Uptime      time.Duration
	// Durable: appendonly yes with appendfsync always, so a restart keeps
	// its keys and is not quarantined.
	Durable bool
	// Warnings are configuration problems: an evicting maxmemory-policy, a
	// replica, cluster mode, an address that is the same server as another.
	Warnings  []string
	Latency   time.Duration // round trip of the last probe
	CheckedAt time.Time     // when the last probe finished; zero before the first
	LastError string        // the last probe or connection error, "" if none
}

// Masters returns a snapshot of every master's health, in configuration order.
func (c *Client) Masters() []MasterStatus {
	out := make([]MasterStatus, len(c.masters))
	for i, m := range c.masters {
		st := MasterStatus{Index: i, Addr: m.addr, Up: m.up.Load(), Counting: m.counts(), Latency: time.Duration(m.latencyNS.Load())}
		if t := m.checkedAt.Load(); t != 0 {
			st.CheckedAt = time.Unix(0, t)
		}
		if e := m.lastErr.Load(); e != nil {
			st.LastError = *e
		}
		st.QuarantineLeft = m.quarantineLeft()
		m.st.mu.Lock()
		st.RunID, st.Uptime, st.Durable = m.st.runID, m.st.uptime, m.st.durable
		st.Drifting = m.st.drifting
		st.ClockOffset, st.DriftRatio = m.st.clock.offset, m.st.clock.rate
		st.Warnings = append([]string(nil), m.st.warnings...)
		if st.QuarantineLeft > 0 || m.st.repairPending.Load() {
			st.QuarantineReason = m.st.quarantineReason
		}
		m.st.mu.Unlock()
		switch {
		case !st.Up:
			st.State = MasterDown
		case m.st.repairPending.Load():
			st.State = MasterRepairing
		case !m.st.probed.Load():
			st.State = MasterWaiting
		case st.QuarantineLeft > 0:
			st.State = MasterQuarantined
		default:
			st.State = MasterUp
		}
		out[i] = st
	}
	return out
}

// QuorumAvailable reports whether at least a quorum of masters is up and
// counts (not quarantined, not awaiting repair).
func (c *Client) QuorumAvailable() bool {
	n := 0
	for _, m := range c.masters {
		if m.counts() {
			n++
		}
	}
	return n >= c.quorum
}

// FenceRepairs returns how many fencing counters were repaired so far.
func (c *Client) FenceRepairs() int64 { return c.repairs.Load() }

// Quarantines returns how many times a master was quarantined so far.
func (c *Client) Quarantines() int64 { return c.quarantines.Load() }

// ErrSameServer: two configured addresses reach the same Redis server
// (same run_id): five addresses that are really fewer servers is not
// Redlock.
var ErrSameServer = errors.New("redlock: two masters are the same server")

// CheckMasters probes every master once and returns an error if two
// addresses are the same server (ErrSameServer). Masters that do not answer
// are not an error: the daemon starts and serves once a quorum is up. Call
// it at startup to fail fast on a misconfigured deployment.
func (c *Client) CheckMasters(ctx context.Context) error {
	c.probeAll()
	ids := map[string]int{}
	var errs []error
	for i, m := range c.masters {
		m.st.mu.Lock()
		id := m.st.runID
		m.st.mu.Unlock()
		if id == "" {
			continue
		}
		if j, dup := ids[id]; dup {
			errs = append(errs, fmt.Errorf("%w: masters[%d] (%s) and masters[%d] (%s) have run_id %s", ErrSameServer, j, c.masters[j].addr, i, m.addr, id[:8]))
			continue
		}
		ids[id] = i
	}
	return errors.Join(errs...)
}

func (c *Client) kickHealth() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// healthLoop probes every master at once, every health interval (or at
// once when kicked), until Close.
func (c *Client) healthLoop() {
	t := time.NewTicker(c.opts.healthInterval)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case <-t.C:
		case <-c.kick:
		}
		c.probeAll()
		c.afterProbes()
	}
}

func (c *Client) probeAll() {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	var wg sync.WaitGroup
	for _, m := range c.masters {
		wg.Go(func() { m.probeOnce() })
	}
	wg.Wait()
}

// probeOnce runs PING, INFO server, TIME, ROLE, CONFIG GET (where allowed)
// and GET marker in one pipeline.
func (m *master) probeOnce() {
	o := &m.c.opts
	ctx, cancel := context.WithTimeout(context.Background(), o.healthTimeout)
	defer cancel()
	start := time.Now()
	pipe := m.probe.Pipeline()
	ping := pipe.Ping(ctx)
	info := pipe.Info(ctx, "server")
	sent := time.Now()
	tm := pipe.Time(ctx)
	role := pipe.Do(ctx, "ROLE")
	cfg := pipe.ConfigGet(ctx, "*") // filtered below; one call instead of five
	marker := pipe.Get(ctx, o.markerKey)
	var fence *redis.StringCmd
	if o.fenceKey != "" {
		fence = pipe.Get(ctx, o.fenceKey)
	}
	_, _ = pipe.Exec(ctx)
	received := time.Now()
	d := received.Sub(start)
	m.checkedAt.Store(time.Now().UnixNano())
	err := ping.Err()
	if o.observer != nil {
		o.observer.ObserveProbe(m.idx, err == nil, d)
	}
	if err != nil {
		if isDialError(err) {
			m.dialFailed.Store(true)
			m.renewProbe()
		}
		m.setDown(err)
		return
	}
	m.latencyNS.Store(int64(d))

	if id, uptime, mode, ok := parseInfoServer(info.Val()); ok {
		m.observeRunID(id, "health probe")
		m.st.mu.Lock()
		m.st.uptime = uptime
		m.st.mu.Unlock()
		m.setWarning("cluster", mode == "cluster", "runs in cluster mode: Redlock needs independent standalone masters")
	}
	if r, err := role.Slice(); err == nil && len(r) > 0 {
		name, _ := r[0].(string)
		m.setWarning("replica", name != "master", fmt.Sprintf("is a %s, not a master: its keys come from another server", name))
	}
	if conf, err := cfg.Result(); err == nil {
		evicting := conf["maxmemory"] != "0" && conf["maxmemory"] != "" && conf["maxmemory-policy"] != "noeviction"
		m.setWarning("eviction", evicting, fmt.Sprintf("maxmemory-policy %s can evict lock keys (they all have a TTL): use noeviction", conf["maxmemory-policy"]))
		m.st.mu.Lock()
		m.st.durable = conf["appendonly"] == "yes" && conf["appendfsync"] == "always"
		m.st.mu.Unlock()
	}
	if v, err := marker.Result(); err == nil || errors.Is(err, redis.Nil) {
		m.st.mu.Lock()
		m.st.hasMarker = err == nil
		m.st.markerValue = v
		m.st.mu.Unlock()
	}
	if fence != nil {
		v, err := fence.Int64()
		if errors.Is(err, redis.Nil) {
			v, err = 0, nil
		}
		m.st.mu.Lock()
		m.st.fenceCounter, m.st.fenceRead = v, err == nil
		m.st.mu.Unlock()
	}
	if remote, err := tm.Result(); err == nil {
		m.st.mu.Lock()
		// When the server started, by its own clock: INFO's uptime is
		// whole seconds, so this is up to 1s later than the real start.
		m.st.startedAt = remote.Add(-m.st.uptime)
		m.st.mu.Unlock()
		if o.clockGuard {
			m.observeClock(sent, received, remote)
		}
	}
	m.setUp()
}

// spreadFence copies the highest fencing counter the last probe round read
// from a counting master to every counting master below it (max-assign).
// The fence proof does not need it (fence.go); it bounds how far the
// masters that keep their data can lag the newest fence — a master whose
// votes come late never receives write-backs — which is what an operator's
// RepairFences after the loss of a majority relies on.
func (c *Client) spreadFence() {
	if c.opts.fenceKey == "" {
		return
	}
	var highest int64
	behind := make([]*master, 0, len(c.masters))
	read := make([]int64, len(c.masters))
	for i, m := range c.masters {
		m.st.mu.Lock()
		v, ok := m.st.fenceCounter, m.st.fenceRead
		m.st.mu.Unlock()
		read[i] = -1
		if ok && m.counts() {
			read[i] = v
			highest = max(highest, v)
		}
	}
	for i, m := range c.masters {
		if read[i] >= 0 && read[i] < highest {
			behind = append(behind, m)
		}
	}
	if len(behind) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.healthTimeout)
	defer cancel()
	target := strconv.FormatInt(highest, 10)
	for _, m := range behind {
		if err := fenceRepairScript.Run(ctx, m.probe, []string{c.opts.fenceKey}, target).Err(); err != nil {
			c.opts.logger.Debug("fencing counter catch-up failed", masterAttr(m), slog.Any("error", err))
		}
	}
}

func (m *master) observeClock(sent, received, remote time.Time) {
	m.st.mu.Lock()
	ev, delta := m.st.clock.observe(sent, received, remote)
	wasDrifting := m.st.drifting
	switch ev {
	case clockDrifting:
		m.st.drifting = true
	case clockOK:
		if m.st.clock.rate < m.c.opts.driftFactor/2 && m.st.clock.rate > -m.c.opts.driftFactor/2 {
			m.st.drifting = false
		}
	}
	m.st.mu.Unlock()
	switch {
	case ev == clockJumpForward:
		// Its keys may have expired early: treat it like a restart
		// without data, minus the fencing repair (the counter is intact).
		m.quarantine(fmt.Sprintf("wall clock jumped forward by %v", delta.Round(time.Millisecond)), m.c.opts.maxTTL)
	case ev == clockJumpBackward:
		m.c.opts.logger.Warn("master wall clock jumped backward (its locks will last longer)", masterAttr(m), slog.Duration("by", -delta))
	case ev == clockDrifting && !wasDrifting:
		// Keys set while it ran fast may expire early, for up to max TTL.
		m.quarantine(fmt.Sprintf("wall clock drifts at rate %.4f, above the drift factor %.4f", m.st.clock.rate, m.c.opts.driftFactor), m.c.opts.maxTTL)
	}
}

func (m *master) setWarning(kind string, on bool, text string) {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	prefix := kind + ": "
	i := slicesIndexPrefix(m.st.warnings, prefix)
	switch {
	case on && i < 0:
		m.st.warnings = append(m.st.warnings, prefix+text)
		m.c.opts.logger.Warn("master misconfigured", masterAttr(m), slog.String("problem", text))
	case !on && i >= 0:
		m.st.warnings = append(m.st.warnings[:i], m.st.warnings[i+1:]...)
	}
}

func slicesIndexPrefix(s []string, prefix string) int {
	for i, v := range s {
		if strings.HasPrefix(v, prefix) {
			return i
		}
	}
	return -1
}

// observeRunID notes the master's run_id, seen by a probe or on a new
// connection. A changed run_id means the master restarted; unless it
// persists every write (appendfsync always), it lost its keys.
func (m *master) observeRunID(id, via string) {
	m.st.mu.Lock()
	prev, durable := m.st.runID, m.st.durable
	m.st.runID = id
	m.st.mu.Unlock()
	if prev == "" || prev == id {
		return
	}
	m.c.opts.logger.Warn("master restarted", masterAttr(m), slog.String("seen_by", via))
	if durable {
		return
	}
	m.lostData(fmt.Sprintf("restarted without durable persistence (run_id changed, seen by %s)", via))
}

// onConnect runs on every new lane connection before any command: it loads
// the scripts and checks the run_id, so a master that restarted is
// quarantined before its first vote on the new connection is counted —
// long before the next health probe.
func (m *master) onConnect(ctx context.Context, cn *redis.Conn) error {
	var info *redis.StringCmd
	_, err := cn.Pipelined(ctx, func(p redis.Pipeliner) error {
		// ScriptLoad, not Script.Load: go-redis's Script.Load stores the
		// reply as the script's hash, which inside an unexecuted pipeline
		// is "" and would turn every later EVALSHA into a NOSCRIPT.
		for _, src := range laneScripts {
			p.ScriptLoad(ctx, src)
		}
		info = p.Info(ctx, "server")
		return nil
	})
	if err != nil {
		return err
	}
	if id, _, _, ok := parseInfoServer(info.Val()); ok {
		m.observeRunID(id, "new connection")
	}
	return nil
}

func parseInfoServer(s string) (runID string, uptime time.Duration, mode string, ok bool) {
	for line := range strings.Lines(s) {
		k, v, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found {
			continue
		}
		switch k {
		case "run_id":
			runID = v
		case "uptime_in_seconds":
			n, _ := strconv.ParseInt(v, 10, 64)
			uptime = time.Duration(n) * time.Second
		case "redis_mode":
			mode = v
		}
	}
	return runID, uptime, mode, runID != ""
}

// afterProbes runs after every probe round: it applies the marker rule to
// masters seen for the first time, writes missing markers, and repairs
// fencing counters.
func (c *Client) afterProbes() {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	withMarker, answered := 0, 0
	for _, m := range c.masters {
		m.st.mu.Lock()
		if m.up.Load() {
			answered++
			if m.st.hasMarker {
				withMarker++
			}
		}
		m.st.mu.Unlock()
	}
	for _, m := range c.masters {
		if !m.up.Load() {
			continue
		}
		m.st.mu.Lock()
		first, has := !m.st.seen, m.st.hasMarker
		m.st.mu.Unlock()
		if !first {
			continue
		}
		// The marker rule, for a master seen for the first time:
		//   - with our marker: it kept its data since a redlockd wrote it;
		//   - without, while a quorum of the others have theirs: it
		//     restarted without its data while no redlockd was watching;
		//     quarantined, and its fencing counter repaired from that quorum;
		//   - without, while some but fewer than a quorum have theirs: a
		//     majority lost its data. The same, but no quorum can repair its
		//     fencing counter, so it counts only after an operator runs
		//     `redlockd repair-fences` (see repairFence);
		//   - no marker on any master, and every master answered: a
		//     brand-new deployment, which starts serving at once;
		//   - no marker on any master that answered, and some did not: the
		//     silent ones may hold the markers (and the fencing counters) of
		//     a deployment whose other masters all lost their data. Wait for
		//     every master to answer; meanwhile none of them votes.
		switch {
		case has:
			if !m.restoredFromSnapshot() {
				m.repairedRecently()
			}
		case withMarker >= c.quorum:
			m.lostData("marker key missing while a quorum of the other masters have theirs (restarted without data while unwatched)")
		case withMarker > 0:
			m.lostData(fmt.Sprintf("marker key missing on %d of %d masters: a majority lost its data; its fencing counter cannot be repaired from a quorum, run `redlockd repair-fences`", len(c.masters)-withMarker, len(c.masters)))
			c.opts.logger.Error("a majority of masters lost their data: they vote again only after `redlockd repair-fences` raises their fencing counters", masterAttr(m))
		case answered < len(c.masters):
			if !m.st.waitLogged.Swap(true) {
				c.opts.logger.Warn("no master has the marker yet and not all answered: waiting for every master before treating this as a new deployment", masterAttr(m), slog.Int("answered", answered), slog.Int("masters", len(c.masters)))
			}
			continue // not seen: the rule runs again next round
		}
		m.st.mu.Lock()
		m.st.seen = true
		m.st.mu.Unlock()
		defer m.st.probed.Store(true) // after the repairs and markers below
	}
	for _, m := range c.masters {
		if m.up.Load() && m.st.repairPending.Load() {
			c.repairFence(m)
		}
	}
	c.spreadFence()
	for _, m := range c.masters {
		m.st.mu.Lock()
		need := m.up.Load() && !m.st.hasMarker
		m.st.mu.Unlock()
		// Not in a server's first two seconds: its start time, derived from
		// INFO's whole-second uptime, may be up to a second late, and the
		// marker's time must come after it (see restoredFromSnapshot).
		if need && m.counts() && m.startedAgo() >= 2*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.healthTimeout)
			if v, err := markerScript.Run(ctx, m.probe, []string{c.opts.markerKey}).Text(); err == nil {
				m.st.mu.Lock()
				m.st.hasMarker, m.st.markerValue = true, v
				m.st.mu.Unlock()
			}
			cancel()
		}
	}
}

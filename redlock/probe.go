package redlock

// Probing: the health loop, one probe round over every master, and what a
// probe or a new connection learns about a master's identity.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

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

// probeOnce is one health probe of m, in three steps: read (one pipeline,
// then TIME alone), observe (what the answers say about m: its run, role,
// memory, settings, deployment state and clock, recorded with their
// warnings) and judge (whether m lost its data since it was last seen).
func (m *master) probeOnce() {
	o := &m.c.opts
	ctx, cancel := context.WithTimeout(context.Background(), o.healthTimeout)
	defer cancel()
	start := time.Now()
	p := m.readProbe(ctx)
	d := time.Since(start)
	m.checkedAt.Store(time.Now().UnixNano())
	err := p.ping.Err()
	if o.observer != nil {
		o.observer.ObserveProbe(m.idx, err == nil, d)
	}
	if err != nil {
		if isDialError(err) {
			m.renewProbe()
		}
		m.probeFailed(err)
		return
	}
	m.probeAnswered()
	m.latencyNS.Store(int64(d))
	m.judgeProbe(m.observeProbe(ctx, p))
	m.setUp()
}

// probeCmds are one probe's commands: PING, INFO (server, stats,
// replication, memory), CONFIG GET (where the ACL allows it:
// appendfsync), GETs of the marker, lease horizon and fencing counter, and
// the max TTL and clock bounds registrations, in one pipeline.
type probeCmds struct {
	ping    *redis.StatusCmd
	info    *redis.StringCmd
	cfg     *redis.MapStringStringCmd // nil: CONFIG GET not allowed
	marker  *redis.StringCmd
	horizon *redis.Cmd
	fence   *redis.StringCmd // nil: fencing off
	maxTTL  *redis.Cmd
	bounds  *redis.Cmd // nil: shared clock bounds off
	gen     uint64     // m's repair generation when the pipeline was sent (lostDataSeen)
}

// readProbe sends the probe's pipeline and waits for its answers.
func (m *master) readProbe(ctx context.Context) probeCmds {
	o := &m.c.opts
	p := probeCmds{gen: m.st.inc.repairGen.Load()}
	pipe := m.probe.Pipeline()
	p.ping = pipe.Ping(ctx)
	p.info = pipe.Info(ctx, "server", "stats", "replication", "memory", "persistence")
	if !m.noConfigGet.Load() {
		p.cfg = pipe.ConfigGet(ctx, "*") // filtered below; one call instead of five
	}
	p.marker = pipe.Get(ctx, o.markerKey)
	p.horizon = pipe.Eval(ctx, horizonReadLua, m.c.horizonReadKeys())
	if o.fenceKey != "" {
		p.fence = pipe.Get(ctx, o.fenceKey)
	}
	p.maxTTL = pipe.Eval(ctx, maxTTLLua, []string{o.maxTTLKey}, o.maxTTL.Milliseconds(), maxTTLCeilingMS)
	if o.sharedClockBounds {
		p.bounds = pipe.Eval(ctx, clockBoundsLua, []string{o.clockBoundsKey}, m.c.clockBoundsArgs()...)
	}
	_, _ = pipe.Exec(ctx)
	return p
}

// probeObservation is what a probe that answered says about the master's
// data, for judgeProbe.
type probeObservation struct {
	role            string // INFO replication role
	replID, replID2 string
	evicted         int64 // INFO stats evicted_keys
	evictedRead     bool
	marker          string
	markerRead      bool  // the marker was read (present or missing)
	horizonMS       int64 // the lease horizon, -1 when missing
	counter         int64 // the fencing counter, -1 when missing or fencing is off
	horizonAt       time.Time
	horizonRead     bool
	counterMissing  bool
	remote          time.Time // the master's TIME, read alone
	timeRead        bool
	seen            sighting // "a health probe", in the generation it was sent in
}

// observeProbe records what the answers of p say about m (run, role,
// memory, settings, registrations, deployment state, clock, each with
// its warning), reads the master's TIME in a round trip of its own, and
// returns what judgeProbe needs.
func (m *master) observeProbe(ctx context.Context, p probeCmds) probeObservation {
	obs := probeObservation{seen: sighting{by: "a health probe", gen: p.gen}}
	m.registeredMaxTTL(p.maxTTL)
	if p.bounds != nil {
		m.registeredClockBounds(p.bounds)
	}
	m.observeInfo(p.info.Val(), &obs)
	m.observeConfig(p.cfg)
	m.observeState(p, &obs)
	m.observeTime(ctx, &obs)
	return obs
}

// observeInfo records what INFO says (run, uptime, mode, memory,
// evictions, role, replication IDs), with their warnings, into m and obs.
func (m *master) observeInfo(info string, obs *probeObservation) {
	if id, uptime, mode, ok := parseInfoServer(info); ok {
		m.observeRunID(id, "health probe")
		m.st.mu.Lock()
		m.st.uptime = uptime
		m.st.mu.Unlock()
		m.setWarning("cluster", mode == "cluster", "runs in cluster mode: Redlock needs independent standalone masters")
	}
	stats := parseInfoFields(info, "evicted_keys", "role", "master_replid", "master_replid2",
		"used_memory", "maxmemory", "maxmemory_policy", "mem_not_counted_for_evict")
	m.observeMemory(stats)
	evicted, evErr := strconv.ParseInt(stats["evicted_keys"], 10, 64)
	if evErr == nil {
		m.st.lastEvicted.Store(evicted)
	}
	obs.evicted, obs.evictedRead = evicted, evErr == nil
	obs.role = stats["role"]
	obs.replID, obs.replID2 = stats["master_replid"], stats["master_replid2"]
	rw := parseAOFRewrite(info)
	m.st.mu.Lock()
	m.st.role = obs.role
	m.st.aofRewrite = rw
	m.st.mu.Unlock()
	m.setWarning("replica", obs.role != "" && obs.role != "master", fmt.Sprintf("is a %s, not a master: its keys come from another server", obs.role))
	// From INFO memory, which every user that may run INFO can read.
	if lim, ok := stats["maxmemory"]; ok {
		evicting := lim != "0" && lim != "" && stats["maxmemory_policy"] != "noeviction"
		m.setWarning("eviction", evicting, fmt.Sprintf("maxmemory-policy %s can evict lock keys (they all have a TTL): use noeviction", stats["maxmemory_policy"]))
	}
}

// horizonReadKeys are horizon_read.lua's KEYS: the lease horizon, and the
// fencing counter when fencing is on.
func (c *Client) horizonReadKeys() []string {
	if c.opts.fenceKey == "" {
		return []string{c.opts.horizonKey}
	}
	return []string{c.opts.horizonKey, c.opts.fenceKey}
}

// parseHorizonRead decodes horizon_read.lua's answer: the master's time
// of the read, the lease horizon and the fencing counter (-1 each when
// missing, or not read: the counter without fencing; both -1 on an error).
func parseHorizonRead(cmd *redis.Cmd) (at time.Time, horizon, counter int64, err error) {
	hr, err := cmd.Slice()
	if err == nil && len(hr) != 4 {
		err = errBadReply
	}
	if err != nil {
		return time.Time{}, -1, -1, err
	}
	sec, _ := hr[0].(int64)
	usec, _ := hr[1].(int64)
	horizon, _ = hr[2].(int64)
	counter, _ = hr[3].(int64)
	return time.Unix(sec, usec*int64(time.Microsecond)), horizon, counter, nil
}

// observeState records the deployment state the probe read: the marker,
// the lease horizon with the master's time, and the fencing counter.
func (m *master) observeState(p probeCmds, obs *probeObservation) {
	markerValue, markerErr := p.marker.Result()
	obs.marker, obs.markerRead = markerValue, markerErr == nil || errors.Is(markerErr, redis.Nil)
	if obs.markerRead {
		m.st.mu.Lock()
		m.st.hasMarker = markerErr == nil
		m.st.markerValue = markerValue
		m.st.mu.Unlock()
	}
	var horizonErr error
	obs.horizonAt, obs.horizonMS, obs.counter, horizonErr = parseHorizonRead(p.horizon)
	obs.horizonRead = horizonErr == nil
	m.st.mu.Lock()
	m.st.hasHorizon = horizonErr == nil && obs.horizonMS >= 0
	m.st.mu.Unlock()
	if p.fence != nil {
		v, err := p.fence.Int64()
		obs.counterMissing = errors.Is(err, redis.Nil)
		if obs.counterMissing {
			v, err = 0, nil
		}
		m.st.mu.Lock()
		m.st.fenceCounter, m.st.fenceRead = v, err == nil
		m.st.hasCounter = err == nil && !obs.counterMissing
		m.st.mu.Unlock()
	}
}

// observeTime reads the master's TIME in a round trip of its own (the
// reading is uncertain by half the round trip, so it must not wait behind
// INFO and CONFIG GET) and records it: the server's start by its clock,
// and, with the clock guard, the clock reading and its checks.
func (m *master) observeTime(ctx context.Context, obs *probeObservation) {
	sent := time.Now()
	remote, timeErr := m.probe.Time(ctx).Result()
	received := time.Now()
	obs.remote, obs.timeRead = remote, timeErr == nil
	if timeErr != nil {
		return
	}
	m.st.mu.Lock()
	// When the server started, by its own clock: INFO's uptime is
	// whole seconds, so this is up to 1s later than the real start.
	m.st.startedAt = remote.Add(-m.st.uptime)
	m.st.mu.Unlock()
	s := m.c.reading(remote, sent, received)
	m.st.lastReading.Store(&s)
	if m.c.opts.clockGuard {
		m.observeReading(s)
		m.observeClock(sent, received, remote)
	}
}

// observeConfig records what CONFIG GET says (appendonly and appendfsync:
// whether a restart keeps the data), or that the ACL refuses it.
func (m *master) observeConfig(cfg *redis.MapStringStringCmd) {
	if cfg == nil {
		return
	}
	conf, err := cfg.Result()
	switch {
	case err == nil:
		m.st.mu.Lock()
		m.st.durable = conf["appendonly"] == "yes" && conf["appendfsync"] == "always"
		m.st.mu.Unlock()
	case strings.HasPrefix(err.Error(), "NOPERM"):
		// A least-privilege ACL user: not asked again. Durable stays
		// false, so a restart is taken as a loss of data (the safe side).
		m.noConfigGet.Store(true)
		m.c.opts.logger.Info("master: CONFIG GET not allowed for this user: its appendfsync is not checked, and a restart is treated as data loss", masterAttr(m))
	}
}

// judgeProbe decides whether a master already seen still has the state it
// had. The vote scripts check the same at every vote; this catches masters
// that receive no votes. Only the repair path ever writes that state back.
func (m *master) judgeProbe(obs probeObservation) {
	readable := obs.markerRead && obs.horizonRead && obs.timeRead
	guarded := m.c.opts.dataLossGuard && (m.st.inc.expectedMarker.Load() != nil || m.st.conds.has(condRepairPending)) && readable
	switch {
	case !guarded:
		m.promoted(obs.replID, obs.replID2) // keeps the known replication ID current
	case obs.role != "" && obs.role != "master":
		m.lostDataSeen(obs.seen.gen, LossReplica, fmt.Sprintf("became a %s (REPLICAOF): its data is now another server's", obs.role))
	case !m.markerMatches(obs.marker, obs.remote, &obs.seen):
	case m.promoted(obs.replID, obs.replID2):
		m.lostDataSeen(obs.seen.gen, LossReplica, "its replication ID changed after a REPLICAOF and REPLICAOF NO ONE: its data was replaced by another server's")
	case obs.horizonMS < 0:
		m.lostDataSeen(obs.seen.gen, LossStateMissing, "data lost without restart: lease horizon missing (seen by a health probe)")
	case !m.countersGrow(counterRead{horizon: obs.horizonMS, raised: obs.horizonMS, counter: obs.counter}, obs.horizonAt, obs.seen):
	case obs.counterMissing:
		m.lostDataSeen(obs.seen.gen, LossStateMissing, "data lost without restart: fencing counter missing (seen by a health probe)")
	case obs.evictedRead:
		m.evictionsUnchanged(obs.evicted, obs.seen)
	}
}

// probeFailuresForDown is how many probes in a row must fail, other than
// by a refused connection, before a master that answered before is marked
// down.
//
// A probe judges whether a master is alive; a vote is bounded by the
// per-master timeout so that a slow master never votes. The two answer
// different questions and fail differently. A vote that comes late is
// discarded, whatever the master's state: safety never rests on "down".
// "Down" only makes the lanes answer at once instead of sending (and the
// master stop counting towards a quorum in QuorumAvailable and /readyz).
// A probe that times out may measure this process or this machine (a GC
// pause, a CPU-starved host, the daemon descheduled) rather than the
// master, and then every master of that round times out at once. A refused
// connection is an answer (no process listens; so are no route to the
// host and a name that does not resolve: noServer), and marks the master
// down at once, as does any failure of a master that has not answered a
// probe yet. Otherwise it takes probeFailuresForDown failures in a row,
// about that many health intervals; meanwhile the master's votes are still
// bounded by the per-master timeout, a lane stuck on it fails the next
// calls at once (ErrMasterBusy), and afterProbes uses nothing the failed
// probe did not read (answeredProbe).
const probeFailuresForDown = 2

// probeFailed notes a failed probe of m and marks m down when it must be
// (probeFailuresForDown).
func (m *master) probeFailed(err error) {
	n := m.st.probeFailures.Add(1)
	msg := err.Error()
	m.lastErr.Store(&msg)
	if n >= probeFailuresForDown || noServer(err) || !m.st.conds.has(condProbed) {
		m.setDown(err)
		return
	}
	m.c.opts.logger.Info("master probe failed; marked down if the next one fails too", masterAttr(m), slog.Any("error", err))
}

// noServer reports whether err says that no server is there to answer,
// rather than that none answered in time: the connection was refused (no
// process listens), no route leads to the host, or its name does not
// resolve (a stopped container's, on a compose network).
func noServer(err error) bool {
	var dnsErr *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.As(err, &dnsErr) && dnsErr.IsNotFound
}

// probeAnswered notes that a probe of m was answered.
func (m *master) probeAnswered() {
	if m.st.probeFailures.Swap(0) != 0 && m.up.Load() {
		m.lastErr.Store(nil) // the failure it described did not make it down
	}
}

// answeredProbe reports whether m is up and answered its last probe: what
// that probe read (marker, horizon, counter, clock) is current.
func (m *master) answeredProbe() bool {
	return m.up.Load() && m.st.probeFailures.Load() == 0
}

// promoted reports whether m's replication ID id (with secondary ID id2,
// read by a probe) shows that m was promoted from replica since the ID
// known when it was last intact: a new ID with a secondary one comes from
// REPLICAOF ... then REPLICAOF NO ONE, so its data was another server's. A
// master also takes a new ID, with none secondary, when its first replica
// attaches: that loses nothing and becomes the known ID, as does the first
// ID seen and the first one seen after a repair (adoptRepair forgets the
// known ID). The known ID is read here, after markerMatches: a probe that
// adopts a repair marker must not judge the ID against the one from
// before the repair, or the loss the repair ended is counted again.
func (m *master) promoted(id, id2 string) bool {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	known := m.st.inc.replID
	if known == "" || strings.Trim(id2, "0") == "" {
		m.st.inc.replID = id
		return false
	}
	return id != "" && id != known
}

// parseInfoFields returns the values of the named fields in an INFO reply.
func parseInfoFields(s string, names ...string) map[string]string {
	out := make(map[string]string, len(names))
	for line := range strings.Lines(s) {
		k, v, found := strings.Cut(strings.TrimSpace(line), ":")
		if found && slices.Contains(names, k) {
			out[k] = v
		}
	}
	return out
}

// observeRunID notes the master's run_id, seen by a probe or on a new
// connection (via). A changed run_id means the master restarted; unless it
// persists every write (appendfsync always), it lost its keys. A durable
// one kept them, but not its INFO stats: they start again from zero in
// the new process (statsRestarted). judge (obsRestarted) publishes the new
// run_id and what the restart means at once.
func (m *master) observeRunID(id, via string) {
	m.judge(observation{kind: obsRestarted, runID: id, reason: via})
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
		for _, src := range m.c.sc.lane {
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
	// The batch reading's form (batchstats.go): the one-command reading
	// is tried as it would be sent, on this connection, after the INFO
	// above; its failure (Redis 6.2 has server_time_usec but refuses INFO
	// with two sections) only keeps the script.
	works := bareReadingWorks(cn.Do(ctx, "info", "server", "stats"))
	if !m.bareReadingPinned.Load() {
		m.bareReading.Store(works)
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

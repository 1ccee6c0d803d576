package redlock

// Probing: the health loop, one probe round over every master, and what a
// probe or a new connection learns about a master's identity.

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

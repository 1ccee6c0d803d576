package redlock

// The steps after each probe round: the marker rule for masters seen for
// the first time, fencing-counter repairs and catch-up, and writing
// missing markers.

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// afterProbes runs after every probe round: it applies the marker rule to
// masters seen for the first time, compares the masters' clocks, repairs
// masters that lost their data or whose clock jumped, and spreads the
// fencing counter.
func (c *Client) afterProbes() {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	c.judgeSameServers()
	census := c.takeMarkerCensus()
	for _, m := range c.masters {
		if !m.answeredProbe() {
			continue
		}
		m.st.mu.Lock()
		first := !m.st.seen
		m.st.mu.Unlock()
		if !first || !c.markerRule(m, census) {
			continue
		}
		m.st.inc.evicted.Store(m.st.lastEvicted.Load())
		m.st.mu.Lock()
		m.st.seen = true
		m.st.mu.Unlock()
		defer m.judge(observation{kind: obsMarkerRuleMet}) // after the clock check and repairs below
	}
	c.checkClockAgreement()
	for _, m := range c.masters {
		if m.answeredProbe() && (m.st.conds.has(condRepairPending) || m.st.conds.has(condHorizonPending)) {
			c.repairMaster(m)
		}
		if m.answeredProbe() {
			c.retryReleases(m)
		}
	}
	c.spreadFence()
}

// markerCensus is what the last probe round found on the masters that
// answered, for the marker rule.
type markerCensus struct {
	answered, withMarker, withHorizon int
	// allNew: every marker found was written moments ago by a Client
	// creating a brand-new deployment, which writes them one master at a
	// time: another daemon doing that now, not a majority that lost data.
	allNew bool
}

func (c *Client) takeMarkerCensus() markerCensus {
	n := markerCensus{allNew: true}
	for _, m := range c.masters {
		m.st.mu.Lock()
		if m.answeredProbe() {
			n.answered++
			if m.st.hasHorizon {
				n.withHorizon++
			}
			if m.st.hasMarker {
				n.withMarker++
				mk, ok := parseMarker(m.st.markerValue)
				if age := time.Since(mk.at); !ok || mk.repaired || age > newDeploymentWindow || age < -newDeploymentWindow {
					n.allNew = false
				}
			}
		}
		m.st.mu.Unlock()
	}
	return n
}

// markerRule decides about a master seen for the first time, and reports
// whether it is seen now (false: the rule runs again next round):
//   - a replica: its data is another server's; it counts only once it is
//     a master again and has been repaired;
//   - with our marker: it kept its data since a redlockd wrote it, unless
//     its marker is older than its start (restoredFromSnapshot) or its
//     fencing counter is gone; a repair marker's quarantine is kept
//     (firstSeenWithMarker). Both need a reading of its clock: until one,
//     it is not seen;
//   - without, while every marker found was written moments ago by a
//     Client creating a brand-new deployment (newDeploymentWindow): it is
//     being written; wait, for as long as a creation takes once a quorum
//     has theirs (creationGrace), else up to the window;
//   - without, while a quorum of the others have theirs: it lost its data
//     while no redlockd was watching; quarantined, and repaired from that
//     quorum (repairMaster);
//   - without, while some but fewer than a quorum have theirs: a majority
//     lost its data. The same, but no quorum can repair it, so it counts
//     only after an operator runs `redlockd repair-fences`;
//   - no marker on any master, and every master answered: a brand-new
//     deployment, which starts serving at once (brandNew);
//   - no marker on any master that answered, and some did not: the silent
//     ones may hold the markers (and the fencing counters) of a deployment
//     whose other masters all lost their data. Wait for every master to
//     answer; meanwhile none of them votes.
func (c *Client) markerRule(m *master, n markerCensus) bool {
	m.st.mu.Lock()
	has, role := m.st.hasMarker, m.st.role
	m.st.mu.Unlock()
	switch {
	case role != "" && role != "master":
		m.lostData(LossReplica, fmt.Sprintf("is a %s (REPLICAOF): its data is another server's", role))
	case has && m.st.lastReading.Load() == nil:
		// Its clock was never read (the probe's TIME, a round trip of its
		// own, timed out): a repair marker's <until> and the
		// restart-from-snapshot check both need it, and the master counted
		// at once without them.
		m.waiting("its clock has not been read yet (the probe's TIME did not answer); counts once a probe reads it")
		return false
	case has:
		return m.firstSeenWithMarker(n.withHorizon)
	case n.withMarker > 0 && n.allNew && n.withMarker < c.quorum:
		// The markers are being written.
		m.waiting(fmt.Sprintf("a new deployment is being created by another client (%d of %d masters have its marker); counts once it has written them all; if they are still fewer than a quorum %v after the first, a majority is taken to have lost its data (repairing: redlockd repair-fences)", n.withMarker, len(c.masters), newDeploymentWindow))
		return false
	case n.withMarker > 0 && n.allNew && !m.creationOver():
		// A quorum has fresh markers: another Client is writing them,
		// one master after another, or it has finished and this master
		// lost its data since. Wait as long as a creation can take
		// (creationGrace), then take it for a loss (the next case). A
		// Client that saw three of five did not wait, took the other two
		// for masters that lost their data and repaired them, and the
		// idempotency records then left them out for the longest
		// retention (7 days by default; a black-box pass: two daemons
		// started at once, as the compose file does, 5 of 20 starts).
		m.waiting(fmt.Sprintf("a new deployment is being created by another client (%d of %d masters have its marker); counts once it has written its marker here, or is taken for a master that lost its data %v after it was first seen without", n.withMarker, len(c.masters), m.creationGrace()))
		return false
	case n.withMarker >= c.quorum:
		m.lostData(LossStateMissing, "marker key missing while a quorum of the other masters have theirs (lost its data while unwatched)")
	case n.withMarker > 0:
		m.lostData(LossStateMissing, fmt.Sprintf("marker key missing on %d of %d masters: a majority lost its data; it cannot be repaired from a quorum, run `redlockd repair-fences`", len(c.masters)-n.withMarker, len(c.masters)))
		c.opts.logger.Error("a majority of masters lost their data: they vote again only after `redlockd repair-fences` raises their fencing counters", masterAttr(m))
	case n.answered < len(c.masters):
		if !m.st.waitLogged.Swap(true) {
			c.opts.logger.Warn("no master has the marker yet and not all answered: waiting for every master before treating this as a new deployment", masterAttr(m), slog.Int("answered", n.answered), slog.Int("masters", len(c.masters)))
		}
		m.waiting(fmt.Sprintf("no master has the deployment marker yet and %d of %d answered: a new deployment is created only once every master answers (the silent ones may hold the markers of one that lost the others); bring the masters that do not answer back", n.answered, len(c.masters)))
		return false
	default:
		return m.brandNew()
	}
	return true
}

// waiting notes why m, not seen yet, does not count (MasterWaiting).
func (m *master) waiting(reason string) {
	m.st.mu.Lock()
	m.st.quarantineReason = reason
	m.st.mu.Unlock()
}

// creationGrace is how long a master seen without a marker, while a
// quorum of the others have fresh ones, waits for its own before it is
// taken for one that lost its data: as long as a Client creating the
// deployment takes to write every master's, one after another, each
// bounded by the health timeout.
func (m *master) creationGrace() time.Duration {
	return time.Duration(len(m.c.masters)) * m.c.opts.healthTimeout
}

// creationOver reports whether m, seen without a marker while a quorum of
// the others have fresh ones, has waited creationGrace since it was first
// seen so (that first time starts the wait).
func (m *master) creationOver() bool {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if m.st.creatingSince.IsZero() {
		m.st.creatingSince = time.Now()
		return false
	}
	return time.Since(m.st.creatingSince) >= m.creationGrace()
}

// newDeploymentWindow is how recent every marker must be for a partial set
// of markers to be taken for a brand-new deployment still being written by
// another Client rather than for a majority that lost its data.
const newDeploymentWindow = 10 * time.Second

// brandNew writes the deployment state (marker, lease horizon, fencing
// counter) on a master of a brand-new deployment: no master has a marker
// and all answered.
func (m *master) brandNew() bool {
	return m.writeMarker(0)
}

// writeMarker runs marker.lua: it creates whatever of the marker, lease
// horizon (now + horizon) and fencing counter is missing, and records the
// marker as the one m carries.
func (m *master) writeMarker(horizon time.Duration) bool {
	c := m.c
	nonce, err := c.opts.nonce()
	if err != nil {
		return false
	}
	keys := []string{c.opts.markerKey, c.opts.horizonKey}
	if c.opts.fenceKey != "" {
		keys = append(keys, c.opts.fenceKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.healthTimeout)
	defer cancel()
	v, err := markerScript.Run(ctx, m.probe, keys, nonce[:16], strconv.FormatInt(horizon.Milliseconds(), 10)).Text()
	if err != nil {
		c.opts.logger.Warn("writing the deployment marker failed; retried next round", masterAttr(m), slog.Any("error", err))
		return false
	}
	m.st.mu.Lock()
	m.st.hasMarker, m.st.markerValue, m.st.hasHorizon = true, v, true
	if c.opts.fenceKey != "" {
		m.st.hasCounter = true
	}
	m.st.mu.Unlock()
	m.expectMarker(&v)
	return true
}

// firstSeenWithMarker applies the marker rule to a master first seen with
// a marker; withHorizon is how many masters that answered this round have
// a lease horizon. It reports false when the rule could not decide this round (the
// lease horizon could not be written): the master must then not be taken
// as seen, or it would stay without an expected marker, its votes refused
// for good while Masters reported it counting.
func (m *master) firstSeenWithMarker(withHorizon int) bool {
	c := m.c
	m.st.mu.Lock()
	v, hasHorizon, hasCounter := m.st.markerValue, m.st.hasHorizon, m.st.hasCounter
	m.st.mu.Unlock()
	switch {
	case c.opts.fenceKey != "" && !hasCounter:
		m.lostData(LossStateMissing, "fencing counter missing while the marker is there (deleted, or lost with other keys)")
		return true
	case m.restoredFromSnapshot() && c.opts.quarantine:
		return true // lost: repaired from a quorum, then expected
		// (with the quarantine off, a negative control: it votes as it is)
	case !hasHorizon && withHorizon >= c.quorum:
		// A quorum of the masters have theirs: this one lost its horizon,
		// and with it maybe lock keys (an allkeys-* eviction, a DEL, while
		// no Client watched); before, it was taken for a deployment from
		// before horizons and voted at once.
		m.lostData(LossStateMissing, "lease horizon missing while a quorum of the masters have theirs (lost with other keys while unwatched: an allkeys-* eviction?)")
		return true
	case !hasHorizon:
		// A deployment from before lease horizons (fewer than a quorum
		// have one): assume a lock may be held for max TTL from now.
		if !m.writeMarker(c.lossTTL()) {
			return false
		}
	}
	m.expectMarker(&v)
	if mk, ok := parseMarker(v); ok && !mk.until.IsZero() {
		if r := m.st.lastReading.Load(); r != nil {
			now := time.Unix(0, c.epochWall+r.at+r.offset)
			m.notedOperatorRepair(mk, now)
			if left := c.repairEnd(mk).Sub(now); left > 0 {
				m.judge(observation{kind: obsQuarantine, reason: c.repairReason(mk), hold: left + c.clockAllowance()})
			}
		}
	} else if ok && mk.repaired {
		m.repairedRecently()
	}
	return true
}

// spreadFence copies the highest fencing counter the last probe round read
// from a counting master to every master below it that counts or is
// quarantined (max-assign). The fence proof does not need it (fence.go);
// it bounds how far the masters that keep their data can lag the newest
// fence — a master whose votes come late never receives write-backs, a
// quarantined one receives none for the whole quarantine (up to max TTL) —
// which is what an operator's RepairFences after the loss of a majority
// relies on: its margin covers about one health interval of fences, and a
// quarantined master may be among the few that keep their data. It also
// raises them to the floor another master group set (raiseFenceFloor;
// Moving.SyncFences), which the fence proof of a change of master groups
// does need.
//
// A quarantined master was repaired (or is held for its clock): its
// marker, horizon and counter are the deployment's, and raising its
// counter hides nothing — the loss it was quarantined for is already seen
// and recorded in its repair marker, and a later loss of its data still
// shows in the marker and horizon, which this write does not touch. A
// master not yet through the marker rule, or one that lost its data and is
// not repaired yet, is left alone: its counter is evidence (RepairFences
// quarantines a master whose counter lags, as one that may have rolled
// back).
func (c *Client) spreadFence() {
	if c.opts.fenceKey == "" {
		return
	}
	highest := max(c.highestFenceRead(), c.fenceFloor.Load())
	behind := make([]*master, 0, len(c.masters))
	for _, m := range c.masters {
		m.st.mu.Lock()
		v, ok := m.st.fenceCounter, m.st.fenceRead
		m.st.mu.Unlock()
		if !ok || v >= highest {
			continue
		}
		if s := m.state(); s == MasterUp || s == MasterQuarantined {
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

// highestFenceRead is the highest fencing counter the last probes read
// from a counting master (0 when none was read).
func (c *Client) highestFenceRead() (highest int64) {
	for _, m := range c.masters {
		m.st.mu.Lock()
		v, ok := m.st.fenceCounter, m.st.fenceRead
		m.st.mu.Unlock()
		if ok && m.counts() {
			highest = max(highest, v)
		}
	}
	return highest
}

// raiseFenceFloor makes the health loop raise every counting master's
// fencing counter to at least f (spreadFence), from its next round on.
func (c *Client) raiseFenceFloor(f int64) {
	for {
		cur := c.fenceFloor.Load()
		if f <= cur || c.fenceFloor.CompareAndSwap(cur, f) {
			return
		}
	}
}

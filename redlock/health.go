package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MasterState says whether a master's votes count, and if not, why. Its
// values are the strings the daemon's /readyz shows.
type MasterState string

// The states of a master, in the order Masters decides them.
const (
	// MasterDown: it refuses connections, or did not answer two probes in
	// a row (probeFailuresForDown), or did not answer the first probe.
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
	// MasterOOM: it answers and its votes count, but it refuses writes:
	// its used memory is above maxmemory under maxmemory-policy
	// noeviction, so acquires and extends get no vote from it
	// (RefusingWrites, WriteRefusal).
	MasterOOM MasterState = "oom"
	// MasterUp: it answers and its votes count.
	MasterUp MasterState = "up"
)

// How a master leaves the counting set, and its exit. Every way out has an
// exit that needs no operator, bounded as below, except where the table
// names the operator's step; that step is then in the master's
// QuarantineReason (and so in /readyz and the 503). "Interval" is one
// health interval (WithHealthInterval); "lossTTL" the longest max TTL this
// Client knows of (LongestMaxTTL); "horizon" the latest lease horizon of a
// quorum of the other counting masters (horizon.go), which bounds every
// lock the master may have lost and is at most lossTTL from the loss.
//
//	way out                        state         exit, and its bound                                            test
//	-----------------------------  ------------  -------------------------------------------------------------  ----------------------------------------------
//	connection refused, or two     down          the next probe it answers: interval after it answers again     TestOneFailedProbeIsNotDown, TestNewDeploymentWaitsForEveryMaster
//	  failed probes in a row                     (one failed probe leaves it up: probeFailuresForDown)
//	restart without its data       repairing,    repaired from a quorum at the next round, then out until the   TestNewDeploymentLossCountsAgain,
//	                               quarantined   horizon: horizon + interval (lossTTL + interval without a      TestLossAfterTrafficCountsAgain
//	                                             quorum of horizons)
//	data lost without restart      as restart    as restart                                                     TestNewDeploymentLossCountsAgain/flushall
//	  (FLUSHALL, DEL, eviction,
//	  rollback, REPLICAOF)
//	a majority lost its data       repairing     operator: `redlockd repair-fences` (named in the reason), then  TestMajorityLossFailsClosedUntilRepaired
//	                                             out until lossTTL after the repair: that + interval
//	clock disagrees (clock hold)   quarantined   its clock agrees with the others' again (fix its clock: named  TestClockHoldCountsAgain
//	                                             in the reason), then out until the horizon: + interval
//	clock jump or drift            quarantined   the horizon (lossTTL without a quorum of horizons) + interval  TestClockHoldCountsAgain (a jump left in place
//	                                                                                                            is a clock hold too)
//	OOM (refuses writes)           oom           still counts (reads, releases); votes for writes again once a  TestOOMCountsAgain
//	                                             probe finds memory below maxmemory: interval, plus oomVoteHold
//	                                             after a refused vote (operator: free memory or raise maxmemory,
//	                                             named in the reason). Lost its data while OOM: repairing until  TestRepairRefusedForOOMSaysSo
//	                                             the repair's writes are accepted (the step named), then as
//	                                             restart
//	repaired (by a Client)         quarantined   the repair marker's <until> (the horizon): that + interval; a   TestLossAfterTrafficCountsAgain,
//	                                             daemon started later keeps the same end                        TestDaemonRestartAfterARepair
//	repaired (repair-fences)       quarantined   lossTTL after the repair + interval (a daemon started later    TestMajorityLossFailsClosedUntilRepaired,
//	                                             keeps the same end)                                            TestRepairQuarantineSurvivesDaemonRestart
//	waiting for a clock reading    waiting       the first probe whose TIME answers: interval after it does     TestWaitingForAClockReadingCountsAgain
//	  (first seen) or a comparison               (and, for the comparison, a round in which a quorum answer      TestWaitingForAClockComparisonCountsAgain
//	  with the other masters' clocks             TIME within a quarter of the per-master timeout)
//	new deployment, a master       waiting       every master has answered: interval after the last one does    TestNewDeploymentWaitsForEveryMaster
//	  not answering                              (operator: bring the silent master back)
//	two daemons creating one       waiting       the creator has written every marker: the next round; if it    TestTwoDaemonsCreateOneDeployment
//	  deployment                                 died midway, newDeploymentWindow + interval, then repaired from
//	                                             a quorum of markers (or repair-fences with fewer)
//	daemon restart mid-repair      repairing     the loss lives on the master (marker missing, or the repair    TestDaemonRestartMidRepair,
//	                                             marker's <until>): the new daemon repairs it or keeps the same  TestDaemonRestartAfterARepair
//	                                             end: as restart

// MasterStatus is a snapshot of what the Client knows about one master.
type MasterStatus struct {
	Index int
	Addr  string
	State MasterState
	Up    bool // not MasterDown: accepts connections and answered one of its last two probes
	// Counting is whether its votes count towards a quorum right now.
	Counting bool
	// QuarantineReason and QuarantineLeft explain MasterQuarantined (and
	// QuarantineReason MasterRepairing and MasterWaiting, with the
	// operator's step when one is needed). QuarantineLeft is 0 while a master
	// is held out until its clock agrees with the others again; for
	// MasterRepairing it is the least the master stays out, not when it
	// returns: it returns once its fencing counter is repaired, by the
	// Client when a quorum of the others answers, else by an operator's
	// RepairFences (Client.QuorumExpectedIn says when a quorum returns).
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
	Warnings []string
	// RefusingWrites: it answers but refuses writes (OOM: used memory
	// above maxmemory under noeviction), seen by a vote or a probe;
	// WriteRefusal says why and what to do. WriteRefusals counts the votes
	// it refused for that so far.
	RefusingWrites bool
	WriteRefusal   string
	WriteRefusals  int64
	Latency        time.Duration // round trip of the last probe
	CheckedAt      time.Time     // when the last probe finished; zero before the first
	LastError      string        // the last probe or connection error, "" if none
	// KeptSince is, as MasterAnswer.KeptSince, the time of the master's
	// last repair after a data loss, by its own clock, from the marker the
	// Client expects it to carry (data written to it before then may be
	// gone); zero when that marker is the deployment's first, or none is
	// known yet. Callers that keep data longer than a lock (idempotency
	// records) read it without waiting for an answer of their own.
	KeptSince time.Time
}

// Masters returns a snapshot of every master's health, in configuration order.
func (c *Client) Masters() []MasterStatus {
	out := make([]MasterStatus, len(c.masters))
	now := time.Now()
	for i, m := range c.masters {
		// The run_id is read before the verdict: a master seen with a new
		// run_id is judged restarted by then (judgeRestart stores both
		// at once), never shown counting as the new process.
		m.st.mu.Lock()
		runID := m.st.inc.runID
		m.st.mu.Unlock()
		state, why := m.verdict()
		st := MasterStatus{Index: i, Addr: m.addr, Up: state != MasterDown, Counting: state == MasterUp, State: state, Latency: time.Duration(m.latencyNS.Load())}
		if t := m.checkedAt.Load(); t != 0 {
			st.CheckedAt = time.Unix(0, t)
		}
		if e := m.lastErr.Load(); e != nil {
			st.LastError = *e
		}
		st.QuarantineLeft = m.quarantineLeft()
		if exp := m.st.inc.expectedMarker.Load(); exp != nil {
			if mk, ok := parseMarker(*exp); ok {
				st.KeptSince = mk.keptSince()
			}
		}
		m.st.mu.Lock()
		st.RunID, st.Uptime, st.Durable = runID, m.st.uptime, m.st.durable
		st.Drifting = m.st.drifting
		st.ClockOffset, st.DriftRatio = m.st.clock.offset, m.st.clock.rate
		st.Warnings = append([]string(nil), m.st.warnings...)
		st.RefusingWrites, st.WriteRefusal = m.refusingWritesLocked(now)
		st.WriteRefusals = m.st.oomRefusals.Load()
		if st.QuarantineLeft > 0 || m.st.conds.has(condRepairPending) || m.st.conds.has(condClockHold) || !m.st.conds.has(condProbed) || state == MasterWaiting {
			st.QuarantineReason = m.st.quarantineReason
			if h := m.st.clockHoldReason; h != "" && m.st.conds.has(condClockHold) && !strings.Contains(st.QuarantineReason, h) {
				// A quarantine set during the hold replaced the
				// hold's reason (clockHoldReason): both are named, the
				// hold's first (it lasts until the clock is fixed).
				if st.QuarantineLeft > 0 && st.QuarantineReason != "" {
					st.QuarantineReason = h + "; " + st.QuarantineReason
				} else {
					st.QuarantineReason = h
				}
			}
		}
		m.st.mu.Unlock()
		switch {
		case why == causeSameServer:
			st.QuarantineReason = "the same server as an earlier configured master (same run_id): its votes would count twice"
		case why == causeClockUnjudged:
			st.QuarantineReason = fmt.Sprintf("its clock has not been compared with the other masters' yet: counts after a probe round in which a quorum of the masters answer TIME within %v", m.c.opts.perMasterTimeout/4) + m.c.stricterBoundsNote()
		case state == MasterUp && st.RefusingWrites:
			st.State = MasterOOM
		}
		out[i] = st
	}
	return out
}

// QuorumAvailable reports whether enough masters are up and count (not
// quarantined, not awaiting repair) for an acquire or an extend: at least
// VotesNeeded, the quorum plus WithExtraVotes (with extra votes, a quorum
// alone reported true while every acquire failed). It is the health
// loop's view: a master that stopped answering counts as up until a probe
// (every WithHealthInterval, default 1 s) or a lane's timeout says
// otherwise, so it can lag the calls by that long.
func (c *Client) QuorumAvailable() bool {
	n := 0
	for _, m := range c.masters {
		if m.counts() {
			n++
		}
	}
	return n >= c.need
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
// it at startup to fail fast on a misconfigured deployment. Without it (or
// when an address comes to reach the same server later), the health loop
// keeps the later address of a server out of every call: MasterWaiting,
// with a "same-server" warning, until the run_ids differ again.
func (c *Client) CheckMasters(ctx context.Context) error {
	c.probeAll()
	var errs []error
	for i, j := range c.sameServers() {
		if j >= 0 {
			errs = append(errs, fmt.Errorf("%w: masters[%d] (%s) and masters[%d] (%s) have run_id %s", ErrSameServer, j, c.masters[j].addr, i, c.masters[i].addr, c.masters[j].runID()[:8]))
		}
	}
	return errors.Join(errs...)
}

// sameServers is, per master, the index of the first earlier master with
// its run_id (the same server under another address), -1 for none, and
// -2 when its run_id is not known (not read yet).
func (c *Client) sameServers() []int {
	out := make([]int, len(c.masters))
	ids := make(map[string]int, len(c.masters))
	for i, m := range c.masters {
		id := m.runID()
		out[i] = -1
		switch j, dup := ids[id]; {
		case id == "":
			out[i] = -2
		case dup:
			out[i] = j
		default:
			ids[id] = i
		}
	}
	return out
}

// judgeSameServers moves each master in or out of condSameServer by the
// run_ids the last probes read (afterProbes): the first address of a
// server votes, the later ones do not, and MasterStatus.Warnings says so
// on them.
func (c *Client) judgeSameServers() {
	for i, j := range c.sameServers() {
		m := c.masters[i]
		switch {
		case j >= 0:
			m.judge(observation{kind: obsSameServer, reason: fmt.Sprintf("the same server (run_id %s) as masters[%d] (%s): its votes would count twice; it does not vote", m.runID()[:8], j, c.masters[j].addr)})
		case j == -1:
			m.judge(observation{kind: obsServerApart})
		}
	}
}

// QuorumExpectedIn returns how long until at least VotesNeeded masters
// count again, when that is known: every master that does not count now
// but will is quarantined with a known end (not down, not awaiting a
// repair, not held out for its clock). 0 when they count now; false when
// they are not expected at a known time — also when the masters with no
// known return could make them up with the ones counting now, sooner than
// the quarantines end (a paused master may be back in a second; the
// daemon's Retry-After follows the same rule).
func (c *Client) QuorumExpectedIn() (time.Duration, bool) {
	var ends []time.Duration
	now, unknown := 0, 0
	for _, m := range c.masters {
		left := m.quarantineLeft()
		switch {
		case m.counts():
			ends = append(ends, 0)
			now++
		case m.state() == MasterQuarantined && !m.st.conds.has(condClockHold) && left > 0:
			ends = append(ends, left)
		default:
			unknown++
		}
	}
	if len(ends) < c.need {
		return 0, false
	}
	slices.Sort(ends)
	back := ends[c.need-1]
	if back > 0 && now+unknown >= c.need {
		return 0, false
	}
	return back, true
}

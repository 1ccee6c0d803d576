package redlock

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// A master's state, and the one judge that moves it.
//
// Whether a master's votes count is derived in one place (verdict) from
// its conditions, its quarantine and whether it is up. The conditions
// change only in judge, on an observation: what a vote, a probe, the
// probe round's clock comparison or a repair found. Each condition is
// listed with the observation that sets it and the one that is its way
// back:
//
//	condition          its votes…                  set by                          cleared by
//	condProbed         (counts once set)           obsMarkerRuleMet (marker.go)    — (a Client's lifetime)
//	condRepairPending  MasterRepairing             obsDataLoss (dataloss.go),      obsRepaired (horizon.go repairMaster),
//	                                               obsRestarted (probe.go)
//	                                                                               obsRepairAdopted (dataloss.go adoptRepair)
//	condHorizonPending quarantined for max TTL     obsClockFault (clock.go),       obsRepaired: the lease horizon read
//	                   until its horizon is read   obsClockAgrees after a hold     sets the quarantine
//	condClockHold      MasterQuarantined           obsClockDisagrees               obsClockAgrees (→ condHorizonPending)
//	condClockJudged    (counts once set)           obsClockChecked, obsClockAgrees — (a Client's lifetime)
//	condSameServer     MasterWaiting               obsSameServer (afterProbes)     obsServerApart (afterProbes)
//
// The quarantine {until, reason} (excludedUntil, quarantineReason) is set
// by judge too (obsDataLoss, obsClockFault, obsRepaired, obsQuarantine)
// and ends when its time passes; down and up are the lanes' and the
// probes' (m.up, setDown). A new guard is one observation kind, one case
// in judge, and, if it keeps votes out in a new way, one condition and
// one line in verdict.

// condition is one bit of a master's conditions.
type condition uint32

const (
	// condProbed: answered a probe and passed the marker rule. Until then
	// its votes do not count: it may have lost its data while unwatched.
	condProbed condition = 1 << iota
	// condRepairPending: the master lost its data and its fencing counter
	// has not been repaired from a quorum yet; its votes do not count. Set
	// under lossMu (obsDataLoss).
	condRepairPending
	// condHorizonPending: the master kept its data but its keys may have
	// expired early (clock fault); quarantined for max TTL until the
	// health loop sets the quarantine from its lease horizon.
	condHorizonPending
	// condClockHold: its clock disagrees with the other masters'; no vote
	// counts until it agrees again (then condHorizonPending).
	condClockHold
	// condClockJudged: its clock has been compared with the other masters'
	// and agreed, at least once since it was first seen; until then it
	// does not vote (a jump before this Client started would go unseen).
	condClockJudged
	// condSameServer: its run_id is an earlier configured master's: two
	// addresses of one server, whose votes would count twice (fewer
	// independent masters than the quorum assumes); it does not vote
	// until a probe round finds the run_ids apart.
	condSameServer
)

// conditions is a set of conditions, read lock-free by every vote.
type conditions struct{ bits atomic.Uint32 }

func (cs *conditions) has(c condition) bool { return condition(cs.bits.Load())&c != 0 }

// set adds c and reports whether it was already there.
func (cs *conditions) set(c condition) (was bool) {
	return condition(cs.bits.Or(uint32(c)))&c != 0
}

// clear removes c and reports whether it was there.
func (cs *conditions) clear(c condition) (was bool) {
	return condition(cs.bits.And(^uint32(c)))&c != 0
}

// obsKind is what an observation saw.
type obsKind uint8

const (
	// obsMarkerRuleMet: a probe round found the master through the marker
	// rule for the first time (afterProbes).
	obsMarkerRuleMet obsKind = iota + 1
	// obsDataLoss: a vote or probe, sent in repair generation gen, found
	// the master lost its data (why, reason).
	obsDataLoss
	// obsRepaired: this Client repaired the master (counter, horizon,
	// marker written): quarantined for hold with reason, counter its
	// fencing counter now.
	obsRepaired
	// obsRepairAdopted: the master carries a repair marker written by
	// another redlockd or the operator after its pending loss (ends).
	obsRepairAdopted
	// obsClockFault: the master kept its data but its keys may have
	// expired early (a forward clock jump, reason).
	obsClockFault
	// obsClockChecked: a vote's clock reading agreed with the other
	// masters' recent readings.
	obsClockChecked
	// obsClockDisagrees: the probe round found its clock off a quorum of
	// the other masters' by more than the tolerance (reason).
	obsClockDisagrees
	// obsClockAgrees: the probe round found its clock within the
	// tolerance of at least quorum − 1 other masters'.
	obsClockAgrees
	// obsQuarantine: a repair marker (adopted, the operator's, the first
	// one read) says locks the master lost may be valid for hold more
	// (reason); replace: the hold replaces a longer provisional one.
	obsQuarantine
	// obsSameServer: the probe round found its run_id on an earlier
	// configured master (reason names it).
	obsSameServer
	// obsServerApart: the probe round found its run_id on no earlier
	// configured master.
	obsServerApart
	// obsRestarted: a probe or a new connection (reason names which)
	// read the master's run_id, runID: a different one from the last
	// means the master restarted.
	obsRestarted
)

// observation is one finding about a master, for judge.
type observation struct {
	kind    obsKind
	gen     uint64         // obsDataLoss: the repair generation the reading was sent in
	why     DataLossReason // obsDataLoss
	reason  string         // obsDataLoss, obsRepaired, obsClockFault, obsClockDisagrees
	hold    time.Duration  // obsRepaired: the quarantine from the lease horizon
	counter int64          // obsRepaired: the fencing counter written
	ends    bool           // obsRepairAdopted: the marker was written after the pending loss
	replace bool           // obsQuarantine: the hold replaces a longer one in force
	runID   string         // obsRestarted
}

// judge moves m's state on o and reports whether it changed: the only
// place its conditions are set or cleared (the table above).
func (m *master) judge(o observation) bool {
	switch o.kind {
	case obsMarkerRuleMet:
		return !m.st.conds.set(condProbed)
	case obsDataLoss:
		return m.judgeLoss(o)
	case obsRestarted:
		return m.judgeRestart(o)
	case obsRepaired:
		m.setQuarantine(o.reason, o.hold)
		m.st.repairWarned.Store(false)
		m.st.conds.clear(condHorizonPending)
		if m.st.conds.clear(condRepairPending) {
			m.c.repairs.Add(1)
			m.c.opts.logger.Info("master repaired: fencing counter, lease horizon and marker", masterAttr(m), slog.Int64("counter", o.counter), slog.Duration("quarantine", o.hold))
		}
		return true
	case obsRepairAdopted:
		if !o.ends || !m.st.conds.clear(condRepairPending) {
			return false
		}
		m.st.repairWarned.Store(false)
		m.c.repairs.Add(1)
		m.c.opts.logger.Warn("master repaired by another redlockd or by `redlockd repair-fences`", masterAttr(m))
		return true
	case obsQuarantine:
		if o.replace {
			m.setQuarantine(o.reason, o.hold)
		} else {
			m.quarantine(o.reason, o.hold)
		}
		return true
	case obsClockFault:
		return m.judgeClockFault(o.reason)
	case obsClockChecked:
		return !m.st.conds.set(condClockJudged)
	case obsClockDisagrees:
		return m.judgeClockDisagrees(o.reason)
	case obsSameServer:
		m.setWarning("same-server", true, o.reason)
		return !m.st.conds.set(condSameServer)
	case obsServerApart:
		m.setWarning("same-server", false, "")
		return m.st.conds.clear(condSameServer)
	case obsClockAgrees:
		changed := !m.st.conds.set(condClockJudged)
		if m.st.conds.has(condClockHold) {
			// It agrees again: locks set before it disagreed may have
			// expired early on it; keep it out until they have all ended.
			m.judgeClockFault("wall clock agrees with the other masters again after it differed: locks it held may have expired early")
			m.st.conds.clear(condClockHold)
			m.st.mu.Lock()
			m.st.clockHoldReason = ""
			m.st.mu.Unlock()
			changed = true
		}
		return changed
	}
	return false
}

// judgeLoss is judge on obsDataLoss: a loss found in a reading sent while
// m's repair generation was o.gen. A reading sent before a repair that
// has completed since may have run before the repair's write, and shows
// the loss the repair ended, not a new one (it is dropped, and its vote
// does not count). The generation is compared under lossMu, with which
// repairs bump it (newRepairGen), so no repair can complete between the
// comparison and the loss being taken as pending. A new loss makes the
// master MasterRepairing and quarantines it for max TTL (until a repair
// sets the quarantine from the others' lease horizon).
func (m *master) judgeLoss(o observation) bool {
	if !m.c.opts.quarantine {
		m.c.opts.logger.Warn("master lost its data; not quarantined or repaired (quarantine disabled)", masterAttr(m), slog.String("reason", o.reason))
		return false
	}
	m.st.inc.lossMu.Lock()
	stale := o.gen != m.st.inc.repairGen.Load()
	already := !stale && m.st.conds.set(condRepairPending)
	m.st.inc.lossMu.Unlock()
	if stale || already {
		return false // read before the last repair, or this loss is already being handled
	}
	m.st.mu.Lock()
	m.st.inc.lossRunID = "" // set by judgeRestart, whose loss is a restart
	m.st.mu.Unlock()
	m.lossFollows(o.why, o.reason)
	return true
}

// lossFollows is what follows a loss once its pending repair is set
// (judgeLoss, judgeRestart): the loss's time, its count, the quarantine
// for max TTL until the repair, and a health round to repair it.
func (m *master) lossFollows(why DataLossReason, reason string) {
	m.st.lostAt.Store(m.c.sinceEpoch())
	m.c.countLoss(why)
	m.quarantine(reason, m.c.lossTTL())
	m.c.kickHealth()
}

// judgeRestart is judge on obsRestarted. The new run_id is stored with
// what the restart means, under lossMu and the state's mutex: the pending
// repair of a master that lost its keys (a reader of Masters that sees
// the new run_id sees it not counting: /readyz showed a restarted master
// with its new run_id counting for the milliseconds before the loss was
// judged, and a test that waited for exactly that went on while the master
// was still in its quarantine), or a durable master's statistics baseline
// reset (a vote on the new process judged before the reset would take its
// statistics, started again from zero, for a rollback). A pending loss
// is noted as followed by the new process (lossRunID: a repair marker
// naming it was written after the loss, repairFollowsLoss).
func (m *master) judgeRestart(o observation) bool {
	m.st.inc.lossMu.Lock()
	m.st.mu.Lock()
	prev, durable := m.st.inc.runID, m.st.durable
	m.st.inc.runID = o.runID
	restarted := prev != "" && prev != o.runID
	lost := restarted && !durable && m.c.opts.quarantine
	first := lost && !m.st.conds.set(condRepairPending)
	if restarted && m.st.conds.has(condRepairPending) {
		m.st.inc.lossRunID = o.runID
	}
	if restarted && durable {
		m.statsRestarted()
	}
	m.st.mu.Unlock()
	m.st.inc.lossMu.Unlock()
	if !restarted {
		return false
	}
	m.c.opts.logger.Warn("master restarted", masterAttr(m), slog.String("seen_by", o.reason))
	reason := fmt.Sprintf("restarted without durable persistence (run_id changed, seen by %s)", o.reason)
	switch {
	case !durable && !m.c.opts.quarantine:
		m.c.opts.logger.Warn("master lost its data; not quarantined or repaired (quarantine disabled)", masterAttr(m), slog.String("reason", reason))
	case first:
		m.lossFollows(LossRestart, reason)
	}
	return true
}

// judgeClockFault is judge on obsClockFault: a master that kept its data
// but whose keys may have expired early is quarantined for max TTL at
// once, shortened by the next health round to its lease horizon
// (obsRepaired, horizon.go).
func (m *master) judgeClockFault(reason string) bool {
	if !m.c.opts.quarantine {
		m.c.opts.logger.Warn("master would be quarantined (quarantine disabled)", masterAttr(m), slog.String("reason", reason))
		return false
	}
	if m.st.conds.set(condHorizonPending) {
		return false
	}
	m.st.lostAt.Store(m.c.sinceEpoch())
	m.quarantine(reason, m.c.lossTTL())
	m.c.kickHealth()
	return true
}

// judgeClockDisagrees is judge on obsClockDisagrees: the master is held
// out (condClockHold) until its clock agrees again (obsClockAgrees).
func (m *master) judgeClockDisagrees(why string) bool {
	if m.st.conds.set(condClockHold) {
		return false
	}
	m.st.mu.Lock()
	m.st.clockHoldReason = why
	if m.quarantineLeft() > 0 && m.st.quarantineReason != "" {
		why = m.st.quarantineReason + "; " + why
	}
	m.st.quarantineReason = why
	m.st.mu.Unlock()
	m.c.quarantines.Add(1)
	return true
}

// masterState is what the health loop and the connection hook learned about
// one master. The hot path reads only the atomics (votes); the rest is
// under mu.
type masterState struct {
	// inc: which copy of the deployment's data the master is believed to
	// serve (incarnation).
	inc incarnation
	// excludedUntil is when the master's votes count again, in nanoseconds
	// since the Client's epoch (monotonic); 0 when not quarantined. A value
	// of math.MaxInt64 means until repaired.
	excludedUntil atomic.Int64
	// conds: the conditions that keep its votes out (or let them in),
	// set and cleared only by judge.
	conds conditions
	// repairWarned: "repair postponed" was logged for the pending repair.
	repairWarned atomic.Bool
	// probeFailures: probes failed in a row since the last answered one
	// (probeFailuresForDown).
	probeFailures atomic.Int32
	// waitLogged: the "waiting for every master" warning was logged.
	waitLogged atomic.Bool
	// oomVoteAt: unix nanos of the last vote refused for OOM, 0 once a
	// vote was answered since; oomRefusals counts such votes (oom.go).
	oomVoteAt   atomic.Int64
	oomRefusals atomic.Int64
	// lostAt: when the pending loss or clock fault was seen (monotonic ns
	// since the Client's epoch).
	lostAt atomic.Int64
	// lastEvicted: evicted_keys at the last probe.
	lastEvicted atomic.Int64
	// ref is the reference reading of its clock for the per-vote check;
	// lastReading the last probe's reading, whatever its round trip.
	ref, lastReading atomic.Pointer[clockRef]

	mu sync.Mutex
	// oomProbe: the last probe found used memory above maxmemory under
	// noeviction; oomReason says so (oom.go).
	oomProbe  bool
	oomReason string
	uptime    time.Duration
	durable   bool // appendonly yes + appendfsync always: a restart keeps data
	// aofRewrite: INFO persistence's AOF rewrites since the server's
	// start: one means appendonly may have been turned on after the
	// server loaded its data, so durable now does not say that the data
	// it started with was complete (restoredFromSnapshot).
	aofRewrite       aofRewrite
	hasMarker        bool
	hasHorizon       bool      // the lease horizon key exists
	hasCounter       bool      // the fencing counter key exists
	role             string    // INFO replication role: "master" or "slave"
	markerValue      string    // the marker's value, "" when missing
	fenceCounter     int64     // the fencing counter at the last probe
	fenceRead        bool      // fenceCounter was read at the last probe
	startedAt        time.Time // when the server started, by its clock; zero if unknown
	seen             bool      // answered at least one probe
	quarantineReason string
	// clockHoldReason is why its clock is held out (condClockHold), kept
	// apart from quarantineReason, which a quarantine set while the hold
	// lasts replaces (a drifting clock's probes see small forward jumps,
	// each a quarantine "wall clock jumped forward"): Status composes the
	// two, so the operator's step ("fix its clock") stays named while the
	// hold does (a black-box pass saw it replaced within a second, and a
	// master shown "quarantined, 0 s left" that never came back).
	clockHoldReason string
	// creatingSince: when the marker rule first saw it without a marker
	// while a quorum of the others had fresh ones (creationOver).
	creatingSince time.Time
	drifting      bool
	clock         clockGuard
	warnings      []string
}

// counts reports whether the master's answers count towards a quorum now.
// A quarantined master keeps receiving writes; only its votes are ignored.
// It is state() == MasterUp: what /readyz shows and what the votes obey are
// one derived value. (A master refusing writes for OOM shows MasterOOM in
// Masters and still counts: its votes on keys it already holds are
// answered; acquires it refuses fail on their own.)
func (m *master) counts() bool {
	return m.state() == MasterUp
}

// notCounting is why an answer of m is not counted now, from one reading
// of its state: nil when m counts (counts), ErrMasterDown for a master
// marked down (its acquire votes are still sent and read, for the
// granted-lock check: granted.go, "Masters marked down"; it counts again
// after a probe), ErrMasterQuarantined for every other state that does
// not count.
func (m *master) notCounting() error {
	switch m.state() {
	case MasterUp:
		return nil
	case MasterDown:
		return ErrMasterDown
	}
	return ErrMasterQuarantined
}

// state is m's health, derived in this one place from what the health loop
// and the votes found, in order of precedence: down, repairing (lost its
// data), waiting (no probe through the marker rule yet), quarantined (for
// a time, or held for its clock), waiting (marker not known, or clock not
// yet compared with the other masters'), up. Masters refines up into
// MasterOOM when the master refuses writes.
func (m *master) state() MasterState {
	s, _ := m.verdict()
	return s
}

// cause is why state() found a master not counting: the first rule that
// applied, in its order of precedence.
type cause uint8

const (
	causeNone          cause = iota // it counts (MasterUp)
	causeDown                       // MasterDown
	causeRepairing                  // MasterRepairing: lost its data, counter not repaired yet
	causeNotProbed                  // MasterWaiting: no probe through the marker rule yet
	causeClockHold                  // MasterQuarantined: held for its clock
	causeQuarantine                 // MasterQuarantined: for a time
	causeMarkerUnknown              // MasterWaiting: its votes are refused (checkVote)
	causeClockUnjudged              // MasterWaiting: clock not yet compared with the others'
	causeSameServer                 // MasterWaiting: the same server as an earlier master
)

// verdict is state() with its cause: the one derivation of both, which
// Masters shows (the waiting reason) and counts() reads.
func (m *master) verdict() (MasterState, cause) {
	o := &m.c.opts
	switch {
	case !m.up.Load():
		return MasterDown, causeDown
	case m.st.conds.has(condRepairPending):
		return MasterRepairing, causeRepairing
	case !m.st.conds.has(condProbed):
		return MasterWaiting, causeNotProbed
	case m.st.conds.has(condSameServer):
		return MasterWaiting, causeSameServer
	case m.st.conds.has(condClockHold):
		return MasterQuarantined, causeClockHold
	}
	if until := m.st.excludedUntil.Load(); until != 0 && m.c.sinceEpoch() < until {
		return MasterQuarantined, causeQuarantine
	}
	switch {
	case o.dataLossGuard && m.st.inc.expectedMarker.Load() == nil:
		return MasterWaiting, causeMarkerUnknown // not through the marker rule
	case m.clockUnjudged():
		return MasterWaiting, causeClockUnjudged
	}
	return MasterUp, causeNone
}

// clockUnjudged reports whether m's clock has not yet been compared with
// the other masters' (and must be before it votes: a jump before this
// Client started would go unseen).
func (m *master) clockUnjudged() bool {
	o := &m.c.opts
	return o.clockGuard && o.clockReference && !m.st.conds.has(condClockJudged)
}

func (c *Client) sinceEpoch() int64 { return int64(time.Since(c.epoch)) }

// quarantine excludes the master's votes for d (the Redis Redlock page's
// "delayed restarts": a master that may have lost keys must not vote until
// every lock it could have held has expired). A longer quarantine already
// in force is kept.
func (m *master) quarantine(reason string, d time.Duration) {
	if !m.c.opts.quarantine {
		m.c.opts.logger.Warn("master would be quarantined (quarantine disabled)", masterAttr(m), slog.String("reason", reason))
		return
	}
	until := m.c.sinceEpoch() + int64(d)
	for {
		cur := m.st.excludedUntil.Load()
		if cur != 0 && cur >= until {
			return
		}
		if m.st.excludedUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	m.st.mu.Lock()
	m.st.quarantineReason = reason
	m.st.mu.Unlock()
	m.c.quarantines.Add(1)
	m.c.opts.logger.Warn("master quarantined", masterAttr(m), slog.String("reason", reason), slog.Duration("for", d))
}

// quarantineLeft returns how long the quarantine still lasts, 0 when none.
func (m *master) quarantineLeft() time.Duration {
	until := m.st.excludedUntil.Load()
	if until == 0 {
		return 0
	}
	return max(time.Duration(until-m.c.sinceEpoch()), 0)
}

// setQuarantine sets when the master's votes count again, replacing a
// longer provisional quarantine (max TTL from a loss) by one derived from
// its lease horizon.
func (m *master) setQuarantine(reason string, d time.Duration) {
	m.st.excludedUntil.Store(m.c.sinceEpoch() + int64(max(d, 0)))
	m.st.mu.Lock()
	m.st.quarantineReason = reason
	m.st.mu.Unlock()
	m.c.opts.logger.Info("master quarantine set from its lease horizon", masterAttr(m), slog.String("reason", reason), slog.Duration("for", d))
}

// incarnation is what the Client holds true about which copy of the
// deployment's data a master serves: the marker it must carry, the server
// process (run ID) and replication history (replication ID) it was seen
// in, the floors its counters must stay at or above (evictions, lease
// horizon, fencing counter, command count), and the repair it was last
// seen through. Every data-loss check compares a reading with it
// (dataloss.go, vote.go's checkVote, probe.go's judgeProbe); only a
// repair (adoptRepair) or a new baseline (the first reading after one)
// lowers what it holds.
type incarnation struct {
	// expectedMarker is the marker value the master is known to carry; nil
	// until the marker rule has seen it. Only the repair path changes it.
	expectedMarker atomic.Pointer[string]
	// repairGen counts the markers m was known to carry (expectMarker);
	// every reading carries the one it was sent in, and one sent in an
	// older generation counts no loss (lostDataSeen). lossMu orders its
	// changes with repairPending's setting.
	repairGen atomic.Uint64
	lossMu    sync.Mutex
	// lossRunID (under masterState.mu): the run_id of a server process that started
	// after the pending loss happened, "" when none is known: the process
	// whose start was the loss (a restart without durable persistence, a
	// restart from an old snapshot), or any later one. A repair marker
	// carrying it was written after the loss, however late this Client saw
	// the loss (adoptRepair).
	lossRunID string
	// evicted: INFO's evicted_keys when the master was last known intact;
	// -1 before the first probe.
	evicted atomic.Int64
	// repairedAt: the time of its last repair marker, unix ms by its clock;
	// answers read before it are stale.
	repairedAt atomic.Int64
	// operatorRepairAt: when the operator's repair marker it carries was
	// written, in ns since the Client's epoch (monotonic, converted from
	// the master's clock; negative for a repair before the Client
	// started); 0 when its marker is not one (notedOperatorRepair).
	operatorRepairAt atomic.Int64
	// countersSeen: the highest lease horizon and command count read
	// from it.
	countersSeen countersSeen
	// replID (under masterState.mu): its replication ID (INFO
	// master_replid) when last known intact; "" before the first probe.
	replID string
	// runID (under masterState.mu): the run_id of the server process
	// last seen.
	runID string
}

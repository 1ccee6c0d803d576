package redlock

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

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
	// repairPending: the master lost its data and its fencing counter has
	// not been repaired from a quorum yet; its votes do not count. Set
	// under lossMu (lostDataSeen).
	repairPending atomic.Bool
	// probed: answered a probe and passed the marker rule. Until then its
	// votes do not count: it may have lost its data while unwatched.
	probed atomic.Bool
	// repairWarned: "repair postponed" was logged for the pending repair.
	repairWarned atomic.Bool
	// probeFailures: probes failed in a row since the last answered one
	// (probeFailuresForDown).
	probeFailures atomic.Int32
	// waitLogged: the "waiting for every master" warning was logged.
	waitLogged atomic.Bool
	// horizonPending: the master kept its data but its keys may have
	// expired early (clock fault); quarantined for max TTL until the health
	// loop sets the quarantine from its lease horizon.
	horizonPending atomic.Bool
	// clockHold: its clock disagrees with the other masters'; no vote
	// counts until it agrees again (then horizonPending).
	clockHold atomic.Bool
	// clockJudged: its clock has been compared with the other masters'
	// and agreed, at least once since it was first seen; until then it
	// does not vote (a jump before this Client started would go unseen).
	clockJudged atomic.Bool
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
	oomProbe         bool
	oomReason        string
	uptime           time.Duration
	durable          bool // appendonly yes + appendfsync always: a restart keeps data
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
	drifting         bool
	clock            clockGuard
	warnings         []string
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
)

// verdict is state() with its cause: the one derivation of both, which
// Masters shows (the waiting reason) and counts() reads.
func (m *master) verdict() (MasterState, cause) {
	o := &m.c.opts
	switch {
	case !m.up.Load():
		return MasterDown, causeDown
	case m.st.repairPending.Load():
		return MasterRepairing, causeRepairing
	case !m.st.probed.Load():
		return MasterWaiting, causeNotProbed
	case m.st.clockHold.Load():
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
	return o.clockGuard && o.clockReference && !m.st.clockJudged.Load()
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
	// the master's clock); 0 when its marker is not one
	// (notedOperatorRepair).
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

package redlock

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DataLossReason says how a master was found to have lost lock state. A
// master that lost its data may have lost locks it voted for, so its vote
// must not count until every lock it could have held has ended (lease
// horizon, horizon.go) and its fencing counter has been repaired (fence.go).
type DataLossReason string

// How a lost master is detected; every case is caught by the vote scripts
// themselves (vote_prelude.lua) in the same round trip as the vote, and by
// the health probe for masters that receive no votes.
const (
	// LossRestart: the run_id changed and the master does not persist every
	// write (appendfsync always).
	LossRestart DataLossReason = "restart"
	// LossSnapshot: the master restarted with data older than its start
	// (an RDB snapshot or an AOF not fsynced always).
	LossSnapshot DataLossReason = "snapshot"
	// LossStateMissing: the marker, lease horizon or fencing counter is
	// gone while the process kept its run_id: FLUSHALL, FLUSHDB, SWAPDB, an
	// operator's DEL/UNLINK, or eviction of those keys.
	LossStateMissing DataLossReason = "state_missing"
	// LossMarkerReplaced: the marker holds another value than the one this
	// master had: its data was replaced (REPLICAOF another server, a
	// restore) by data that carries a marker of its own.
	LossMarkerReplaced DataLossReason = "marker_replaced"
	// LossEvicted: INFO's evicted_keys grew: lock keys (which all have a
	// TTL, so volatile-* policies evict them too) may be gone.
	LossEvicted DataLossReason = "evicted"
	// LossReplica: the master reports role slave, or its replication ID
	// changed: its data is another server's, or was replaced by a sync.
	LossReplica DataLossReason = "replica"
	// LossRolledBack: the master's lease horizon, which only ever grows,
	// went down: its data went back to an older copy without a restart
	// (REPLICAOF a server holding an old snapshot, DEBUG RELOAD) or with
	// one (a durable master restored from an older AOF or RDB file).
	LossRolledBack DataLossReason = "rolled_back"
)

// DataLossReasons lists every DataLossReason, for metrics.
var DataLossReasons = [...]DataLossReason{LossRestart, LossSnapshot, LossStateMissing, LossMarkerReplaced, LossEvicted, LossReplica, LossRolledBack}

// DataLosses returns how many times a master was found to have lost its
// data, per reason, since New.
func (c *Client) DataLosses() map[DataLossReason]int64 {
	out := make(map[DataLossReason]int64, len(DataLossReasons))
	for i, r := range DataLossReasons {
		out[r] = c.losses[i].Load()
	}
	return out
}

func (c *Client) countLoss(r DataLossReason) {
	for i, x := range DataLossReasons {
		if x == r {
			c.losses[i].Add(1)
			return
		}
	}
}

// lostData handles a master that lost lock state: its votes stop counting
// at once (repairPending), it is quarantined for max TTL until the health
// loop has read the lease horizon from a quorum (which usually shortens the
// quarantine), and its fencing counter, lease horizon and marker are then
// repaired (repairMaster). Safe to call from the vote path and repeatedly:
// only the first call per loss logs and counts.
func (m *master) lostData(why DataLossReason, reason string) {
	m.lostDataSeen(m.st.inc.repairGen.Load(), why, reason)
}

// lostDataSeen is lostData for a loss found in a reading sent while m's
// repair generation was gen (judge, obsDataLoss: a reading sent before the
// last repair is stale and counts no loss).
func (m *master) lostDataSeen(gen uint64, why DataLossReason, reason string) {
	m.judge(observation{kind: obsDataLoss, gen: gen, why: why, reason: reason})
}

// sighting names what read a master's state (in logs and reasons: "a
// vote", "a health probe") and the repair generation of m when the
// reading was sent (lostDataSeen).
type sighting struct {
	by  string
	gen uint64
}

// expectMarker makes value the marker m is known to carry, in a new
// repair generation: called once the write or read that established it has
// been answered (a repair, an adopted repair, the first marker), before the
// baselines that go with it are stored. Readings sent before it are judged
// stale (lostDataSeen): they may have run before that write and show the
// state it replaced, which is not a new loss.
//
// Both change under lossMu: a reader that takes it (checkVote, for a vote
// sent in an earlier generation) gets a generation and its own marker.
func (m *master) expectMarker(value *string) {
	m.st.inc.lossMu.Lock()
	m.st.inc.repairGen.Add(1)
	m.st.inc.expectedMarker.Store(value)
	m.st.inc.lossMu.Unlock()
}

// markerMatches checks the marker a vote or probe read on m (value, at the
// master's time now) against the marker m is known to carry. A missing
// marker means data lost; a different one means data replaced, unless it is
// a repair marker for this very server written after this Client saw it
// lose its data (another redlockd, or `redlockd repair-fences`): that one
// is adopted, with its quarantine.
// An adopted repair starts a new generation (expectMarker), which via
// then carries: the reading read the repair's own marker.
func (m *master) markerMatches(value string, now time.Time, via *sighting) bool {
	exp := m.st.inc.expectedMarker.Load()
	if exp != nil && *exp == value || exp == nil && !m.st.conds.has(condRepairPending) {
		return true
	}
	if value == "" {
		m.lostDataSeen(via.gen, LossStateMissing, "data lost without restart: marker missing (seen by "+via.by+")")
		return false
	}
	mk, ok := parseMarker(value)
	var old marker // a master lost before it was first seen has no marker to compare
	if exp != nil {
		old, _ = parseMarker(*exp)
	}
	if ok && mk.repaired && mk.runID != "" && mk.runID == m.runID() && !mk.at.Before(old.at) {
		m.adoptRepair(value, mk, now)
		// This reading carries the marker just adopted: it was taken
		// after that repair's write, in the generation adoptRepair
		// started, and judges the rest of what it read against it.
		via.gen = m.st.inc.repairGen.Load()
		return true
	}
	if exp == nil {
		return false // lost before it was first seen, and still not repaired
	}
	m.lostDataSeen(via.gen, LossMarkerReplaced, fmt.Sprintf("data replaced: marker %q where %q was (seen by %s; REPLICAOF, a restore or SWAPDB)", clip(value), clip(*exp), via.by))
	return false
}

// adoptRepair takes a repair marker another redlockd (or the operator)
// wrote on m as m's marker, and keeps m's votes out until the marker's
// <until>. A pending repair of this Client is done by it when the marker
// was written after this Client saw the loss.
//
// The baselines are reset before the marker is stored: a probe or vote that
// sees the adopted marker must not judge what it read against the state
// from before the repair (that would count the loss the repair ended as a
// new one). The eviction baseline is the marker's ev=, the count when the
// repair was written, so evictions after the repair are losses however
// late this Client adopts it. Not for a marker without a quarantine:
// `redlockd repair-fences` writes one on every master it finds intact,
// which it cannot always tell from one that evicted keys or rolled back
// since this Client last read it (it quarantines one whose counter lags,
// lagging, but a rollback may leave the counter where it was and take the
// horizon down); such a marker ends no loss, and what this Client read
// before is how a loss that happened before it is seen. Resetting
// there let a rollback just before a repair-fences run go unseen by every
// Client, and a second holder in (guard RepairKeepsBaselines: with it
// off, every repair marker resets them, as that code did).
func (m *master) adoptRepair(value string, mk marker, now time.Time) {
	m.st.inc.repairedAt.Store(mk.at.UnixMilli())
	covers := m.c.repairEnd(mk).After(mk.at) // a repair of a master that lost its data
	if covers || !m.c.opts.repairKeepsBaselines {
		m.st.inc.evicted.Store(mk.evicted) // -1 (the next read is the baseline) for a marker without ev=
		m.resetCountersSeen()
		m.st.mu.Lock()
		m.st.inc.replID = "" // the next probe's is the baseline
		m.st.mu.Unlock()
	}
	ends := m.st.conds.has(condRepairPending) && covers && m.repairFollowsLoss(mk)
	why := m.c.repairReason(mk)
	left := max(m.c.repairEnd(mk).Sub(now), 0)
	m.notedOperatorRepair(mk, now)
	// The repair's quarantine is set before the marker is published
	// (expectMarker) and before the pending repair ends
	// (obsRepairAdopted). Once the marker is the expected one, a vote
	// that reads it on another goroutine passes the marker check; had
	// this Client seen no loss there (another daemon repaired a FLUSHALL
	// before this one looked), nothing else keeps that vote out, and a
	// quarantine set after the publication left a window in which a
	// master with locks it lost still valid counted (a review found the
	// window; TestAdoptedMarkerIsPublishedQuarantined). Likewise after a
	// pending repair: in between, the master counted with the loss's own
	// quarantine possibly run out long ago (a review found the master
	// "up" at the adoption's log line).
	switch {
	case ends && !m.st.conds.has(condHorizonPending):
		// The repair this Client was waiting for: its <until> (the lease
		// horizon of a quorum, read after the loss this Client saw)
		// replaces the provisional max TTL quarantine lostData set, as
		// this Client's own repairMaster would (setQuarantine). Keeping
		// the longer one left the master out for max_ttl on whichever
		// replica lost the race to repair it.
		m.judge(observation{kind: obsQuarantine, reason: why, hold: left + m.c.clockAllowance(), replace: true})
	case left > 0:
		m.judge(observation{kind: obsQuarantine, reason: why, hold: left + m.c.clockAllowance()})
	}
	m.expectMarker(&value)
	if ends {
		m.judge(observation{kind: obsRepairAdopted, ends: true})
	}
}

// repairReason is the quarantine reason for a master repaired by the
// marker mk.
func (c *Client) repairReason(mk marker) string {
	if mk.byOperator {
		return fmt.Sprintf("repaired by `redlockd repair-fences` after losing its data; locks it lost may still be valid until the longest max TTL (%v) after the repair",
			max(mk.until.Sub(mk.at), c.lossTTL()).Round(time.Millisecond))
	}
	return "repaired after losing its data or a clock fault; locks it lost may still be valid until its lease horizon"
}

// notedOperatorRepair remembers, when mk is an operator's repair marker
// read on m at the master's time now, when it was written (by this
// Client's monotonic clock): should this Client later see a longer max
// TTL registered (the registry is rebuilt by the clients' probes after a
// majority lost it), the quarantine grows to that TTL after the repair
// (longerMaxTTLSeen).
func (m *master) notedOperatorRepair(mk marker, now time.Time) {
	if !mk.repaired || !mk.byOperator {
		m.st.inc.operatorRepairAt.Store(0)
		return
	}
	// Before this Client's epoch when the repair came before it started
	// (negative): a floor at the epoch (it was max(…, 1)) took a daemon
	// started after the repair for one that saw it at its start, and a
	// longer max TTL registered later kept the masters out that long
	// after the daemon's start, not after the repair (a black-box pass: a
	// daemon restarted 70 s after a repair-fences run refused everything
	// for 51 s when a client with max_ttl 60 started, while the daemons
	// that ran through the repair granted).
	at := m.c.sinceEpoch() - int64(now.Sub(mk.at))
	if at == 0 {
		at = -1 // 0 is "none"
	}
	m.st.inc.operatorRepairAt.Store(at)
}

// longerMaxTTLSeen extends the quarantine of every master repaired by an
// operator to the longer loss bound d after the repair (repairEnd).
func (c *Client) longerMaxTTLSeen(d time.Duration) {
	for _, m := range c.masters {
		at := m.st.inc.operatorRepairAt.Load()
		if at == 0 {
			continue
		}
		if left := time.Duration(at + int64(d) - c.sinceEpoch()); left > 0 {
			m.judge(observation{kind: obsQuarantine, reason: fmt.Sprintf("repaired by `redlockd repair-fences` after losing its data; a client registered a max TTL of %v since: locks it lost may still be valid until then after the repair", d), hold: left + c.clockAllowance()})
		}
	}
}

// lossAfterStartOf notes that the server process with run_id id started
// after m's pending loss, if one is pending: after a restart that lost the
// data, the new process; after any other loss, a process that replaced the
// one on which the loss was seen (that one answered after the loss, so its
// successor started later).
func (m *master) lossAfterStartOf(id string) {
	if !m.st.conds.has(condRepairPending) {
		return
	}
	m.st.mu.Lock()
	m.st.inc.lossRunID = id
	m.st.mu.Unlock()
}

// repairFollowsLoss reports whether the repair marker mk (whose run_id is
// m's current one) was written after m's pending loss happened, so that it
// repairs that loss. Either of two proofs:
//
//   - The marker carries the run_id of a process that started after the
//     loss (lossRunID): a restart is itself the loss, and a marker is
//     written by the process it names. This holds however late this
//     Client saw the restart: an operator's repair-fences often reaches a
//     restarted master before this Client's next probe does, and the time
//     rule below would then reject that repair for good (the master stayed
//     "repairing" until the next repair-fences).
//   - The marker's time, by m's clock, is at or after the moment this
//     Client saw the loss, converted to m's clock through the clock
//     reference and less the reading's allowance: the loss happened
//     before it was seen. Losses within one process (FLUSHALL, evictions,
//     clock faults) have only this proof.
func (m *master) repairFollowsLoss(mk marker) bool {
	m.st.mu.Lock()
	lossRunID := m.st.inc.lossRunID
	m.st.mu.Unlock()
	if lossRunID != "" && mk.runID == lossRunID {
		return true
	}
	lostAt := m.c.epochWall + m.st.lostAt.Load() // our clock
	ref := m.st.ref.Load()
	return ref != nil && mk.at.UnixNano() >= lostAt+ref.offset-int64(m.c.clockAllowance())
}

// evictionsUnchanged reports whether m's evicted_keys (read by a vote or a
// probe) is still the value seen when m was last found intact.
func (m *master) evictionsUnchanged(n int64, via sighting) bool {
	base := m.st.inc.evicted.Load()
	if base < 0 { // unknown since a repair by someone else: this is the baseline
		m.st.inc.evicted.CompareAndSwap(base, n)
		return true
	}
	if n == base {
		return true
	}
	if n < base {
		// The count went down without a restart: CONFIG RESETSTAT, which
		// would hide evictions made just before it.
		m.lostDataSeen(via.gen, LossEvicted, fmt.Sprintf("evicted_keys went down from %d to %d (seen by %s; CONFIG RESETSTAT?): evictions just before it would be hidden", base, n, via.by))
		return false
	}
	m.lostDataSeen(via.gen, LossEvicted, fmt.Sprintf("evicted %d keys since it was last checked (seen by %s): lock keys may be gone; use maxmemory-policy noeviction", n-base, via.by))
	return false
}

func (m *master) runID() string {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	return m.st.inc.runID
}

// marker is a parsed deployment marker:
//
//	redlockd <unix ms> [<nonce>]                                                       first written
//	repaired <unix ms> [<nonce> <until unix ms> <run_id> [ev=<n>] [since=<unix ms>] [operator|kept]]     written by a repair
//
// All times by the master's own clock. ev= is the master's INFO
// evicted_keys when the repair wrote the marker: the eviction baseline of
// a Client that adopts it. "operator" marks RepairFences' markers on
// masters that lost their data: their <until> is the operator's max TTL
// from the repair, not a quorum's lease horizon (repairEnd). "kept" marks
// RepairFences' markers on masters it found intact: the repair ended no
// loss there, so the data written before it (idempotency records, which
// outlive any lock) is still there (MasterAnswer.KeptSince stays zero).
// since= is on RepairFences' markers on masters it found intact but that
// an earlier repair had brought back from a loss (repair.lua will not say
// "kept" over that): the master has kept its data since that earlier
// repair, whose time (or its own since=) it carries, and the run ends no
// loss. Stamping such a marker's own time as the loss's end made every
// run of repair-fences on a deployment that had ever lost a master's data
// shut every gated daemon out of the placement registry for a
// registration's life + the max TTL (a black-box pass: 62–65 s at max_ttl
// 60 s, a day at the default), and take the records kept there since the
// earlier repair for lost.
type marker struct {
	repaired   bool
	at         time.Time
	until      time.Time // zero when absent
	since      time.Time // zero when absent
	runID      string
	evicted    int64 // -1 when absent
	byOperator bool
	kept       bool
}

// lostBefore reports whether mk says its master lost data before mk.at:
// a repair marker of a master that was not found intact.
func (mk marker) lostBefore() bool { return mk.repaired && !mk.kept }

// keptSince is MasterAnswer.KeptSince for mk: zero when mk says its master
// has kept its data since the deployment began there; otherwise when the
// last loss ended: its since= when it has one, else its own time.
func (mk marker) keptSince() time.Time {
	switch {
	case !mk.lostBefore():
		return time.Time{}
	case !mk.since.IsZero():
		return mk.since
	}
	return mk.at
}

func parseMarker(v string) (marker, bool) {
	f := strings.Fields(v)
	if len(f) < 2 || (f[0] != "redlockd" && f[0] != "repaired") {
		return marker{}, false
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || ms <= 0 {
		return marker{}, false
	}
	mk := marker{repaired: f[0] == "repaired", at: time.UnixMilli(ms), evicted: -1}
	if !mk.repaired || len(f) < 5 {
		return mk, true
	}
	// The optional fields after the run_id; a marker with any other is
	// not read as a repair of this version's (no run_id: never adopted).
	evicted, byOperator, kept := int64(-1), false, false
	var since time.Time
	for _, x := range f[5:] {
		if n, ok := strings.CutPrefix(x, "ev="); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 0 {
				return mk, true
			}
			evicted = v
		} else if n, ok := strings.CutPrefix(x, "since="); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v <= 0 || v > ms {
				return mk, true
			}
			since = time.UnixMilli(v)
		} else if x == "operator" && !kept {
			byOperator = true
		} else if x == "kept" && !byOperator {
			kept = true
		} else {
			return mk, true
		}
	}
	if u, err := strconv.ParseInt(f[3], 10, 64); err == nil {
		mk.until = time.UnixMilli(u)
	}
	mk.runID, mk.evicted, mk.byOperator, mk.kept, mk.since = f[4], evicted, byOperator, kept, since
	return mk, true
}

// repairEnd is when the repair marker mk lets its master's votes count
// again, by the master's clock. A Client's repair wrote <until> from a
// quorum's lease horizons, which bound every lock the master may have
// lost. An operator's (RepairFences) wrote the operator's max TTL from the
// repair: after the loss of a majority the max TTL registry may have gone
// with the data, and the operator may have given a shorter max TTL than a
// client uses, so this Client keeps the master out at least its own bound
// (lossTTL: its max TTL or a longer one it saw registered) after the
// repair, which followed the loss. A wipe of every master with
// repair-fences --max-ttl 5 at once let a daemon with max_ttl 40 grant a
// key again 5.7 s later while its 30 s lock stood.
func (c *Client) repairEnd(mk marker) time.Time {
	if mk.byOperator {
		return latest(mk.until, mk.at.Add(c.lossTTL()))
	}
	return mk.until
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// clip shortens a value read from a master for a log line or reason.
func clip(s string) string {
	if len(s) > 48 {
		return s[:48] + "…"
	}
	return s
}

// countersSeen are the highest lease horizon and command count read from a
// master, with the master's time of that read, to catch one that goes
// down later.
type countersSeen struct {
	mu      sync.Mutex
	horizon int64 // unix ms by the master's clock
	counter int64 // the fencing counter: the highest read, or written back and acknowledged
	at      int64 // the master's time of the read, unix µs
	// commands is INFO stats total_commands_processed at the latest batch
	// reading (batchstats.go), commandsAt that reading's master time (unix
	// µs): readings are ordered by their own time, not by a vote's.
	commands, commandsAt int64
}

// counterRead is what one vote or probe read of a master's counters; -1
// for what it did not read.
type counterRead struct {
	horizon, raised int64 // the lease horizon before and after the script
	counter         int64 // the fencing counter
}

// countersGrow checks what a vote (or probe) read on m at the master's time
// now against what was read before:
//
//   - the lease horizon (read before the script raised it) only ever
//     grows (max-assign): a lower value read later means m's data went
//     back in time (a rollback to an older copy: REPLICAOF a server holding
//     an old snapshot and back, DEBUG RELOAD, a durable master restored
//     from an older file);
//   - the fencing counter only ever grows too (max-assign writes, no TTL),
//     and it grows with every lock granted with m's vote (the write-back),
//     so it also shows a rollback the horizon hides: a longer lock granted
//     before the older copy was taken keeps the horizon where it was, while
//     the shorter locks granted since, and their keys, are gone. The
//     highest value known includes write-backs m acknowledged
//     (counterAtLeast). counter < 0 skips this check (fencing off);
//
// (total_commands_processed is judged by commandsGrow, against the batch
// reading, batchstats.go.)
//
// Answers read out of order (a slower reply of an earlier script) are
// judged by the master's time of the read.
func (m *master) countersGrow(r counterRead, now time.Time, via sighting) bool {
	s := &m.st.inc.countersSeen
	at := now.UnixMicro()
	h := r.horizon
	s.mu.Lock()
	prevH, prevC, prevAt := s.horizon, s.counter, s.at
	later := at >= prevAt
	if later {
		s.horizon, s.at = max(h, r.raised, prevH), at
		s.counter = max(r.counter, prevC)
	}
	s.mu.Unlock()
	switch {
	case !later:
		return true
	case h < prevH:
		m.lostDataSeen(via.gen, LossRolledBack, fmt.Sprintf("data went back in time: its lease horizon fell from %d to %d (seen by %s; a rollback to an older copy of its data)", prevH, h, via.by))
		return false
	case r.counter >= 0 && r.counter < prevC:
		m.lostDataSeen(via.gen, LossRolledBack, fmt.Sprintf("data went back in time: its fencing counter fell from %d to %d (seen by %s; a rollback to an older copy of its data)", prevC, r.counter, via.by))
		return false
	}
	return true
}

// commandsGrow checks total_commands_processed n, read on m at the
// master's time now by a batch reading (batchstats.go), against the
// latest reading before it: the count only ever grows, except at a
// restart (caught by its run_id: a loss unless the master is durable,
// whose count starts again from zero, statsRestarted) or a CONFIG
// RESETSTAT, which also resets evicted_keys and so could hide evictions:
// treated as a loss. Readings of different lanes arrive out of order;
// each is judged against the readings the master took before it (by its
// own TIME, read in the same script as the count), so a slower answer of
// an earlier reading is not taken for a drop.
func (m *master) commandsGrow(n int64, now time.Time, via sighting) bool {
	s := &m.st.inc.countersSeen
	at := now.UnixMicro()
	s.mu.Lock()
	prevN, prevAt := s.commands, s.commandsAt
	later := at >= prevAt
	if later {
		s.commands, s.commandsAt = n, at
	}
	s.mu.Unlock()
	if later && n < prevN {
		m.lostDataSeen(via.gen, LossEvicted, fmt.Sprintf("its statistics were reset (total_commands_processed fell from %d to %d, seen by %s; CONFIG RESETSTAT), which would hide evictions", prevN, n, via.by))
		return false
	}
	return true
}

// counterAtLeast notes that m acknowledged, at the master's time now, a
// fence write-back of f: its counter is at least f from then on. The lane
// calls it as it delivers the answer (master.deliver), before any answer
// it read after it on the same connection is judged: an acquire reads its
// write-back's answers only after its last vote (acquireTally.awaitEarly),
// and a vote of another acquire run on m after the write-back must be
// judged against f. A reading on another connection (a second lane,
// WithLanes; a probe) with a later master time may still be judged first,
// and the acknowledgement is then not recorded (at < s.at): a rollback in
// between goes unseen, as for any two readings judged out of order.
func (m *master) counterAtLeast(f int64, now time.Time) {
	s := &m.st.inc.countersSeen
	at := now.UnixMicro()
	s.mu.Lock()
	if at >= s.at {
		s.counter, s.at = max(s.counter, f), at
	}
	s.mu.Unlock()
}

// statsRestarted notes that m is a new server process, whose INFO stats
// (total_commands_processed, evicted_keys) start from zero: they are the
// baselines, so a restart of a durable master is not taken for a CONFIG
// RESETSTAT (countersGrow, evictionsUnchanged). The lease horizon and the
// fencing counter are data, kept by a durable restart, and stay compared.
//
// Why a vote can rely on this although its reply carries no run_id: every
// vote, and its batch's statistics reading (batchstats.go), goes over a
// connection whose onConnect read the run_id of the process that answers
// it, so a vote or reading of the new process is judged after this ran. The stats of a restart are counted from zero, not from the
// first read of the new process, so keys it evicted before that read are
// still a loss. Two things stay unseen, as at any restart: evictions of
// the old process after its last read (maxmemory-policy noeviction rules
// them out; the probe warns otherwise), and a vote of the old process
// whose answer is judged after the restart was seen raises the baseline
// back, so the next vote is taken for a RESETSTAT: a loss, the safe side.
func (m *master) statsRestarted() {
	s := &m.st.inc.countersSeen
	s.mu.Lock()
	s.commands = 0
	s.mu.Unlock()
	m.st.inc.evicted.Store(0)
}

// resetCountersSeen forgets what was read: after a repair, the repaired
// state is the new baseline.
func (m *master) resetCountersSeen() {
	s := &m.st.inc.countersSeen
	s.mu.Lock()
	s.horizon, s.commands, s.counter, s.at, s.commandsAt = 0, 0, 0, 0, 0
	s.mu.Unlock()
}

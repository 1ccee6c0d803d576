package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"log/slog"
)

// Lease horizon: how long a master that lost its data must stay out.
//
// Every master keeps a horizon (one key per master, markerKey + ":horizon",
// unix ms by the master's own clock): the acquire and extend scripts
// max-assign it to now + the key's TTL whenever they set or extend a key,
// in the same atomic step. So on every master that voted for lock L, the
// horizon is at least the moment L's key expires there.
//
// Claim: when master m loses its data (or its clock jumps forward), and
// the health loop then reads the horizons of a quorum R of the other
// counting masters, every lock L granted with m's vote before the loss has
// ended by the latest of those horizons (plus the drift allowance).
//
// Proof: L was granted by a quorum Q of counting masters, each of which
// max-assigned its horizon to at least L's expiry there; horizons never
// decrease (max-assign, no TTL). Q minus m holds at least quorum − 1
// masters among the N − 1 others, and R is a quorum among those N − 1;
// quorum + quorum − 1 = N > N − 1, so they share a master s. s still has
// its horizon: it counts, and a counting master that had lost its data
// since L was granted would itself still be kept out by this rule until L
// ended. L's validity ends before L's key expires on s (the drift
// allowance covers the clocks; clock.go), and the key expires no later
// than s's horizon. The read happens after the loss was seen, so any lock
// granted in between (without m: a lost master refuses to vote, and its
// vote is checked in the same script) is covered too, and in any case
// needs no protection from m: a later quorum meets its own.
//
// When fewer than a quorum of the others can be read, m stays out for max
// TTL from the loss (the Redis Redlock page's "delayed restart"), and never
// longer than that in any case. "Max TTL" there is the longest any client
// of the masters allows, which may be another client's (maxttl.go): a lock
// granted before the loss ends at most that long after it. The quarantine
// is written on m itself (the repair marker's <until>), so every daemon,
// including one started later, keeps m out until then.

// othersRead is what repairMaster reads from the other counting masters.
type othersRead struct {
	answers int
	counter int64         // highest fencing counter
	until   time.Time     // latest end of a lease horizon, by our monotonic clock
	maxTTL  time.Duration // longest max TTL registered (maxttl.go)
}

// readOthers reads the fencing counter, the lease horizon and the clock of
// every counting master but m, each master's three in one atomic read
// (horizon_read.lua).
//
// Each reading is judged as a probe's is (countersGrow, with the data-loss
// guard on): a master whose lease horizon or fencing counter is below what
// this Client read from it before lost its data since (a rollback), and is
// neither counted nor read from — it is taken for a loss now, which a probe
// would only see in the next round. Without this, a majority rolled back one
// master at a time (DEBUG RELOAD of an old dump, a restore of older files)
// was repaired master by master: the first one seen from a quorum that held
// the two not yet seen, so the deployment reopened by itself, where a loss
// beyond N − quorum must wait for `redlockd repair-fences` (found by a
// black-box pass: 3 of 4 such rollbacks reopened;
// TestRepairReadsSeeARollbackOfTheOthers). The master's TIME is read in the
// same script before the two keys, so the values are at least as new as
// the time they are judged at: a vote judged with a later time never makes
// an older reading look like a fall.
func (c *Client) readOthers(ctx context.Context, m *master) othersRead {
	var r othersRead
	keys := c.horizonReadKeys()
	for _, o := range c.masters {
		if o == m || !o.counts() {
			continue
		}
		seen := sighting{by: "a repair's read of the other masters", gen: o.st.inc.repairGen.Load()}
		pipe := o.probe.Pipeline()
		state := pipe.Eval(ctx, horizonReadLua, keys)
		registered := pipe.Eval(ctx, maxTTLLua, []string{c.opts.maxTTLKey}, 0, maxTTLCeilingMS)
		_, _ = pipe.Exec(ctx)
		received := time.Now()
		now, h, counter, err := parseHorizonRead(state)
		if err != nil || h < 0 {
			continue // a counting master keeps its horizon: missing is an error here
		}
		if c.opts.dataLossGuard && c.opts.repairJudgesReads &&
			!o.countersGrow(counterRead{horizon: h, raised: h, counter: counter}, now, seen) {
			continue
		}
		r.counter = max(r.counter, counter) // -1 (missing) counts as none
		r.answers++
		if d, _, err := registryAnswer(registered); err == nil {
			r.maxTTL = max(r.maxTTL, d)
		}
		left := max(time.Duration(h-now.UnixMilli())*time.Millisecond, 0)
		end := received.Add(left + time.Duration(float64(left)*c.budgetDrift()) + c.drift(0))
		if end.After(r.until) {
			r.until = end
		}
	}
	return r
}

// repairMaster brings back a master that lost its data (repairPending) or
// whose keys may have expired early (horizonPending): it raises m's
// fencing counter to the highest a quorum of the others holds, sets its
// quarantine to their lease horizon (capped at the longest registered max
// TTL from the loss, maxttl.go), and writes m's horizon and the repair
// marker carrying that quarantine.
// Without a quorum to read from, a lost master waits for an operator's
// RepairFences; a clock-faulted one keeps its max TTL quarantine and is
// marked so. Runs under probeMu; retried every round until it succeeds.
func (c *Client) repairMaster(m *master) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.healthTimeout)
	defer cancel()
	lost := m.st.conds.has(condRepairPending)
	r := c.readOthers(ctx, m)
	capAt := c.epoch.Add(time.Duration(m.st.lostAt.Load()) + max(c.lossTTL(), r.maxTTL))
	until, source := capAt, "max TTL (no quorum of the other masters to read a lease horizon from)"
	by := ""         // a Client's repair
	var expect []any // the marker repaired from, when it must still be there
	switch {
	case r.answers >= c.quorum:
		if r.until.Before(capAt) {
			until = r.until
		}
		source = fmt.Sprintf("the lease horizon of %d other masters", r.answers)
	case lost && c.operatorRepairedSinceLoss(ctx, m, &expect):
		// After the loss of a majority, `redlockd repair-fences` found
		// this master intact (it does not compare lease horizons: a
		// rollback that left the counter in place looks intact) and
		// wrote a repair marker that ends no loss ("kept", or a plain
		// one after an earlier repair). It did raise every counter above
		// the highest any master held, which is what this Client could
		// not do without a quorum; what is left is the quarantine. The
		// marker written here is an operator's (repair.lua "operator"):
		// every Client keeps the master out at least its own max TTL after
		// it (repairEnd), as after an operator's repair of a lost master,
		// and takes it for one that lost its data before it
		// (marker.lostBefore: idempotency records written earlier are not
		// trusted), which the "kept" marker would have hidden from every
		// Client that did not see the loss. Without it, a Client that saw
		// a majority roll back stayed closed until it was restarted.
		until = time.Now().Add(max(c.lossTTL(), r.maxTTL))
		source = "the max TTL after `redlockd repair-fences`, which found it intact after this Client saw it lose data"
		by = "operator"
		// The counter repair-fences raised, and at least the highest
		// fence this Client issued: a loss after that run, unseen (a
		// second rollback within a probe round), cannot leave the master
		// below it; the write happens only if the marker read is still
		// there (repair.lua ARGV[7]).
		r.counter = max(r.counter, c.fenceIssued.Load())
	case lost:
		c.noQuorumToRepair(m, r.answers)
		return
	}
	hold := max(time.Until(until), 0)
	ms := strconv.FormatInt(hold.Milliseconds()+1, 10)
	nonce, err := c.opts.nonce()
	if err != nil {
		return
	}
	keys := []string{c.opts.markerKey, c.opts.horizonKey}
	if c.opts.fenceKey != "" {
		keys = append(keys, c.opts.fenceKey)
	}
	args := append([]any{strconv.FormatInt(r.counter, 10), ms, nonce[:16], ms, m.runID(), by}, expect...)
	out, err := repairScript.Run(ctx, m.probe, keys, args...).Slice()
	if err == nil && len(out) == 3 && out[0] == "" {
		return // the marker changed since it was read: judged at the next probe, repaired at the next round
	}
	if err != nil || len(out) != 3 {
		c.opts.logger.Warn("master repair failed; retried next round", masterAttr(m), slog.Any("error", err))
		m.repairFailed(err)
		return
	}
	value, _ := out[0].(string)
	m.expectMarker(&value)
	m.resetCountersSeen()
	replID, _ := out[2].(string)
	m.st.mu.Lock()
	m.st.inc.replID = replID
	m.st.mu.Unlock()
	if mk, ok := parseMarker(value); ok {
		m.st.inc.repairedAt.Store(mk.at.UnixMilli())
		m.notedOperatorRepair(mk, mk.at) // written just now
	}
	m.st.inc.evicted.Store(m.st.lastEvicted.Load())
	m.st.mu.Lock()
	reason := strings.TrimSuffix(m.st.quarantineReason, ";")
	m.st.mu.Unlock()
	// Repaired now: what it waited for and the operator's step no longer
	// apply (the reason kept "run `redlockd repair-fences`" after a
	// Client repaired the master itself).
	for _, tail := range []string{"; counts again", noQuorumToRepairReason, repairFailedReason} {
		if i := strings.Index(reason, tail); i >= 0 {
			reason = reason[:i]
		}
	}
	m.judge(observation{kind: obsRepaired, reason: fmt.Sprintf("%s; counts again when every lock it may have held has ended (%s)", reason, source), hold: hold, counter: r.counter})
}

// operatorRepairedSinceLoss reports whether m, whose loss this Client saw
// (repairPending), carries a repair marker of its present server written
// after that loss (repairFollowsLoss) which this Client did not adopt as
// ending it: a "kept" marker of `redlockd repair-fences`, or a plain one
// that marker became over an earlier repair (repair.lua), neither with a
// quarantine. An operator's marker that ends the loss is adopted by the
// probe that reads it (markerMatches), before the repair round.
// When it does, *expect is the marker read, as repair.lua's ARGV[7].
func (c *Client) operatorRepairedSinceLoss(ctx context.Context, m *master, expect *[]any) bool {
	v, err := m.probe.Get(ctx, c.opts.markerKey).Result()
	if err != nil {
		return false
	}
	mk, ok := parseMarker(v)
	if ok && mk.repaired && mk.runID != "" && mk.runID == m.runID() && !c.repairEnd(mk).After(mk.at) && m.repairFollowsLoss(mk) {
		*expect = []any{v}
		return true
	}
	return false
}

// repairFailedReason starts what repairFailed adds to the reason, and
// repairMaster takes away.
const repairFailedReason = "; its repair failed, retried every probe round: "

// repairFailed notes in m's reason why its repair failed (a pending repair
// shows as MasterRepairing): a master whose memory is full refuses the
// repair's writes, and only an operator can change that.
func (m *master) repairFailed(err error) {
	why := "bad reply"
	switch {
	case err != nil && strings.Contains(err.Error(), "OOM"):
		why = "its memory is full (used memory above maxmemory under noeviction refuses writes): free memory or raise maxmemory"
	case err != nil:
		why = err.Error()
	}
	m.st.mu.Lock()
	if i := strings.Index(m.st.quarantineReason, repairFailedReason); i >= 0 {
		m.st.quarantineReason = m.st.quarantineReason[:i]
	}
	m.st.quarantineReason += repairFailedReason + why
	m.st.mu.Unlock()
}

// noQuorumToRepairReason is what noQuorumToRepair adds to the quarantine
// reason, and repairMaster takes away.
const noQuorumToRepairReason = "; no quorum of counting masters to repair it from: run `redlockd repair-fences`"

// noQuorumToRepair notes that a lost master's repair must wait: no quorum of
// counting masters kept their data (a majority lost it), so only an
// operator's RepairFences can bring it back.
func (c *Client) noQuorumToRepair(m *master, answers int) {
	for _, o := range c.masters {
		if o != m && o.up.Load() && !o.st.conds.has(condProbed) {
			return // a startup round: the others count from the next one
		}
	}
	if m.st.repairWarned.Swap(true) { // once per loss, not every probe round
		return
	}
	m.st.mu.Lock()
	if !strings.Contains(m.st.quarantineReason, noQuorumToRepairReason) {
		m.st.quarantineReason += noQuorumToRepairReason
	}
	m.st.mu.Unlock()
	c.opts.logger.Warn("master repair postponed: no quorum to read from; retried every probe round (after the loss of a majority: redlockd repair-fences)", masterAttr(m), slog.Int("answers", answers))
}

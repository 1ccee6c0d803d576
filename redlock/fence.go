package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Fencing tokens (Kleppmann, "How to do distributed locking": "fencing").
//
// Every master keeps a counter (one key, Option WithFenceKey). The acquire
// script returns the master's counter with its vote, and with its refusal;
// once a quorum Q2 has voted, the acquirer takes f = max(counters of every
// answer heard) + 1 and writes f back with a max-assign, only where its
// token still holds the lock, to a quorum Q3, before it reports success.
// Validity is computed after the write-back.
//
// Claim: if lock L1 on a key ended before L2 on the same key was acquired,
// fence(L2) > fence(L1).
//
// Proof: L1 reported success only after its write-back quorum Q1 held
// counters ≥ f1. Counters never decrease: writes are max-assign and the key
// has no TTL. L2's votes were cast after L1 ended, hence after Q1's writes.
// Q1 and L2's voting quorum Q2 are both majorities of the same N masters, so
// they share a master; its counter, read atomically with its vote, is ≥ f1,
// hence f2 = max + 1 > f1.
//
// The one way a counter decreases is data loss: a master restarted without
// durable persistence. Such a master does not count (its votes are ignored)
// until its counter has been repaired: raised to the maximum read from a
// quorum of the counting masters. Q1 minus the lost master still holds
// quorum−1 masters among the other N−1, and a quorum read among those N−1
// meets it (quorum + quorum−1 = N > N−1), so the repaired counter is ≥ f1.
//
// Assumptions: at most N − quorum masters lose their data between L1's
// write-back and L2's vote and each is repaired before it counts; a lost
// master is detected (run_id change seen by a probe or a new connection, or
// the startup marker rule) before it next votes. When more than N − quorum
// masters lose their data no quorum can repair a counter: those masters
// stay out until an operator runs RepairFences (`redlockd repair-fences`),
// which raises every counter past the highest left anywhere by a margin or
// to a floor the operator knows (the resource's highest accepted fence).
// That step leaves the proof: its bound is the operator's.
//
// Counters of every master heard (with the granted-lock check, granted.go).
//
// The proof above needs the lost master to be seen before it votes; a
// master rolled back to an older copy of its data (DEBUG RELOAD of an old
// dump, SWAPDB, REPLICAOF an old copy) while no running client had read
// it before, e.g. across a daemon restart, is not. If it is the only
// master Q1 and Q2 share, max(counters of Q2) is below f1. With the
// granted-lock check an acquire hears every master before it grants (or
// until they fail), so its fence is taken above the counters of all of
// them, voters or not.
//
// Claim: if lock L1 ended before L2 was acquired with the check on, and
// at most N − quorum masters lose data (seen or not) or fail to answer
// L2 between L1's write-back and L2's grant, fence(L2) > fence(L1).
//
// Proof: let F be those masters; |F| ≤ N − quorum < quorum ≤ |Q1|, so a
// master s of Q1 is not in F: it kept a counter ≥ f1 and answered L2 (its
// answer, a vote or a refusal, carries its counter), so f2 > f1.
//
// The early write-back (acquire.go) starts at the votes needed, with the
// counters heard by then; when a later answer shows a counter ≥ that
// fence, the grant writes a new one, above it, to its voters before it
// returns (Client.FenceRewrites counts those). Without the check (or with
// the guard FenceAboveEveryAnswer off) the fence is the first proof's, and
// an unseen rollback of the one shared master repeats f1 (the fuzz finding
// docs/findings/fuzz-seed-1452374815532617200;
// TestFenceAboveEveryCounterHeard).
//
// One counter serves every
// key of a Client: fences form one global sequence, so state does not grow
// with the number of keys and never resets when a lock expires; two
// different keys may receive the same fence, which is harmless because
// fences are compared per resource.
//
// The fence stored with the lock (Status.Fence, Extend's Lock.Fence).
//
// The write-back also stores f with the lock, on each master where it
// succeeds, in the lock's fence record "<fence key>:<lock key>" holding
// "<f> <token>" with the lock's own PTTL, set in the same script that
// checked the token holds the lock. Extend gives the record the lock's new
// PTTL in the script that extends the lock, release deletes it in the
// script that deletes the lock, and a record expires with its lock, to the
// millisecond: each script sets every expiry from one TIME reading
// (scripts/expiry.lua). So a record is present on
// a master while the lock it was written for is. A master that has not run the write-back yet
// has no record for the token, or a stale one of an earlier holder.
//
// Claim: a status that finds the lock held reports either the fence its
// holder's Acquire returned, or 0 — never another fence.
//
// Proof: Held means a quorum H of counting masters hold one token T. A
// record counts only when the token in it is the one in the lock key on the
// same master, read in the same script, so every fence reported for T was
// written by T's own write-back; T's acquire computed one f and wrote only
// f, and tokens are random and never reused, so every reported fence is f.
// Not 0 when T's Acquire succeeded: it wrote the record to a quorum Q3
// while T held the lock there, and those records live as long as T's keys
// on Q3; H and Q3 are majorities of the same N masters, so they share a
// master, which reports f. An extending quorum meets Q3 the same way.
//
// When 0 is reported for a held lock: T's write-back has not reached the
// masters of H yet (its Acquire has not returned), a master of Q3 lost its
// data (it does not count), or the lock was acquired, or extended, by a
// daemon from before fence records (a rolling upgrade): that daemon's
// release and extend do not know the record, so after its extend the
// record expires before the lock, and after its release the record stays
// until its own expiry, bound to a token no lock holds any more. Its
// compare-and-delete and compare-and-extend still work on a lock a newer
// daemon wrote: the lock key still holds the bare token. The record costs
// one more key per held lock on each master (about as much memory as the
// lock key itself).

// errFenceLockGone: the fence write-back found the lock no longer held by
// its token on that master (it expired or was evicted in between).
var errFenceLockGone = errors.New("fence write-back: lock no longer held there")

// writeFence writes fence back to every master in only, and returns how
// many counting masters stored it while the token held the lock there,
// deciding as soon as need of them have — or, with failFast, as soon as
// need can no longer be reached (otherwise it waits for every answer, so
// that a second round knows how many it still needs).
func (c *Client) writeFence(ctx context.Context, set *lockSet, token string, fence int64, only []bool, need int, failFast bool, res *OutcomeError) int {
	return c.sendFence(set, token, fence, only).read(ctx, need, failFast, res)
}

// fenceWrite is a fence write-back sent (sendFence) and not yet read: an
// acquire reads it after its last vote (acquireTally.awaitEarly), with no
// goroutine of its own in between.
type fenceWrite struct {
	c     *Client
	out   *fan
	sent  int
	start time.Time
	only  []bool
}

// sendFence fans fence.lua out to the masters in only.
func (c *Client) sendFence(set *lockSet, token string, fence int64, only []bool) *fenceWrite {
	start := time.Now()
	w := set.fenceCall(c, token, fence)
	w.only, w.fence = only, fence
	out, sent := c.fanout(w, start)
	return &fenceWrite{c: c, out: out, sent: sent, start: start, only: only}
}

// read gathers fw's answers as writeFence says.
func (fw *fenceWrite) read(ctx context.Context, need int, failFast bool, res *OutcomeError) int {
	c := fw.c
	written, failed := 0, 0
	c.gather(ctx, fw.out, fw.start, fw.only, func(r reply) bool {
		m := c.masters[r.idx]
		var excluded error
		if r.err == nil {
			excluded = m.notCounting()
		}
		switch {
		case r.err != nil:
			failed++
			// Labelled: the acquire's error lists these beside its votes
			// (5 of 5 votes and 3 failed read as a contradiction).
			var me *MasterError
			err := r.err
			if errors.As(err, &me) {
				err = me.Err
			}
			res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: fmt.Errorf("fence write-back: %w", err)})
		case excluded != nil:
			failed++
			res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: fmt.Errorf("fence write-back: %w", excluded)})
		default:
			// The lane recorded the acknowledgement (call.fence).
			v, _ := parseFenceReply(r.val)
			if v == 1 {
				written++
			} else if v == codeLost {
				failed++
				m.lostDataSeen(r.gen, LossStateMissing, "data lost without restart: marker, lease horizon or fencing counter missing (seen by a fence write-back)")
				res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: ErrMasterDataLost})
			} else {
				failed++
				res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: errFenceLockGone})
			}
		}
		return written >= need || failFast && failed > fw.sent-need
	}, func() int {
		if failFast {
			return min(need-written, fw.sent-need+1-failed)
		}
		return need - written
	})
	return written
}

// repairedRecently quarantines a master first seen with RepairFences' marker
// whose server started less than max TTL ago: the locks it lost when it
// restarted may still be valid until max TTL after its start.
func (m *master) repairedRecently() {
	m.st.mu.Lock()
	v, uptime := m.st.markerValue, m.st.uptime
	m.st.mu.Unlock()
	if mk, ok := parseMarker(v); !ok || !mk.repaired {
		return
	}
	// INFO's uptime is rounded down: one more second.
	if left := m.c.lossTTL() - uptime + time.Second; left > 0 {
		m.judge(observation{kind: obsQuarantine, reason: "repaired by an operator after losing its data; locks it lost may still be valid", hold: left})
	}
}

// restoredFromSnapshot applies the marker rule's last case to a master seen
// for the first time with a marker: when the marker was written more than a
// second before the server last started (both by its clock; the start is
// derived from INFO's whole-second uptime, so it may be up to a second
// late) and the server is not durable
// (appendfsync always), it restarted with data from before its restart (an
// RDB snapshot, a lazily fsynced AOF) and may miss keys written since: it is
// quarantined until max TTL after its start, and its fencing counter
// repaired from a quorum, as for a master that lost its data. A Client that
// was running sees the run_id change instead.
//
// Durable means durable since the server loaded its data: appendonly and
// appendfsync always now, and no AOF rewrite since the start
// (durableSinceStart). CONFIG SET appendonly yes after a start from an RDB
// snapshot rewrites the AOF, so a snapshot made to look durable afterwards
// is still taken for one.
func (m *master) restoredFromSnapshot() bool {
	m.st.mu.Lock()
	v, started, uptime := m.st.markerValue, m.st.startedAt, m.st.uptime
	durable := durableSinceStart(m.st.durable, m.st.aofRewrite)
	m.st.mu.Unlock()
	if started.IsZero() {
		return false
	}
	why, restored := restoredData(v, started, uptime, durable, m.c.lossTTL())
	if !restored {
		return false
	}
	m.lostData(LossSnapshot, why)
	m.lossAfterStartOf(m.runID())
	return true
}

// durableSinceStart reports whether a server that is durable now (appendonly
// yes, appendfsync always) loaded its data from its append-only file, by
// INFO persistence (aofRewrite). Turning appendonly on at run time starts
// an AOF rewrite, or schedules one while a BGSAVE runs: a rewrite since the
// start (aof_last_rewrite_time_sec is the last one's duration, -1 until
// one ended; CONFIG RESETSTAT zeroes aof_rewrites but not it), one running
// or one scheduled means the data may have come from a snapshot. Where the
// fields are missing (before Redis 7.0) the configuration is taken as it
// is: nothing else tells. A durable server rewritten since its start
// (BGREWRITEAOF, an automatic rewrite) is not told from one turned durable
// after loading a snapshot, and is taken for the latter: quarantined by a
// Client that meets it for the first time within max TTL of its start, the
// safe side.
func durableSinceStart(durable bool, rw aofRewrite) bool {
	return durable && (!rw.known || !rw.since)
}

// aofRewrite is what INFO persistence says of AOF rewrites since the
// server started.
type aofRewrite struct {
	known bool // the fields were read (Redis 7.0 and later)
	since bool // a rewrite ended, runs or is scheduled since the start
}

// parseAOFRewrite reads aofRewrite from an INFO text with the persistence
// section.
func parseAOFRewrite(info string) aofRewrite {
	f := parseInfoFields(info, "aof_rewrites", "aof_last_rewrite_time_sec", "aof_rewrite_in_progress", "aof_rewrite_scheduled")
	n, err := strconv.ParseInt(f["aof_rewrites"], 10, 64)
	last, err2 := strconv.ParseInt(f["aof_last_rewrite_time_sec"], 10, 64)
	if err != nil || err2 != nil {
		return aofRewrite{}
	}
	return aofRewrite{known: true, since: n > 0 || last != -1 || f["aof_rewrite_in_progress"] == "1" || f["aof_rewrite_scheduled"] == "1"}
}

// restoredData is the marker rule's last case, for a master whose server
// started at started (uptime ago, by its clock) with markerValue: not
// durable and the marker written more than a second before the start, while
// a lock it missed may stand (it started less than maxTTL ago; uptime is
// rounded down, hence the second). why says so. Shared by a Client's first
// look at a master (restoredFromSnapshot) and RepairFences.
func restoredData(markerValue string, started time.Time, uptime time.Duration, durable bool, maxTTL time.Duration) (why string, restored bool) {
	mk, ok := parseMarker(markerValue)
	if !ok || durable || !mk.at.Before(started.Add(-time.Second)) || maxTTL-uptime+time.Second <= 0 {
		return "", false
	}
	return fmt.Sprintf("restarted %v ago with data older than its restart (marker written %v before it): an RDB snapshot or an AOF not fsynced always may miss recent locks", uptime, started.Sub(mk.at).Round(time.Second)), true
}

// parseFenceReply decodes fence.lua's "code sec usec" (one string, as a
// vote's: parseVote); code 0 for a reply of another shape.
func parseFenceReply(v any) (code int64, at time.Time) {
	s, ok := v.(string)
	if !ok {
		return 0, time.Time{}
	}
	var f [3]int64
	if _, sep, ok := cutInts(s, f[:]); !ok || sep {
		return 0, time.Time{}
	}
	return f[0], time.Unix(f[1], f[2]*int64(time.Microsecond))
}

// issuedFloor returns the highest of counter (the highest fencing counter
// among an acquire's answers) and the highest fence this Client issued. The
// counters stay above every fence issued unless more than N − quorum
// masters lose their data and an operator's RepairFences sets them from a
// floor that is too low (`--min` below the fences the resources accepted,
// or every master wiped): fences would then go back. A running Client knows
// better for its own fences, so it continues above them, and says so once.
// A Client started later knows only the counters.
//
// before is the highest fence this Client had issued when the acquire sent
// its votes. Each of those was on a quorum of counters by then, and the
// votes came from a quorum, which shares a master with it: a counter below
// before means that counters went back. A fence issued since, by an
// overlapping acquire of another key, may be above counter with nothing
// wrong (its write-back reached the masters after they voted here), so it
// raises the floor without a warning.
func (c *Client) issuedFloor(counter, before int64) int64 {
	if counter >= before {
		c.fenceBelowWarned.Store(false)
	} else if !c.fenceBelowWarned.Swap(true) {
		c.opts.logger.Warn("the masters' fencing counters are below a fence this client issued (a repair after a majority lost its data set them too low?): fences continue above the highest issued",
			slog.Int64("counter", counter), slog.Int64("highest_issued", before))
	}
	return max(counter, c.fenceIssued.Load())
}

// fenceExhaustedOnce logs, once per Client, that grants are refused
// because the fencing counter (or a fence this Client issued), at floor,
// leaves no fence up to MaxFence.
func (c *Client) fenceExhaustedOnce(floor int64) {
	if !c.fenceExhaustedLogged.Swap(true) {
		c.opts.logger.Error("no fencing token is left: the masters' fencing counter is at the largest fence redlockd issues (2^53 − 1), every acquire is refused; it gets there only by a fencing counter set by hand near it",
			slog.Int64("counter", floor), slog.Int64("max_fence", MaxFence))
	}
}

// issued records fence as issued by this Client.
func (c *Client) issued(fence int64) {
	for {
		cur := c.fenceIssued.Load()
		if fence <= cur || c.fenceIssued.CompareAndSwap(cur, fence) {
			return
		}
	}
}

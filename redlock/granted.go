package redlock

import (
	"context"
	"errors"
)

// No grant over a granted lock.
//
// Detecting that a master lost its data (dataloss.go) rests on state the
// master keeps: its marker, lease horizon, fencing counter and INFO
// statistics. Other writers legitimately raise the horizon and the counter
// (another client's write-back, the fence catch-up, `repair-fences`), an
// extend raises neither, and ordinary traffic refills total_commands_processed
// after a CONFIG RESETSTAT. So a master rolled back to an older copy of its
// data, or one that evicted a lock key, can look intact to a client that
// did not write what was lost; and a rolled-back master has nothing left to
// show. What such a master cannot touch is the state on the OTHER masters.
//
// The fence write-back (fence.go) stores "<fence> <token>" with the lock,
// only where the token holds it, and only after a quorum voted: a fence
// record for the token that holds the key marks a granted lock. It goes to
// every master whose vote counted or was still awaited when the quorum
// was reached (acquireTally.startEarlyWriteBack), so a granted lock's key
// is bare (no record) only where its vote failed first and landed later. The acquire
// script reports it (extra 'g') when it refuses a vote because another
// token holds the key. An acquire that has a quorum of votes grants only
// once every master it did not win has answered (or failed: timed out,
// stuck, refused the connection) without such a report; one report refuses the grant
// (ErrLockHeld), and the keys it set are released. A lock with a
// lock-delay keeps its fence record for its delay, and a vote on the free
// key in that delay reports 'D', evidence of the same kind (lockdelay.go,
// "Silent losses of a record").
//
// Masters marked down. The vote goes to a master this Client marked down
// too (call.hearDown): the mark is the last probe's view, up to a health
// interval old, and a master that was paused, partitioned away or
// restarted with its data may answer again — holding a granted lock that
// the masters which voted lost. Only what the lane sees now answers such
// a vote at once: a pipeline stuck past the per-master timeout
// (ErrMasterBusy), a dial that failed less than its redial wait ago
// (1 ms after a refused connection, 100 ms after a timed-out, unreachable
// or unresolvable one: refusedRedial, otherRedial); otherwise it is
// dialled again. refusedAsConn keeps go-redis's dial circuit breaker,
// which answers dials with the last failure for up to a second, out of
// the way. So a master counts as failing here while it is stuck or
// failing dials, and for at most that wait after. What that costs: an
// acquire waits for such a master's answer, up to the per-master timeout,
// when its lane is neither stuck nor within a redial wait — the first
// per-master timeout of each stall (a paused master's pipeline is retried
// every stall timeout) or of each timed-out dial; with a master's process
// gone, a refused dial at most once a millisecond
// (BenchmarkOneMasterKilled: 0.92× the cycles of not asking it, c=64;
// docs/performance-history.md). Found by an adversarial pass: a vote to a master
// marked down failed at once, so a contender with two silent losses was
// granted while the master that came back held the lock
// (TestGrantedLockOnAMasterMarkedDown, and
// TestGrantedLockOnAMasterRestartedWhileRefused for the circuit breaker).
//
// Claim: while a lock L granted with its fence written back to a quorum Q3
// is valid, and at most N − quorum masters have lost L's key (by any
// means: rollback, eviction, restart, an operator) or fail to answer in
// time, no acquire of L's key with the check on grants it.
//
// Proof: let F be the masters that lost L's key or do not answer the
// contender in time; |F| ≤ N − quorum < quorum ≤ |Q3|, so some master s of
// Q3 is not in F. s holds L's key and its record (they expire together, and
// the key outlives L's validity by the drift allowance; an extend writes
// the record on every master it extends, extend.lua, so the same holds for
// the quorum that backs an extended validity). The contender's SET NX
// fails on s, so s is not one of its yes votes, and a contender with a
// quorum of votes still waits for every master outside them: s answers,
// with the report, and the grant is refused.
//
// Gaps, exactly:
//   - fencing off (WithFenceKey("")): there are no records, and the check
//     has nothing to see;
//   - a master losing L's key between L's votes and its write-back there
//     (one round trip), while the contender's votes reach the masters that
//     kept L in that same window, before the write-back;
//   - more than N − quorum masters losing L or failing at once. Failing
//     includes answering the contender after the per-master timeout: on a
//     loaded machine, two masters that lost L and a third that is slow are
//     three. What is left then: since every master holding L's key from
//     its vote holds the record, the contender is still refused unless
//     every master left holding L's record fails to answer it. With the record on
//     the first quorum of voters alone, one slow record holder sufficed
//     while a bare copy answered "held" (TestRecordOnEveryMasterHoldingTheLock;
//     a black-box pass, two masters' lock keys and records deleted every
//     0.3 s under load: two holders in 2 of 5 runs). The price: two more
//     write-backs per healthy cycle, about 8 % of the library's cycles
//     (docs/performance.md).
//
// WithExtraVotes closes the first two for up to 2k silent losses, at the
// cost of availability.
//
// Cost: on a refusal the script reads the holder's record (one GET); a
// winning acquire waits for the masters it did not need for its quorum
// (they were sent the vote at the same time), at most the per-master
// timeout for one that is slow, stuck or unreachable and not yet seen to
// be (above); its fence write-back
// starts at the needed votes, so the two waits overlap. Measured at c=1 on
// five local masters sharing two cores: no difference left within the
// noise (BenchmarkSafetyModes; docs/performance.md). The price of the check is liveness after a release that did
// not reach a master (down at the time) that comes back before the lock's
// TTL ends there: the key is refused until that TTL ends.

// grantedCheck reports whether acquires look for granted locks on the
// masters they did not win.
func (c *Client) grantedCheck() bool {
	return c.opts.grantedLockCheck && c.opts.fenceKey != ""
}

// unheard reports whether a master's reply error says the acquire stopped
// listening (its context ended) rather than that the master failed: such a
// master may hold a granted lock, so a grant may not be decided without it.
func unheard(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

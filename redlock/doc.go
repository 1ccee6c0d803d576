// Package redlock implements the Redlock distributed lock algorithm over N
// independent Redis masters (N odd, ≥ 3; five is the usual shape), as
// described on the Redis "Distributed Locks with Redis" page, with the
// engineering a production lock service needs:
//
//   - every command to a master is bounded by a per-master timeout; a
//     failed acquire decides as soon as its outcome is known, a grant once
//     every master answered (the granted-lock check, granted.go), and a
//     release or an extend answers once every master answered, so that the
//     next caller, through any Client, sees it;
//   - masters stuck on an earlier command or failing dials answer at
//     once, and more than N − quorum known to be down fail the acquire
//     before any vote is sent, so a lost quorum fails in well under one
//     per-master timeout;
//   - commands bound for the same master share pipelined round trips
//     (lanes), and a release always reaches a master after the SET it cleans
//     up, so deciding early never leaves a stray key behind;
//   - a failed acquire releases on every master that may hold its token, on
//     a context detached from the caller's, before it returns.
//
// # What is guaranteed
//
// With bounded network delay, bounded process pauses and clock drift
// bounded by the drift factor, no two clients hold the same key with
// overlapping validity (Lock.Validity) while at most N − quorum masters fail
// (crash, pause, partition). Quorum is N/2+1 of ALL configured masters.
//
// # What is NOT guaranteed
//
// Redlock is a lease, not a mutex. A client paused (GC, swap, SIGSTOP)
// beyond its validity, a network delay longer than the TTL, a master whose
// wall clock jumps (Redis expires keys by wall clock), or a master that
// restarts without its data while the lock is held can each let two clients
// believe they hold the same lock. See Martin Kleppmann, "How to do
// distributed locking" (2016), and antirez, "Is Redlock safe?" (2016). A
// resource that must never see two writers must check a fencing token; work
// must finish within Lock.Validity, not within the TTL.
//
// # Holding a lock for longer than one TTL
//
// Lock.KeepAlive extends a lock at about a third of its TTL; Lock.Done is
// closed the moment it is lost (an extend refused, or validity within
// LossMargin of its end with no extend confirmed), and Lock.Err says why
// (ErrLost, or ErrReleased after Release). Stop the work when Done closes.
//
// # Reading locks without holding them
//
// Client.Status is a quorum read of one lock: held or not, the time left,
// and the holder's fencing token (Status.Fence), never its token.
// Client.List pages through the locks held under a key prefix at a bounded
// cost per page (one SCAN step on one master of a quorum, and one status
// read of what it found), for operators; ListPage.Cursor continues it.
//
// # Errors
//
// Errors are told apart with errors.Is and errors.As: ErrNotObtained (any
// failed acquire), ErrLockHeld (another owner holds it; *OutcomeError has
// RetryAfter), ErrQuorumUnavailable (too few masters answered; *OutcomeError
// lists a *MasterError per failed master), ErrNotHeld (release or extend of
// a lock this token does not hold), ErrInvalid, and the context's own error
// when the caller's context ended.
package redlock

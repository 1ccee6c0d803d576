package idempotency

// Why two executions of one key never both start, and why a completed
// answer is replayed.
//
// Terms: a copy is one master's hash of the record; a master counts for a
// record (Store.counts) when its answer passed every check of a lock vote
// (redlock.QuorumScript: marker, evictions, counters, clock; the Client
// counts it now) and it has kept its data for at least the max retention,
// so it still has every copy written to it that is not past its retention.
// Any two quorums of the N masters share a master.
//
//  1. An attempt executes only after Begin answered Started or
//     ExpiredInProgress, which needs the lease (a Redlock lock) and its
//     IN_PROGRESS copy written on a quorum of counting masters. Two
//     attempts with overlapping leases are excluded by the lock's own
//     guarantee (redlock/doc.go), under the same assumptions.
//  2. A Complete that returned nil wrote the COMPLETED copy on a quorum Q1
//     of masters that counted. A later Begin, before answering Started,
//     hears a quorum Q2 of counting masters on its write (writeBegin);
//     a master in Q1 ∩ Q2 counted at both times, so it kept its copy
//     (losing it would have changed its marker, or shown in its evictions,
//     counters or clock), and answered COMPLETED: the Begin answers
//     Completed. The first read, a quorum too, gives the same answer one
//     step sooner.
//     Copies are ordered by fence and a COMPLETED copy is never replaced
//     by an IN_PROGRESS one, so no write in between removes it.
//  3. An attempt that began (its IN_PROGRESS copy on a quorum Q1) and did
//     not complete: its lease ended before a later Begin got the lease. The
//     later Begin's write hears a quorum Q2; a master in Q1 ∩ Q2 still has
//     the earlier copy (or a later attempt's, itself an IN_PROGRESS copy by
//     the same argument), reports it, and the Begin answers
//     ExpiredInProgress, never Started, with the earlier fence. A Begin
//     that fails after writing puts back the copies it replaced (undo), so
//     a failed Begin does not erase that evidence. The copy outlives the
//     lease: Begin writes it with a retention of at least twice the lease,
//     and Extend raises its TTL to twice the new lease on a quorum of
//     counting masters before it extends the lease (Store.keepRecord).
//  4. A late Complete of an attempt A whose lease ended races only with
//     the Begin of the attempt B that takes over: each master keeps the
//     write that reached it first (a COMPLETED copy is never replaced, an
//     IN_PROGRESS copy only by a higher fence). B's Begin hears every
//     master that answers before it decides (writeBegin), so a COMPLETED
//     copy of A on any of them refuses B, which puts back A's copies and
//     replays A's answer; A's Complete, refused where B wrote first, may
//     have answered ErrNotOwner and still left that copy (a retry of it
//     then completes it). A read hears a quorum and the COMPLETED copy with
//     the highest fence answers: B's, once B completed on a quorum, which
//     every read meets. Left: a master holding A's COMPLETED copy that did
//     not answer B's Begin (paused, one of at most N − quorum): until B
//     completes, a read that meets it replays A's answer; after, B's. Both
//     ran — B as a take-over, told so (ExpiredInProgress) — and the
//     store's fence decides whose write it keeps.
//
// Not covered: a master that loses data without any sign the lock path
// knows (a rollback that leaves its marker, counters and horizon as they
// were); a master clock jump that expires a copy early, in the last moments
// of its retention; the loss of more than N−quorum masters' data.

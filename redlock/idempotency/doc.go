// Package idempotency keeps idempotency records on the masters of a
// redlock.Client: one execution per business intent, and the stored answer
// replayed to every retry, for hours or days after the lock that guarded
// the execution ended.
//
// A record is scoped by a key the caller makes injective (the daemon's
// encoding of account, namespace and the client's key). It holds the
// request fingerprint, a state (IN_PROGRESS or COMPLETED), the owner's
// token and fence, the attempt count, the start time and, once completed,
// the stored Answer.
//
// # How it is built
//
// The processing lease is an ordinary Redlock lock on a key derived from
// the record's ("<key>:lease"): it has every protection of a lock (quorum,
// validity, fencing token, data-loss and clock guards). The record itself
// is a hash on every master ("<key>:rec"), written and read by scripts that
// run after the vote prelude (redlock.QuorumScript), so a master that lost
// its data, or that the Client does not count, never answers for a record.
//
// Begin: read the record at quorum (a COMPLETED copy on any counting master
// answers at once: the replay costs one quorum read); on a fingerprint
// mismatch, answer Mismatch; otherwise acquire the lease (held: InProgress,
// with the holder's remaining time); then write IN_PROGRESS to every master
// and decide at quorum: Started, or ExpiredInProgress when an earlier
// attempt's IN_PROGRESS copy was there (its lease ended without complete).
// Complete: write COMPLETED with the answer, ordered by fence, at quorum;
// then release the lease. Abort: delete the attempt's copies and release
// the lease, so the next Begin starts afresh.
//
// # What is guaranteed, and what is not
//
// Under the lock's own assumptions (bounded network delay, process pauses
// and clock drift; at most N−quorum masters failed, restarted empty, or
// with their data lost), two Begins of one key never both answer Started
// or ExpiredInProgress with overlapping leases (the lease is a lock), and
// a Begin after a Complete that returned nil answers Completed (see
// safety.go). A Begin after a lease that ended without Complete answers
// ExpiredInProgress, never Started: the earlier attempt may have done its
// work, and the caller must reconcile with its own store, where the fence
// lets it refuse the earlier attempt's late write. Outside those
// assumptions, the caller's store (a unique constraint, the fence) is the
// last line of defence.
//
// A master repaired after a data loss answers for records only once the
// longest retention (WithMaxRetention) has passed since its repair: until
// then it may lack a record that a quorum had. With two masters of five
// repaired, the other three still form a quorum; with more, record actions
// answer redlock.ErrQuorumUnavailable until then. A repair of the records
// themselves, which would end this wait early, is not implemented.
package idempotency

package redlock

import (
	"fmt"
	"time"
)

// Lock-delay: a pause after a lock ended without a release (Chubby's
// lock-delay; Consul's LockDelay), so that a holder that only paused past
// its validity can notice the loss before the next holder starts.
//
// An acquire with WithLockDelay(d) writes, on every master where its SET
// lands and in the same script, the lock's delay record (delayRecordKey)
// holding its token, with PX ttl + d; extend moves the record with the lock
// (remaining + d) and release deletes it with the lock (release.lua deletes
// every key it is given). Every acquire of a Client with WithMaxLockDelay
// refuses its vote on a master that has a delay record and no lock key:
// the lock there ended without a release less than d ago. The refusal is
// an ordinary "held" vote whose remaining time is the record's PTTL, so
// the acquire is refused with RetryAfter when no quorum grants it.
//
// # Why the delay holds at quorum
//
// A lock L granted with a delay had its SET, hence its record, on a quorum
// Q of counting masters. A later acquire needs a quorum Q′ of yes votes;
// Q and Q′ share a master s (two quorums of N meet). Before L's record
// ends on s (ttl + d after L's SET there, later when extended), s refuses
// the later acquire: by the lock key while L holds it, by the record once
// L's key expired — unless L's holder released it, which deletes both. So
// no quorum grants the key before L's key plus the delay ended on s, for
// every s in Q: the delay is decided by the same intersection as the lock.
// A master that lost its data lost its records too, but it does not count
// until it is repaired (horizon.go): the acquire and extend scripts raise
// the lease horizon to the record's end, not only the lock's, so the
// horizon rule keeps such a master out until every record it may have
// lost has ended; and ttl + delay ≤ max TTL keeps the max-TTL fallback
// ("delayed restart") valid for records as for locks. Clock jumps are the
// lock's own fault model: a record expires by the master's clock as the
// lock key does, and the clock guard covers both.
//
// # Silent losses of a record
//
// The intersection argument needs s to keep L's record. A master that
// loses it without losing anything its state shows (another writer's DEL
// or PEXPIRE of the record, an extend's PEXPIRE rolled back) still counts,
// and its vote joins masters that never had L: two such losses among L's
// masters leave a quorum that grants the key in L's delay. A lock has the
// same weakness, closed by the granted-lock check (granted.go): any master
// that answers with a granted lock's fence record refuses the grant. The
// delay is closed the same way. L's fence record, written by the fence
// write-back only once a quorum voted for L, lives as long as L's delay
// record when L has a delay (fence.lua, extend.lua; a release deletes it
// with the record, a late release too); a vote on a master where the key
// is free and the delay record and the fence record hold the same token
// answers 'D', not 'd' (acquire.lua), and the acquire treats 'D' as
// evidence of a granted lock: it is refused while any master shows it,
// with the granted-lock check's rules (every master heard). The fence
// record is on the write-back's quorum, so a second holder in L's delay
// needs that quorum's records lost on every master it shares with the
// contender's quorum — as many silent losses as a second holder of L
// itself. A record left by an attempt refused after its write-back
// (overGrant) holds the key for its delay until the clean-up release
// deletes it, as its fence record holds a lock key (granted.go). So does a
// release that did not reach a master (down or partitioned then): that
// master keeps the lock, then its delay, with the grant's fence record,
// and refuses every grant of the key until the release sent again by the
// health loop (retryReleases, about a second after the master answers)
// deletes them, or for the TTL and the delay when the releasing Client is
// gone — the cost of telling a silent loss from a release nobody saw: the
// masters' evidence is the same.
//
// # Copies an extend puts back
//
// A lock held through masters that lost everything it had there, one
// after another (a rolling restart), is set again by its extends on each
// counting master that answered it absent (restoreCopies, extend.go). The
// copy carries the delay record too: the extending masters report the
// lock's delay with their yes votes (extend.lua, extend_multi.lua), and
// the restore writes the record for ttl + delay where it is missing or
// this token's, with the fence record beside it for as long. Without it,
// a lock that outlived the loss of every master's records would end,
// unreleased, with no master left to enforce its delay
// (TestExtendRestoresTheDelayRecord).
//
// Every Client of a deployment must have WithMaxLockDelay for the delays
// to hold: one without it does not read the records and grants the key.
// The daemon sets it on every replica.

// MaxLockDelay is the longest lock-delay WithMaxLockDelay allows.
const MaxLockDelay = 60 * time.Second

// WithLockDelay asks Acquire (and AcquirePermit, for its slot) for a
// lock-delay of d (at most the Client's WithMaxLockDelay, and ttl + d at
// most its max TTL): if the lock ends without a release, nobody acquires
// the key for d after it ends. Release clears the delay at once. Default
// 0: no delay.
func WithLockDelay(d time.Duration) AcquireOption {
	return func(a *acquireConfig) { a.lockDelay = d }
}

// WithMaxLockDelay lets Acquire take WithLockDelay up to d (at most
// MaxLockDelay, and fencing must be on: the record sits next to the fence
// record) and makes every acquire of this Client honour the delay records
// of every Client, at the cost of one more command per vote script.
// Default 0: lock-delay off, records not read.
func WithMaxLockDelay(d time.Duration) Option {
	return func(o *options) { o.maxLockDelay = d }
}

// checkLockDelayOption validates WithMaxLockDelay in New.
func checkLockDelayOption(o *options) error {
	switch {
	case o.maxLockDelay < 0 || o.maxLockDelay > MaxLockDelay:
		return fmt.Errorf("%w: max lock delay %v is outside 0 to %v", ErrInvalid, o.maxLockDelay, MaxLockDelay)
	case o.maxLockDelay > 0 && o.fenceKey == "":
		return fmt.Errorf("%w: max lock delay needs fencing on (a fence key): the delay record is kept next to the fence record", ErrInvalid)
	}
	return nil
}

// lockDelayError checks one acquire's lock-delay against the Client.
func (c *Client) lockDelayError(ttl, delay time.Duration) error {
	switch {
	case delay == 0:
		return nil
	case delay < 0:
		return fmt.Errorf("%w: lock delay %v is negative", ErrInvalid, delay)
	case c.opts.maxLockDelay == 0:
		return fmt.Errorf("%w: lock delay %v asked of a Client without WithMaxLockDelay", ErrInvalid, delay)
	case delay > c.opts.maxLockDelay:
		return fmt.Errorf("%w: lock delay %v is above the maximum %v", ErrInvalid, delay, c.opts.maxLockDelay)
	case delay%time.Millisecond != 0:
		return fmt.Errorf("%w: lock delay %v is not a whole number of milliseconds", ErrInvalid, delay)
	case ttl+delay > c.opts.maxTTL:
		return fmt.Errorf("%w: ttl %v + lock delay %v is above the max TTL %v", ErrInvalid, ttl, delay, c.opts.maxTTL)
	}
	return nil
}

// delayRecordKey is the key of the lock key's delay record: the fence
// record of the fence record of key, "<fence key>:<fence key>:<key>".
// That is the record of a lock key Acquire refuses ("<fence key>:…"), so
// no fence record and no lock key can be equal to it.
func (c *Client) delayRecordKey(key string) string {
	return c.fenceRecordKey(c.fenceRecordKey(key))
}

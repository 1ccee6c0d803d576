package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Extend makes the lock key held by token last at least ttl more, with a
// compare-and-extend script on every master: each master's key keeps
// max(its remaining TTL, ttl), so an extend never shortens a lock — not
// when it succeeds with a shorter ttl, and not when it fails on some
// masters (a failed extend must not cut the validity its holder was last
// told). It never revives an expired lock and never touches a key that
// holds another token; once a quorum extended it, it sets the key again
// on the counting masters where it was gone (restoreCopies: a master
// restarted empty and repaired, or paused past the TTL), with its fence
// and delay records. It
// succeeds only when a quorum extended and the recomputed validity is
// positive: the quorum-th longest remaining TTL among them minus the
// elapsed time and the drift allowance. It answers once every master
// answered (or its per-master timeout passed, or ctx ended), so that a
// status through any Client after it shows the new TTL.
//
// The returned Lock's TTL is ttl, or less when the lock has a lock-delay
// record, which caps the extend at the max TTL minus the delay
// (WithLockDelay): then the TTL granted. (When the lock had more than ttl
// left, it keeps it, and ValidUntil says so; TTL stays ttl, the time a
// KeepAlive of the Lock asks for.)
//
// The fence stored with the lock (fence.go) keeps the lock's expiry, and
// the returned Lock's Fence is the one its Acquire returned: the extending
// quorum meets the quorum the fence was written to. It is 0 when fencing is
// off, or when no extending master has the fence stored (the lock was
// acquired by a version of this package that did not store it).
//
// Errors: an *OutcomeError matching ErrNotHeld when a quorum answered but
// fewer than a quorum held the token; one matching ErrQuorumUnavailable when
// fewer than a quorum answered; ErrInvalid for bad arguments; ErrClosed
// after Close; and, with nothing sent, ctx's error when ctx had already
// ended (an extend sent then would lengthen the keys while its caller is
// told it failed).
func (c *Client) Extend(ctx context.Context, key, token string, ttl time.Duration) (*Lock, error) {
	if key == "" || token == "" {
		return nil, fmt.Errorf("%w: key and token must not be empty", ErrInvalid)
	}
	validUntil, fence, lockTTL, err := c.extendSet(ctx, &lockSet{key: key, vote: c.voteKeys(key)}, token, ttl, 0)
	if err != nil {
		return nil, err
	}
	return &Lock{c: c, key: key, token: token, fence: fence, ttl: lockTTL, validUntil: validUntil}, nil
}

// extendSet extends a lock key or, with set.multi, the keys of a
// multi-key lock (multikey.go). It returns the new end of validity, the
// fence stored with the lock and the TTL the returned Lock reports (see
// Client.Extend): ttl, or the TTL a quorum of masters granted when that is
// less (a lock-delay caps the extend at the max TTL minus the delay,
// extend.lua). known is the lock's fence when the caller knows it (0
// otherwise): it is written in the lock's fence record on a master that
// lacks one.
func (c *Client) extendSet(ctx context.Context, set *lockSet, token string, ttl time.Duration, known int64) (time.Time, int64, time.Duration, error) {
	if token == "" {
		return time.Time{}, 0, 0, fmt.Errorf("%w: token must not be empty", ErrInvalid)
	}
	if ttl < MinTTL || ttl > c.opts.maxTTL {
		return time.Time{}, 0, 0, fmt.Errorf("%w: ttl %v is outside %v to %v", ErrInvalid, ttl, MinTTL, c.opts.maxTTL)
	}
	if err := c.ttlError(ttl); err != nil {
		return time.Time{}, 0, 0, err
	}
	if err := c.closedErr(); err != nil {
		return time.Time{}, 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		// Nothing is sent: an extend whose answers nobody waits for would
		// still lengthen the keys on every master, while its caller is
		// told it failed and keeps the old validity.
		return time.Time{}, 0, 0, fmt.Errorf("redlock: extend not sent: %w", err)
	}
	// Its restore may write the keys where the votes never reached: a
	// release after it goes everywhere, behind it (unreached.go). By token:
	// an extend of some keys of a set, or of one, forgets the set's record.
	c.unreached.forget(token)
	n := len(c.masters)
	start := time.Now()
	maxTTL := strconv.FormatInt(c.opts.maxTTL.Milliseconds(), 10) // caps ttl + a lock-delay (extend.lua)
	ext := script{s: c.sc.extend, keys: set.vote, args: []any{token, strconv.FormatInt(ttl.Milliseconds(), 10), strconv.FormatInt(known, 10), maxTTL}}
	if set.multi != nil {
		ext.s, ext.args = c.sc.extendMulti, []any{token, strconv.FormatInt(ttl.Milliseconds(), 10), strconv.FormatInt(known, 10), strconv.Itoa(c.multiStride()), maxTTL}
	}
	out, _ := c.fanout(ext, start)
	res := OutcomeError{Op: "extend", Quorum: c.need, Masters: n}
	var lefts []int64 // remaining TTL after the extend on each counted yes vote
	var fence, delay int64
	absent := make([]bool, n) // counting masters that answered the key is gone
	c.gather(ctx, out, start, nil, func(r reply) bool {
		if v, _, err := c.judgeVote(r); err != nil {
			res.Failures = append(res.Failures, err)
		} else {
			countScriptResult(&res, v.code)
			absent[r.idx] = v.code == 0
			if v.code == 1 {
				lefts = append(lefts, v.value)
				f, d := parseExtended(v.extra)
				fence, delay = max(fence, f), max(delay, d)
			}
		}
		// Decide early only once too many masters lack the token for any
		// quorum to hold it. Success waits for every master (or its
		// per-master timeout): a master whose extend is still on its way
		// shows the old TTL, and another Client's status that reads it
		// among its first quorum of holders would show the lock ending
		// before what this extend answered (as Release, release.go). A
		// quorum out of reach because masters failed is not decided yet:
		// the other answers (one round trip; down masters are answered at
		// once) tell "not held" from "no quorum", and a client must not
		// retry an extend it has lost.
		return res.Refused > n-c.need
	}, func() int { return n - c.need + 1 - res.Refused })
	if res.Votes >= c.need {
		left := time.Duration(quorumth(lefts, c.need)) * time.Millisecond
		if validity := left - time.Since(start) - c.drift(left); validity > 0 {
			if !c.opts.noRestore && slices.Contains(absent, true) {
				// The fence the caller knows, when no extending master
				// reported it (each wrote its record from known).
				c.restoreCopies(ctx, set, token, left, max(fence, known), delay, absent)
			}
			return start.Add(left - c.drift(left)), fence, min(ttl, left), nil
		}
		res.Kind = ErrQuorumUnavailable
		res.Failures = append(res.Failures, fmt.Errorf("validity ≤ 0 after %v", time.Since(start)))
	} else if res.Refused > n-c.need {
		// Too many masters lack the token for any quorum to hold it.
		res.Kind = ErrNotHeld
	} else {
		res.Kind = ErrQuorumUnavailable
	}
	if ctx.Err() != nil {
		return time.Time{}, 0, 0, fmt.Errorf("%w: %w", &res, ctx.Err())
	}
	sortFailures(res.Failures)
	return time.Time{}, 0, 0, &res
}

// parseExtended splits the extra field of an extend's yes vote
// (extend.lua, extend_multi.lua): the fence stored with the lock there
// (0 when the extra field is empty) and, after a space, the lock's delay in milliseconds
// when its delay record is there (0 otherwise).
func parseExtended(extra string) (fence, delay int64) {
	f, d, _ := strings.Cut(extra, " ")
	fence, _ = strconv.ParseInt(f, 10, 64)
	delay, _ = strconv.ParseInt(d, 10, 64)
	return fence, delay
}

// restoreCopies puts the lock back on the counting masters that answered
// an extend that the key is gone (extend.lua, ARGV[5] 'restore'; for a
// multi-key set, that some key of the set is gone and none is another
// token's: extend_multi.lua, ARGV[6]): after a master restarted empty and
// was repaired, or one paused past the TTL, the lock would otherwise keep
// one copy fewer for the rest of its life, and a holder that lived
// through one such master, then another, would lose its lock to one more,
// never more than N − quorum failing at once.
//
// The copy carries the lock's records: its fence record when the fence is
// known, and its delay record when the lock has a lock-delay (delay, in
// milliseconds, as the extending masters reported it), each written only
// where it is missing or this token's and never shortened. Without the
// delay record, a lock held through a rolling restart of every master
// would end, unreleased, with no master left to enforce its delay
// (lockdelay.go).
//
// Sent only once a quorum extended the lock and its validity is positive:
// no other holder can have the key while the lock is valid (the Redlock
// argument), so setting the token again where the key is absent grants
// nothing new, and SET NX (for a set, EXISTS first) leaves any other key
// there alone. The copy gets left, the quorum-th longest TTL the extend
// found (capped so that left + delay stays within the max TTL, as an
// extend is), and the fence record when the fence is known. A copy that
// lands late (its master paused with it in a socket) outlives the lock
// there by at most left, and its delay record by left + delay, as a late
// vote's does; a Release sent after it deletes them. One that lands after
// the Release (the Release came while this extend was still restoring,
// from another goroutine or, through the daemon, another request) keeps
// that master refusing the key for up to left + delay ≤ the max TTL:
// refusing, never granting. The answers are awaited (bounded by the
// per-master timeout) but decide nothing.
func (c *Client) restoreCopies(ctx context.Context, set *lockSet, token string, left time.Duration, fence, delay int64, only []bool) {
	start := time.Now()
	ms, f, d := strconv.FormatInt(left.Milliseconds(), 10), strconv.FormatInt(fence, 10), strconv.FormatInt(delay, 10)
	maxTTL := strconv.FormatInt(c.opts.maxTTL.Milliseconds(), 10)
	rs := script{s: c.sc.extend, keys: set.vote, only: only, args: []any{token, ms, f, maxTTL, "restore", d}}
	if set.multi != nil {
		rs.s, rs.args = c.sc.extendMulti, []any{token, ms, f, strconv.Itoa(c.multiStride()), maxTTL, "restore", d}
	}
	out, _ := c.fanout(rs, start)
	restored := 0
	c.gather(ctx, out, start, only, func(r reply) bool {
		if v, _, err := c.judgeVote(r); err == nil && v.code == 1 {
			restored++
		}
		return false
	}, nil)
	c.restoredCopies.Add(int64(restored))
}

// RestoredCopies counts the lock copies Extend set again on masters that
// had lost them (restoreCopies).
func (c *Client) RestoredCopies() int64 { return c.restoredCopies.Load() }

// quorumth returns the quorum-th largest of vs: the value that at least a
// quorum of them reach. vs must hold at least quorum values.
func quorumth(vs []int64, quorum int) int64 {
	slices.Sort(vs)
	return vs[len(vs)-quorum]
}

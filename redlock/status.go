package redlock

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// noExpiryMS stands for a key without expiry (PTTL -1): about 146 years.
const noExpiryMS = int64(math.MaxInt64/time.Millisecond) / 2

// Status is a majority read of one lock. The token is never revealed: the
// masters return only a hash of the value.
type Status struct {
	// Held is true when a quorum of masters hold the same token, or (with
	// the granted-lock check, granted.go) when no token can be on a quorum
	// but a master that answered, counting or not, holds a token with its
	// fence record: an acquire would be refused. False only when the
	// answers establish that no token can be on a quorum and no master
	// shows a granted lock (Client.Status returns an error otherwise).
	Held bool
	// Holders is how many masters hold the most common token.
	Holders int
	// Answered is how many masters gave an answer that counts.
	Answered int
	// Validity is the conservative time left on a held lock: the quorum-th
	// longest PTTL among the holders, minus the read's elapsed time and the
	// drift allowance; 0 when not held or about to end. A lock held on
	// fewer than a quorum (Held from a granted lock's record alone: its
	// key lost on other masters) has the longest PTTL among the masters
	// that show it granted, as an acquire's retry_after, minus the same.
	Validity time.Duration
	// Fence is the holder's fencing token, the one its Acquire returned
	// (fence.go says why it is the holder's and no other). 0 when not held,
	// when fencing is off, and when no holder that answered has the fence
	// stored with the lock: its acquire has not finished writing it back,
	// or the lock was acquired or last extended by a version of this
	// package that did not store it.
	Fence int64
}

// Status reads the lock key on every master (value hash, PTTL and the
// fence stored with the lock, in one script) and decides by quorum either
// way: held when a quorum holds the same token, free when so few masters
// hold any token that even the masters that did not answer could not make
// up a quorum. Otherwise it cannot tell, and returns an *OutcomeError
// matching ErrQuorumUnavailable (with the holders and the failures): a
// status never calls a held lock free.
//
// With the granted-lock check (the default with fencing), status never
// says free where an acquire would refuse (granted.go): where the answers
// would make it free, a lock whose key a quorum no longer holds (lost
// silently on some masters) is held while any master that answers,
// counting or not, shows the key held with its fence record; so status
// waits for every master's answer (or failure) before it says free, and
// says free only when no master's answer went unheard because ctx ended.
// Where it cannot tell (masters down), it still returns the error above.
// Without this, status answered free for a lock that every acquire
// refused (TestStatusHeldOnFewerThanAQuorum).
func (c *Client) Status(ctx context.Context, key string) (Status, error) {
	if key == "" {
		return Status{}, fmt.Errorf("%w: key must not be empty", ErrInvalid)
	}
	if err := c.closedErr(); err != nil {
		// ErrClosed alone, as Acquire's: not a quorum error a caller
		// would retry (a black-box pass saw both).
		return Status{}, err
	}
	start := time.Now()
	out, _ := c.fanout(script{s: c.sc.status, keys: c.voteKeys(key)}, start)
	t := c.newStatusTally()
	c.gather(ctx, out, start, nil, func(r reply) bool { return t.add(r, true) }, nil)
	return t.result(start)
}

// statusTally decides one lock's status from the masters' answers to the
// status script (Client.Status, and Client.List for each candidate).
type statusTally struct {
	c      *Client
	st     Status
	pttls  map[string][]int64 // per token hash: the holders' PTTLs in ms
	fences map[string]int64   // per token hash: the fence stored with it
	best   string             // the token hash held by the most masters
	absent int
	// holds is the token hash each counting master holds ("" when it holds
	// none or its answer does not count).
	holds []string
	// granted is, per token hash, the longest PTTL (ms) among the masters
	// that show it with its fence record (any master that answered,
	// counting or not, intact or not), with the check on; grantedFence is
	// that record's fence.
	granted      map[string]int64
	grantedFence map[string]int64
	unheard      int // masters not heard because ctx ended
	res          OutcomeError
}

func (c *Client) newStatusTally() *statusTally {
	return &statusTally{
		c:      c,
		pttls:  map[string][]int64{},
		fences: map[string]int64{},
		holds:  make([]string, len(c.masters)),
		res:    OutcomeError{Op: "status", Quorum: c.quorum, Masters: len(c.masters)},
	}
}

// checksGranted reports whether this status judges granted locks as an
// acquire does (granted.go).
func (t *statusTally) checksGranted() bool { return t.c.grantedCheck() }

// add counts one master's answer and, with early, reports whether the
// outcome is decided (a quorum holds one token, or a quorum holds none).
func (t *statusTally) add(r reply, early bool) bool {
	c := t.c
	if unheard(r.err) {
		t.unheard++
	}
	v, parsed, err := c.judgeVote(r)
	if parsed && (v.code == 1 || v.code == codeLost) && t.checksGranted() {
		if hash, fence, recorded := splitFence(v.extra); recorded {
			// The holder's fence record: written only after a quorum
			// voted, so a granted lock, whatever this master's standing
			// (acquire.go reads acquire.lua's 'g' the same way).
			if t.granted == nil {
				t.granted, t.grantedFence = map[string]int64{}, map[string]int64{}
			}
			t.granted[hash] = max(t.granted[hash], expiryMS(v.value))
			t.grantedFence[hash] = max(t.grantedFence[hash], fence)
		}
	}
	if err != nil {
		t.res.Failures = append(t.res.Failures, err)
		return false
	}
	t.st.Answered++
	if v.code != 1 {
		t.absent++
		// Free is decided early only without the check: with it, every
		// master is heard first, as an acquire hears every master it
		// did not win (one of them may show a granted lock).
		return early && t.absent >= c.quorum && !t.checksGranted()
	}
	pttl := expiryMS(v.value)
	hash, fence, _ := splitFence(v.extra)
	t.holds[r.idx] = hash
	t.pttls[hash] = append(t.pttls[hash], pttl)
	if fence > 0 {
		// Every record of one token holds the same fence (fence.go); max
		// only makes the choice independent of the answers' order.
		t.fences[hash] = max(t.fences[hash], fence)
	}
	if len(t.pttls[hash]) > t.st.Holders {
		t.st.Holders, t.best = len(t.pttls[hash]), hash
	}
	return early && t.st.Holders >= c.quorum
}

// result decides from the answers counted so far, for a read started at
// start.
func (t *statusTally) result(start time.Time) (Status, error) {
	c, st := t.c, t.st
	if st.Holders >= c.quorum {
		ttl := time.Duration(quorumth(t.pttls[t.best], c.quorum)) * time.Millisecond
		st.Held, st.Validity = true, max(ttl-time.Since(start)-c.drift(ttl), 0)
		st.Fence = t.fences[t.best]
		return st, nil
	}
	unanswered := len(c.masters) - st.Answered
	if st.Holders+unanswered < c.quorum || !c.opts.statusNeedsQuorum && st.Answered >= c.quorum {
		// No token can be on a quorum. Free, unless a master showed a
		// granted lock (fewer than a quorum hold it, lost silently on the
		// others: every acquire is refused while that copy lives,
		// granted.go), or, with the check, a master went unheard.
		if hash, ms, ok := t.grantedLock(); ok {
			ttl := time.Duration(ms) * time.Millisecond
			st.Held, st.Validity = true, max(ttl-time.Since(start)-c.drift(ttl), 0)
			st.Fence = t.grantedFence[hash]
			t.best = hash
			return st, nil
		}
		if !t.checksGranted() || t.unheard == 0 {
			return st, nil
		}
	}
	res := t.res
	res.Kind = ErrQuorumUnavailable
	res.Votes = st.Holders
	res.Refused = t.absent
	sortFailures(res.Failures)
	return st, &res
}

// grantedLock is the token hash a master showed granted (its fence
// record) and the longest PTTL shown with it; the one with the longest
// PTTL when several (at most one can be a valid lock).
func (t *statusTally) grantedLock() (hash string, ms int64, ok bool) {
	for h, p := range t.granted {
		if !ok || p > ms || p == ms && h < hash {
			hash, ms, ok = h, p, true
		}
	}
	return hash, ms, ok
}

// expiryMS is a status answer's PTTL in ms, a key without expiry (PTTL -1:
// never set by us) counted as held for ever.
func expiryMS(pttl int64) int64 {
	if pttl < 0 {
		return noExpiryMS
	}
	return pttl
}

// splitFence splits the status script's extra, "<sha1 of the token>[
// <fence>]", into the hash and the fence (0 when absent), and whether the
// master has the holder's fence record (recorded), whatever fence it
// holds: an extend that put a lost copy back writes "0 <token>" where it
// does not know the fence (extend.lua), and acquire.lua's 'g' reads any
// record of the holder's token as a granted lock.
func splitFence(extra string) (hash string, fence int64, recorded bool) {
	hash, f, ok := strings.Cut(extra, " ")
	if !ok {
		return extra, 0, false
	}
	fence, err := strconv.ParseInt(f, 10, 64)
	if err != nil || fence < 0 {
		return hash, 0, true
	}
	return hash, fence, true
}

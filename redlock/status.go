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
	// Held is true when a quorum of masters hold the same token: an acquire
	// would be refused. False only when the answers establish that no
	// token can be on a quorum (Client.Status returns an error otherwise).
	Held bool
	// Holders is how many masters hold the most common token.
	Holders int
	// Answered is how many masters gave an answer that counts.
	Answered int
	// Validity is the conservative time left on a held lock: the quorum-th
	// longest PTTL among the holders, minus the read's elapsed time and the
	// drift allowance; 0 when not held or about to end.
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
	res   OutcomeError
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

// add counts one master's answer and, with early, reports whether the
// outcome is decided (a quorum holds one token, or a quorum holds none).
func (t *statusTally) add(r reply, early bool) bool {
	c := t.c
	v, _, err := c.judgeVote(r)
	if err != nil {
		t.res.Failures = append(t.res.Failures, err)
		return false
	}
	t.st.Answered++
	if v.code != 1 {
		t.absent++
		return early && t.absent >= c.quorum
	}
	pttl := v.value
	if pttl < 0 { // no expiry: never set by us, but count it as held for ever
		pttl = noExpiryMS
	}
	hash, fence := splitFence(v.extra)
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
		return st, nil // no token can be on a quorum: free
	}
	res := t.res
	res.Kind = ErrQuorumUnavailable
	res.Votes = st.Holders
	res.Refused = t.absent
	sortFailures(res.Failures)
	return st, &res
}

// splitFence splits the status script's extra, "<sha1 of the token>[
// <fence>]", into the hash and the fence (0 when absent).
func splitFence(extra string) (hash string, fence int64) {
	hash, f, ok := strings.Cut(extra, " ")
	if !ok {
		return extra, 0
	}
	fence, err := strconv.ParseInt(f, 10, 64)
	if err != nil || fence < 0 {
		return hash, 0
	}
	return hash, fence
}

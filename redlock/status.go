package redlock

import (
	"context"
	"fmt"
	"math"
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
}

// Status reads the lock key on every master (value hash and PTTL, in one
// script) and decides by quorum either way: held when a quorum holds the
// same token, free when so few masters hold any token that even the
// masters that did not answer could not make up a quorum. Otherwise it
// cannot tell, and returns an *OutcomeError matching ErrQuorumUnavailable
// (with the holders and the failures): a status never calls a held lock
// free.
func (c *Client) Status(ctx context.Context, key string) (Status, error) {
	if key == "" {
		return Status{}, fmt.Errorf("%w: key must not be empty", ErrInvalid)
	}
	n := len(c.masters)
	start := time.Now()
	out, _ := c.fanout(statusScript, c.voteKeys(key), nil, false, start, nil)
	res := OutcomeError{Op: "status", Quorum: c.quorum, Masters: n}
	pttls := map[string][]int64{}
	var st Status
	var best string
	absent := 0
	c.gather(ctx, out, start, nil, func(r reply) bool {
		m := c.masters[r.idx]
		v, ok := parseVote(r.val)
		switch {
		case r.err != nil:
			res.Failures = append(res.Failures, masterErr(c, r))
			return false
		case !ok:
			res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: errBadReply})
			return false
		}
		if err := m.checkVote(v, r.sent, r.at); err != nil {
			res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: err})
			return false
		}
		if !m.counts() {
			res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: ErrMasterQuarantined})
			return false
		}
		st.Answered++
		if v.code != 1 {
			absent++
			return absent >= c.quorum
		}
		pttl := v.value
		if pttl < 0 { // no expiry: never set by us, but count it as held for ever
			pttl = noExpiryMS
		}
		pttls[v.extra] = append(pttls[v.extra], pttl)
		if len(pttls[v.extra]) > st.Holders {
			st.Holders, best = len(pttls[v.extra]), v.extra
		}
		return st.Holders >= c.quorum
	})
	if st.Holders >= c.quorum {
		ttl := time.Duration(quorumth(pttls[best], c.quorum)) * time.Millisecond
		st.Held, st.Validity = true, max(ttl-time.Since(start)-c.drift(ttl), 0)
		return st, nil
	}
	unanswered := n - st.Answered
	if st.Holders+unanswered < c.quorum || !c.opts.statusNeedsQuorum && st.Answered >= c.quorum {
		return st, nil // no token can be on a quorum: free
	}
	res.Kind = ErrQuorumUnavailable
	res.Votes = st.Holders
	res.Refused = absent
	sortFailures(res.Failures)
	return st, &res
}

package redlock

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// noExpiryMS stands for a key without expiry (PTTL -1): about 146 years.
const noExpiryMS = int64(math.MaxInt64/time.Millisecond) / 2

// Status is a majority read of one lock. The token is never revealed: the
// masters return only a hash of the value.
type Status struct {
	// Held is true when a quorum of masters hold the same token.
	Held bool
	// Holders is how many masters hold the most common token.
	Holders int
	// Answered is how many masters answered.
	Answered int
	// Validity is the conservative time left on a held lock: the quorum-th
	// longest PTTL among the holders, minus the read's elapsed time and the
	// drift allowance. 0 when not held.
	Validity time.Duration
}

// Status reads the lock key on every master (value hash and PTTL, in one
// script) and reports whether a quorum holds the same token. It returns an
// *OutcomeError matching ErrQuorumUnavailable when fewer than a quorum of
// masters answered and no quorum agreed.
func (c *Client) Status(ctx context.Context, key string) (Status, error) {
	if key == "" {
		return Status{}, fmt.Errorf("%w: key must not be empty", ErrInvalid)
	}
	n := len(c.masters)
	start := time.Now()
	out, _ := c.fanout(statusScript, []string{key}, nil, false, start, nil)
	res := OutcomeError{Op: "status", Quorum: c.quorum, Masters: n}
	pttls := map[string][]int64{}
	var st Status
	var best string
	c.gather(ctx, out, start, nil, func(r reply) bool {
		if r.err != nil {
			res.Failures = append(res.Failures, masterErr(c, r))
			return false
		}
		if m := c.masters[r.idx]; !m.counts() {
			res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: ErrMasterQuarantined})
			return false
		}
		st.Answered++
		a, _ := r.val.([]any)
		if len(a) != 2 {
			return false
		}
		h, _ := a[0].(string)
		pttl, _ := a[1].(int64)
		if h == "" || pttl == -2 {
			return false
		}
		if pttl < 0 { // no expiry: never set by us, but count it as held for ever
			pttl = noExpiryMS
		}
		pttls[h] = append(pttls[h], pttl)
		if len(pttls[h]) > st.Holders {
			st.Holders, best = len(pttls[h]), h
		}
		return st.Holders >= c.quorum
	})
	if st.Holders >= c.quorum {
		p := pttls[best]
		slices.Sort(p)
		slices.Reverse(p)
		ttl := time.Duration(p[c.quorum-1]) * time.Millisecond
		if v := ttl - time.Since(start) - c.drift(ttl); v > 0 {
			st.Held, st.Validity = true, v
		}
		return st, nil
	}
	if st.Answered < c.quorum {
		res.Kind = ErrQuorumUnavailable
		sortFailures(res.Failures)
		return st, &res
	}
	return st, nil
}

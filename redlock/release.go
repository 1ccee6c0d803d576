package redlock

import (
	"context"
	"fmt"
	"time"
)

// Release runs the compare-and-delete script (never a bare DEL; it deletes
// the lock's fence record with it, fence.go) on every master in parallel, each bounded by the per-master timeout, and returns
// how many masters held this token and deleted it. A master that is slow or
// stuck still receives the release later, after any SET queued before it.
//
// It returns nil when at least one master held the token: the lock is no
// longer held. It returns an *OutcomeError matching ErrNotHeld when a
// quorum answered and none held the token (Absent and Foreign say whether
// the lock had expired or belongs to another token), and one matching
// ErrQuorumUnavailable when fewer than a quorum answered.
func (c *Client) Release(ctx context.Context, key, token string) (int, error) {
	if key == "" || token == "" {
		return 0, fmt.Errorf("%w: key and token must not be empty", ErrInvalid)
	}
	n := len(c.masters)
	start := time.Now()
	out, _ := c.fanout(releaseScript, c.releaseKeys(key), []any{token, c.releaseChannel()}, true, start, nil)
	res := OutcomeError{Op: "release", Quorum: c.quorum, Masters: n}
	answered := 0
	c.gather(ctx, out, start, nil, func(r reply) bool {
		if r.err != nil {
			res.Failures = append(res.Failures, masterErr(c, r))
			return false
		}
		answered++
		n, _ := r.val.(int64)
		countScriptResult(&res, n)
		return res.Votes >= c.quorum
	})
	if res.Votes > 0 {
		return res.Votes, nil
	}
	if answered >= c.quorum {
		res.Kind = ErrNotHeld
	} else {
		res.Kind = ErrQuorumUnavailable
	}
	sortFailures(res.Failures)
	return 0, &res
}

// countScriptResult counts a release/extend script result code:
// 1 done, 0 key absent, -1 key holds another token.
func countScriptResult(res *OutcomeError, code int64) {
	switch code {
	case 1:
		res.Votes++
	case -1:
		res.Refused++
		res.Foreign++
	default:
		res.Refused++
		res.Absent++
	}
}

package redlock

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Extend resets the TTL of the lock key held by token to ttl with a
// compare-and-PEXPIRE script on every master. It never revives an expired
// lock (a master where the key is gone is not touched) and never touches a
// key that holds another token. It succeeds only when a quorum extended and
// the recomputed validity (ttl − elapsed − drift) is positive, and returns
// the new validity as a *Lock.
//
// Errors: an *OutcomeError matching ErrNotHeld when a quorum answered but
// fewer than a quorum held the token; one matching ErrQuorumUnavailable when
// fewer than a quorum answered; ErrInvalid for bad arguments.
func (c *Client) Extend(ctx context.Context, key, token string, ttl time.Duration) (*Lock, error) {
	validUntil, err := c.extend(ctx, key, token, ttl)
	if err != nil {
		return nil, err
	}
	return &Lock{c: c, key: key, token: token, ttl: ttl, validUntil: validUntil}, nil
}

func (c *Client) extend(ctx context.Context, key, token string, ttl time.Duration) (time.Time, error) {
	if key == "" || token == "" {
		return time.Time{}, fmt.Errorf("%w: key and token must not be empty", ErrInvalid)
	}
	if ttl < MinTTL || c.drift(ttl) >= ttl || ttl > c.opts.maxTTL {
		return time.Time{}, fmt.Errorf("%w: ttl %v is outside %v to %v or leaves no validity", ErrInvalid, ttl, MinTTL, c.opts.maxTTL)
	}
	n := len(c.masters)
	start := time.Now()
	out, _ := c.fanout(extendScript, []string{key}, []any{token, strconv.FormatInt(ttl.Milliseconds(), 10)}, false, start, nil)
	res := OutcomeError{Op: "extend", Quorum: c.quorum, Masters: n}
	c.gather(ctx, out, start, nil, func(r reply) bool {
		switch m := c.masters[r.idx]; {
		case r.err != nil:
			res.Failures = append(res.Failures, masterErr(c, r))
		case !m.counts():
			res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: ErrMasterQuarantined})
		default:
			countScriptResult(&res, r.val)
		}
		// Decide early on success, or once too many masters lack the token
		// for any quorum to hold it. A quorum out of reach because masters
		// failed is not decided yet: the other answers (one round trip;
		// down masters are answered at once) tell "not held" from "no
		// quorum", and a client must not retry an extend it has lost.
		return res.Votes >= c.quorum || res.Refused > n-c.quorum
	})
	validity := ttl - time.Since(start) - c.drift(ttl)
	if res.Votes >= c.quorum && validity > 0 {
		return start.Add(ttl - c.drift(ttl)), nil
	}
	switch {
	case res.Votes >= c.quorum:
		res.Kind = ErrQuorumUnavailable
		res.Failures = append(res.Failures, fmt.Errorf("validity %v ≤ 0 after %v", validity, time.Since(start)))
	case res.Refused > n-c.quorum:
		// Too many masters lack the token for any quorum to hold it.
		res.Kind = ErrNotHeld
	default:
		res.Kind = ErrQuorumUnavailable
	}
	if ctx.Err() != nil {
		return time.Time{}, fmt.Errorf("%w: %w", &res, ctx.Err())
	}
	sortFailures(res.Failures)
	return time.Time{}, &res
}

package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// AcquireOption configures one Acquire call.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	wait  time.Duration
	retry RetryStrategy
	stop  <-chan struct{}
}

// WithStopWaiting ends the wait (WithWait) when stop is closed: Acquire
// makes no further attempt and returns the last attempt's error (e.g.
// ErrLockHeld), as when the wait runs out. An attempt in progress is not
// interrupted, unlike cancelling the context. A daemon shutting down uses
// it to answer its waiters instead of cutting them off.
func WithStopWaiting(stop <-chan struct{}) AcquireOption {
	return func(a *acquireConfig) { a.stop = stop }
}

// WithWait lets Acquire retry, with the Client's jittered retry strategy,
// for up to d before giving up. Default 0: one attempt.
func WithWait(d time.Duration) AcquireOption {
	return func(a *acquireConfig) { a.wait = d }
}

// WithRetry overrides the Client's retry strategy for this call. Retries
// still stop when the wait budget (WithWait) or the context ends.
func WithRetry(s RetryStrategy) AcquireOption {
	return func(a *acquireConfig) { a.retry = s }
}

// MinTTL is the smallest TTL Acquire and Extend accept.
const MinTTL = 10 * time.Millisecond

// Acquire obtains the lock key for ttl on a quorum of masters (the Redis
// Redlock page, "The Redlock algorithm"):
//
//  1. take the monotonic time and a new random token;
//  2. send SET key token NX PX ttl to every master at once, each bounded by
//     the per-master timeout, and decide as soon as a quorum has voted yes
//     or can no longer do so (a master known to be down or stuck answers at
//     once);
//  3. validity = ttl − elapsed − drift, drift = ttl × drift factor + 2ms;
//  4. the lock is held if votes ≥ quorum and validity > 0;
//  5. otherwise run the compare-and-delete release on every master that may
//     hold the token (a timed-out SET may still have landed), on a context
//     detached from ctx, and wait for it before returning — so a cancelled
//     caller leaves no key of its own behind; then, while the wait budget
//     allows, retry after a jittered delay.
//
// Errors: every failure matches ErrNotObtained. A lock held by another owner
// is an *OutcomeError matching ErrLockHeld (with RetryAfter); too few
// masters answering is an *OutcomeError matching ErrQuorumUnavailable (with
// a *MasterError per failed master); a cancelled or expired ctx is joined
// in, so errors.Is(err, context.Canceled) works. Bad arguments match
// ErrInvalid, among them a key that is one of the Client's own (the
// marker, lease horizon and fencing counter keys, and fence records
// "<fence key>:…").
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if key == "" {
		return nil, fmt.Errorf("%w: key must not be empty", ErrInvalid)
	}
	if c.reservedKey(key) {
		return nil, fmt.Errorf("%w: key %q is one of the Client's own keys (marker, lease horizon, fencing counter, or a fence record \"<fence key>:…\")", ErrInvalid, key)
	}
	if ttl < MinTTL {
		return nil, fmt.Errorf("%w: ttl %v is below the minimum %v", ErrInvalid, ttl, MinTTL)
	}
	if ttl > c.opts.maxTTL {
		return nil, fmt.Errorf("%w: ttl %v is above the max TTL %v", ErrInvalid, ttl, c.opts.maxTTL)
	}
	if err := c.ttlError(ttl); err != nil {
		return nil, err
	}
	cfg := acquireConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.retry == nil {
		cfg.retry = c.opts.retry()
	}
	giveUp := time.Now().Add(cfg.wait)
	lock, err := c.acquireOnce(ctx, key, ttl)
	switch {
	case err == nil:
		return lock, nil
	case errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed):
		return nil, err
	case ctx.Err() != nil:
		return nil, errors.Join(ErrNotObtained, ctx.Err(), err)
	case cfg.wait <= 0 || cfg.retry.NextBackoff() <= 0:
		return nil, err
	}
	return c.waitFor(ctx, key, ttl, &cfg, giveUp, err)
}

func (c *Client) acquireOnce(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	c.attempts.Add(1)
	token, err := c.tokenFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("redlock: token generator: %w", err)
	}
	n := len(c.masters)
	keys := c.voteKeys(key)
	issuedBefore := c.fenceIssued.Load() // before the votes: see issuedFloor
	start := time.Now()
	out, _ := c.fanout(acquireScript, keys, []any{token, strconv.FormatInt(ttl.Milliseconds(), 10)}, false, start, nil)

	res := OutcomeError{Op: "acquire", Quorum: c.need, Masters: n}
	// Masters where our SET may have landed: all but those that refused,
	// including those that have not answered when the outcome is decided.
	maybeHeld := make([]bool, n)
	for i := range maybeHeld {
		maybeHeld[i] = true
	}
	var holderPTTLs []int64
	var counter int64        // highest fencing counter among the counted yes votes
	voted := make([]bool, n) // counted yes votes: where the fence is written back
	// The granted-lock check (granted.go): with a quorum of votes, the
	// other masters are still heard; one that shows a granted lock refuses
	// the grant, and one this acquire stopped listening to (ctx) forbids it.
	check := c.grantedCheck()
	var granted []int64 // PTTLs of the granted locks seen
	heard, unheardN := 0, 0
	// With the check on, the fence write-back starts as soon as the votes
	// needed are in (the fence from their counters, fence.go), while the
	// other answers are still awaited: the two round trips overlap. A
	// grant refused after all has its keys and records released (cleanup).
	var early chan int
	var earlyRes OutcomeError
	var earlyVoted []bool
	var earlyFence int64
	c.gather(ctx, out, start, nil, func(r reply) bool {
		m := c.masters[r.idx]
		v, ok := parseVote(r.val)
		heard++
		switch {
		case r.err != nil:
			if unheard(r.err) {
				unheardN++
			}
			res.Failures = append(res.Failures, masterErr(c, r))
		case !ok:
			res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: errBadReply})
		default:
			maybeHeld[r.idx] = v.code == 1
			if (v.code == 0 || v.code == codeLost) && v.extra == "g" {
				// Evidence from any master that answered, counting or
				// not, intact or not: a record is written only after a
				// quorum voted.
				granted = append(granted, v.value)
			}
			if err := m.checkVote(v, r); err != nil {
				res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: err})
			} else if !m.counts() {
				res.Failures = append(res.Failures, &MasterError{Index: r.idx, Addr: m.addr, Err: ErrMasterQuarantined})
			} else if v.code == 1 {
				counter = max(counter, v.value)
				res.Votes++
				voted[r.idx] = true
				if check && early == nil && res.Votes >= c.need && len(granted) == 0 && unheardN == 0 {
					earlyFence = c.issuedFloor(counter, issuedBefore) + 1
					earlyVoted = slices.Clone(voted)
					early = make(chan int, 1)
					go func() {
						early <- c.writeFence(ctx, keys, token, earlyFence, earlyVoted, c.quorum, false, &earlyRes)
					}()
				}
			} else {
				res.Refused++
				if v.value > 0 {
					holderPTTLs = append(holderPTTLs, v.value)
				}
			}
		}
		lost := res.Refused+len(res.Failures) > n-c.need
		if !check {
			return res.Votes >= c.need || lost
		}
		// Every answer is read, evidence or not: each vote's checks
		// (data loss, clock) run, so a master that lost the lock is
		// quarantined, not only refused this once.
		return lost || heard == n
	})
	written := 0
	if early != nil {
		written = <-early
		res.Failures = append(res.Failures, earlyRes.Failures...)
	}
	overGrant := check && res.Votes >= c.need && (len(granted) > 0 || unheardN > 0)
	granting := res.Votes >= c.need && !overGrant
	var fence int64
	fenceFailed := false
	if granting && c.opts.fenceKey != "" {
		// Written back first to the masters that voted (a quorum: the proof
		// needs no more, and the late voters save a script call each), then,
		// if a voter stopped answering in between, to the other masters
		// that may hold the lock: their SETs are ahead of the write-back on
		// the same lane.
		if early != nil {
			fence, voted = earlyFence, earlyVoted
		} else {
			fence = c.issuedFloor(counter, issuedBefore) + 1
			written = c.writeFence(ctx, keys, token, fence, voted, c.quorum, false, &res)
		}
		if written < c.quorum {
			rest := make([]bool, n)
			more := false
			for i := range rest {
				rest[i] = maybeHeld[i] && !voted[i]
				more = more || rest[i]
			}
			if more {
				written += c.writeFence(ctx, keys, token, fence, rest, c.quorum-written, true, &res)
			}
		}
		fenceFailed = written < c.quorum // the lock is not ours without its fence on a quorum
	}
	validity := ttl - time.Since(start) - c.drift(ttl)
	if granting && validity > 0 && !fenceFailed {
		c.issued(fence)
		return &Lock{c: c, key: key, token: token, fence: fence, ttl: ttl, validUntil: start.Add(ttl - c.drift(ttl))}, nil
	}

	c.cleanup(key, token, maybeHeld)
	switch {
	case check && len(granted) > 0:
		// A granted lock holds the key on another master: a master that
		// voted here lost it (a rollback, an eviction), or its release
		// has not reached that master. Held until it ends there.
		c.grantRefusals.Add(1)
		res.Kind = ErrLockHeld
		res.RetryAfter = time.Duration(slices.Max(granted)) * time.Millisecond
	case overGrant:
		// Stopped listening (ctx) before every master answered.
		res.Kind = ErrQuorumUnavailable
	case fenceFailed:
		// A quorum voted but too few stored the fencing token in time.
		res.Kind = ErrQuorumUnavailable
	case granting:
		// A quorum agreed but too late: the masters are too slow for this TTL.
		res.Kind = ErrQuorumUnavailable
		res.Failures = append(res.Failures, fmt.Errorf("validity %v ≤ 0 after %v", validity, time.Since(start)))
	case len(res.Failures) > n-c.need:
		res.Kind = ErrQuorumUnavailable
		// A master known to be down may be back: probe now rather than at
		// the next health interval, so that it counts again within
		// milliseconds of its return.
		c.kickHealth()
	default:
		res.Kind = ErrLockHeld
		res.RetryAfter = retryAfter(holderPTTLs, c.quorum)
	}
	sortFailures(res.Failures)
	return nil, &res
}

// cleanup runs the compare-and-delete release on every master where the
// token may have been set, on a context of its own, and waits (bounded by
// the per-master timeout) for the answers. The releases are queued behind
// their SETs on the same lane, so none can overtake the SET it cleans up.
func (c *Client) cleanup(key, token string, maybeHeld []bool) {
	if !slices.Contains(maybeHeld, true) {
		return
	}
	out, waiting := c.fanout(releaseScript, c.releaseKeys(key), []any{token}, true, time.Now(), maybeHeld)
	timer := time.NewTimer(c.opts.perMasterTimeout)
	defer timer.Stop()
	for ; waiting > 0; waiting-- {
		select {
		case <-out.replies:
		case <-timer.C:
			return
		}
	}
}

// retryAfter estimates when the holder's lock ends: when fewer than a
// quorum of masters still hold it, i.e. the quorum-th longest PTTL seen.
func retryAfter(pttls []int64, quorum int) time.Duration {
	if len(pttls) == 0 {
		return 0
	}
	slices.Sort(pttls)
	slices.Reverse(pttls)
	i := min(quorum, len(pttls)) - 1
	return time.Duration(pttls[i]) * time.Millisecond
}

func masterErr(c *Client, r reply) error {
	var me *MasterError
	if errors.As(r.err, &me) {
		return r.err
	}
	m := c.masters[r.idx]
	return &MasterError{Index: r.idx, Addr: m.addr, Err: r.err}
}

func sortFailures(errs []error) {
	slices.SortFunc(errs, func(a, b error) int {
		var ma, mb *MasterError
		ia, ib := len(errs), len(errs)
		if errors.As(a, &ma) {
			ia = ma.Index
		}
		if errors.As(b, &mb) {
			ib = mb.Index
		}
		return ia - ib
	})
}

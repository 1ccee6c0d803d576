package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// AcquireOption configures one Acquire call.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	wait      time.Duration
	retry     RetryStrategy
	stop      <-chan struct{}
	lockDelay time.Duration // lockdelay.go
	// permit: for AcquirePermit, its semaphore and permits (waitQueues);
	// nil for a lock.
	permit *permitWait
}

// WithStopWaiting ends the wait (WithWait) when stop is closed: Acquire
// makes no further attempt and returns the last attempt's error (e.g.
// ErrLockHeld), as when the wait runs out. An attempt in progress is not
// interrupted, unlike cancelling the context. A daemon shutting down uses
// it to answer its waiters instead of cutting them off.
func WithStopWaiting(stop <-chan struct{}) AcquireOption {
	return func(a *acquireConfig) { a.stop = stop }
}

// WithWait lets Acquire wait for up to d for a held lock before giving up
// (default 0: one attempt). A held lock is attempted again when it is
// released or its TTL ends (wait.go), not at the retry strategy's pace;
// the strategy paces the attempts only while no quorum of masters can
// vote. The wait ends when d, the context or WithStopWaiting ends it: a
// strategy that makes no retry at all (NoRetry, LinearBackoff(0)) means
// no wait, but a strategy's later stop (LimitRetry's n) does not end one.
func WithWait(d time.Duration) AcquireOption {
	return func(a *acquireConfig) { a.wait = d }
}

// WithRetry overrides the Client's retry strategy for this call. Retries
// still stop when the wait budget (WithWait) or the context ends; within a
// wait the strategy paces only the attempts made while no quorum can vote
// (WithWait).
func WithRetry(s RetryStrategy) AcquireOption {
	return func(a *acquireConfig) { a.retry = s }
}

// MaxKeyBytes is the longest lock key (or semaphore name) an acquire
// accepts, in bytes: 8 KiB. Redis takes longer keys, but every call sends
// the key several times (the lock, its fence and delay records), and a
// call of megabytes holds up its lane's pipeline past the per-master
// timeout, failing the calls behind it for other keys.
const MaxKeyBytes = 8 << 10

// keyTooLong is the ErrInvalid for a key over MaxKeyBytes, named by what
// (the key itself is not quoted: it is long).
func keyTooLong(what string, n int) error {
	return fmt.Errorf("%w: %s is %d bytes, over the limit of %d (MaxKeyBytes)", ErrInvalid, what, n, MaxKeyBytes)
}

// MinTTL is the smallest TTL Acquire and Extend accept as an argument. A
// TTL must also leave validity after the drift allowance (2 ms + drift
// factor × TTL + the clock allowance, which grows with the masters' clock
// readings): one that does not is refused with a *TTLError matching
// ErrInvalid that gives the smallest TTL accepted now — tens of
// milliseconds with the defaults, more when clock readings are uncertain.
const MinTTL = 10 * time.Millisecond

// Acquire obtains the lock key for ttl on a quorum of masters (the Redis
// Redlock page, "The Redlock algorithm"):
//
//  1. take the monotonic time and a new random token;
//  2. send SET key token NX PX ttl to every master at once, each bounded by
//     the per-master timeout, and decide as soon as a quorum has voted yes
//     or can no longer do so (a master stuck on an earlier command, or
//     whose dial just failed, answers at once; granted.go, "Masters marked
//     down");
//  3. validity = ttl − elapsed − drift, drift = ttl × drift factor + 2ms;
//  4. the lock is held if votes ≥ quorum and validity > 0;
//  5. otherwise run the compare-and-delete release on every master that may
//     hold the token (a timed-out SET may still have landed), on a context
//     detached from ctx, and wait for it before returning — so a cancelled
//     caller leaves no key of its own behind; then, while the wait budget
//     allows, retry after a jittered delay. Without a wait, an attempt
//     refused as contended (no granted lock seen: callers that split the
//     votes, OutcomeError.Contended) is retried up to four times after a
//     random delay (retryContended), unless WithRetry(NoRetry()).
//
// Errors: every failure matches ErrNotObtained. A lock held by another owner
// is an *OutcomeError matching ErrLockHeld (with RetryAfter); too few
// masters answering is an *OutcomeError matching ErrQuorumUnavailable (with
// a *MasterError per failed master); a cancelled or expired ctx is joined
// in, so errors.Is(err, context.Canceled) works. Bad arguments match
// ErrInvalid, among them a key over MaxKeyBytes and one that is one of
// the Client's own (the
// marker, lease horizon and fencing counter keys, and fence records
// "<fence key>:…").
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (_ *Lock, err error) {
	defer func() { err = notObtained(err) }()
	if key == "" {
		return nil, fmt.Errorf("%w: key must not be empty", ErrInvalid)
	}
	if len(key) > MaxKeyBytes {
		return nil, keyTooLong("key", len(key))
	}
	if c.reservedKey(key) {
		return nil, fmt.Errorf("%w: key %q is one of the Client's own keys (marker, lease horizon, fencing counter, or a fence record \"<fence key>:…\")", ErrInvalid, key)
	}
	if err := c.checkAcquireTTL(ttl); err != nil {
		return nil, err
	}
	cfg, err := c.newAcquireConfig(ttl, opts)
	if err != nil {
		return nil, err
	}
	delay := cfg.lockDelay
	return c.attemptThenWait(ctx, &cfg, key, nil, func(ctx context.Context) (*Lock, error) {
		return c.acquireOnce(ctx, key, ttl, delay)
	})
}

// newAcquireConfig applies opts, with the Client's retry strategy unless
// one is given, and checks the lock-delay against ttl.
func (c *Client) newAcquireConfig(ttl time.Duration, opts []AcquireOption) (acquireConfig, error) {
	cfg := acquireConfig{}
	for _, o := range opts {
		if o != nil { // a nil option is no option, as in New
			o(&cfg)
		}
	}
	if cfg.retry == nil {
		cfg.retry = c.opts.retry()
	}
	if cfg.retry == nil {
		return cfg, fmt.Errorf("%w: retry strategy: the function given to WithRetryStrategy returned nil", ErrInvalid)
	}
	return cfg, c.lockDelayError(ttl, cfg.lockDelay)
}

// attemptThenWait makes an acquire's first attempt and, when it is refused
// and cfg allows a wait, waits in queue (waitInQueue; woken also by the
// release of any key of watch, for a multi-key lock) until the wait ends.
func (c *Client) attemptThenWait(ctx context.Context, cfg *acquireConfig, queue string, watch []string, attempt func(context.Context) (*Lock, error)) (*Lock, error) {
	giveUp := time.Now().Add(cfg.wait)
	if cfg.permit != nil && cfg.wait > 0 && c.waits.queued(queue) {
		// A semaphore whose permits this Client's waiters already queue
		// for: a first attempt would try every slot (up to permits
		// fan-outs, most of them refused) only to jump the queue; join it
		// instead. Until a head's attempt, the error is "held".
		held := &OutcomeError{Op: "acquire", Kind: ErrLockHeld, Quorum: c.need, Masters: len(c.masters)}
		return c.waitInQueue(ctx, queue, attempt, cfg, giveUp, held, time.Now())
	}
	first := time.Now()
	lock, err := attempt(ctx)
	if cfg.wait <= 0 {
		lock, err = c.retryContended(ctx, cfg, time.Since(first), lock, err, attempt)
	}
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
	if watch != nil {
		c.waits.watch(queue, watch)
		defer c.waits.unwatch(queue, watch)
	}
	return c.waitInQueue(ctx, queue, attempt, cfg, giveUp, err, first)
}

// contendedRetries is how many more attempts a one-shot acquire makes
// after a contended one (OutcomeError.Contended), and contendedWindow
// bounds the first random delay before them (each next one doubles).
const (
	contendedRetries = 4
	contendedWindow  = 20 * time.Millisecond
)

// retryContended retries a one-shot acquire whose attempt was refused as
// contended: two callers that split the votes (each a minority of the
// masters, which takes as little as one master down and two callers at
// once) would otherwise both be told "held" with nobody holding the key —
// and a cron job guarded by it would run nowhere. Each contender released
// its keys before returning (Acquire's step 5), so a retry after a random
// delay (the Redis Redlock page: "retry after a random delay in order to
// try to desynchronize multiple clients") finds the key free, or held by
// the one that retried first. The delay is drawn from [0, w), w ten times
// the first attempt's duration (at least 2ms, at most contendedWindow),
// doubled at each retry: two contenders retry within one attempt's time
// of each other (and may split again) at most about once in five at the
// first retry and half as often at each next one, so that four retries
// leave a split well under once in ten thousand; the delays add up to at
// most 15w (300ms), besides the attempts themselves. An attempt refused
// by a granted lock, a lock-delay or no quorum is not retried, nor is a
// caller that chose NoRetry. Keys of a holder that writes no fence record
// (a Client with fencing off on the same masters) look contended.
func (c *Client) retryContended(ctx context.Context, cfg *acquireConfig, took time.Duration, lock *Lock, err error, attempt func(context.Context) (*Lock, error)) (*Lock, error) {
	if _, single := cfg.retry.(noRetry); single {
		return lock, err
	}
	w := min(max(10*took, 2*time.Millisecond), contendedWindow)
	for i := 0; i < contendedRetries && isContended(err) && ctx.Err() == nil; i++ {
		if c.beforeContendedRetry != nil {
			c.beforeContendedRetry()
		}
		t := time.NewTimer(rand.N(w << i))
		select {
		case <-ctx.Done():
			t.Stop()
			return lock, err
		case <-t.C:
		}
		c.contendedRetries.Add(1)
		lock, err = attempt(ctx)
	}
	return lock, err
}

// isContended reports whether err is an acquire refused as contended.
func isContended(err error) bool {
	var oe *OutcomeError
	return errors.As(err, &oe) && oe.Kind == ErrLockHeld && oe.Contended
}

// checkAcquireTTL checks an acquire's ttl: MinTTL to the max TTL, and
// longer than its drift allowance.
func (c *Client) checkAcquireTTL(ttl time.Duration) error {
	if ttl < MinTTL {
		return fmt.Errorf("%w: ttl %v is below the minimum %v", ErrInvalid, ttl, MinTTL)
	}
	if ttl > c.opts.maxTTL {
		return fmt.Errorf("%w: ttl %v is above the max TTL %v", ErrInvalid, ttl, c.opts.maxTTL)
	}
	return c.ttlError(ttl)
}

// acquireOnce is one attempt of Acquire: the votes (steps 2–4), the fence
// write-back, and on failure the clean-up (step 5) and the error.
func (c *Client) acquireOnce(ctx context.Context, key string, ttl, lockDelay time.Duration) (*Lock, error) {
	c.attempts.Add(1)
	token, err := c.tokenFor(ctx)
	if err != nil {
		return nil, err
	}
	set := lockSet{key: key, vote: c.voteKeys(key)}
	return c.acquireSet(ctx, &set, token, ttl, lockDelay)
}

// acquireSet is acquireOnce for a lock key or, with set.multi, the keys of
// a multi-key lock (multikey.go): the same votes, grant rules, fence
// write-back and clean-up, with the set's scripts.
func (c *Client) acquireSet(ctx context.Context, set *lockSet, token string, ttl, lockDelay time.Duration) (*Lock, error) {
	if !c.beginAcquire() {
		return nil, errors.Join(ErrNotObtained, ErrClosed)
	}
	defer c.endAcquire()
	if err := c.closedErr(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	set.delayed = lockDelay > 0
	t := c.newAcquireTally(ctx, set, token)
	if t.tooFewUp() {
		return nil, t.failure(false, false, 0, 0)
	}
	start := time.Now()
	out, _ := c.fanout(set.acquireCall(c, token, ttl, lockDelay), start)
	c.gather(ctx, out, start, nil, t.add, t.more)
	written := t.awaitEarly()
	granting := t.granting()
	var fence int64
	fenceFailed := false
	if granting && c.opts.fenceKey != "" {
		fence, written = t.writeBack(written)
		fenceFailed = written < c.quorum // the lock is not ours without its fence on a quorum
	}
	validity := ttl - time.Since(start) - c.drift(ttl)
	if granting && validity > 0 && !fenceFailed {
		c.issued(fence)
		if t.unsent != 0 && !handedOver(ctx) {
			// Before the Lock is returned: its release takes it.
			now := c.sinceEpoch()
			c.unreached.add(token, t.unsent, now+int64(ttl+lockDelay), now)
		}
		return &Lock{c: c, key: set.key, keys: set.multi, token: token, fence: fence, ttl: ttl, validUntil: start.Add(ttl - c.drift(ttl))}, nil
	}
	c.cleanup(set, token, t.maybeHeld, out)
	return nil, t.failure(granting, fenceFailed, validity, time.Since(start))
}

// acquireTally is what one acquire attempt learns from the masters'
// votes: what the grant is decided on, where the fence is written back,
// and what a refused attempt cleans up and reports.
type acquireTally struct {
	c            *Client
	ctx          context.Context
	set          *lockSet
	token        string
	issuedBefore int64 // the highest fence issued before the votes: see issuedFloor
	// check: the granted-lock check (granted.go). With a quorum of votes,
	// the other masters are still heard; one that shows a granted lock
	// refuses the grant, and one this acquire stopped listening to (ctx)
	// forbids it.
	check bool
	res   OutcomeError
	// maybeHeld: masters where our SET may have landed: all but those
	// that refused, including those that have not answered when the
	// outcome is decided.
	maybeHeld []bool
	// unsent: bit i set, master i's vote was never sent (reply.unsent;
	// masters 0 to 63): its SET cannot have landed (unreached.go).
	unsent uint64
	voted  []bool // counted yes votes: where the fence is written back
	// counter: the highest fencing counter among every answer read so
	// far, yes votes, refusals and uncounted votes alike (fence.go,
	// "Counters of every master heard"): the fence is above it.
	counter     int64
	holderPTTLs []int64
	granted     []int64 // PTTLs of the granted locks seen
	heard       int
	heardBits   uint64 // bit i set: master i answered (masters 0 to 63)
	unheard     int    // masters this acquire stopped listening to (ctx)
	// With the check on, the fence write-back starts as soon as the votes
	// needed are in (the fence from their counters, fence.go), while the
	// other answers are still awaited: the two round trips overlap. A
	// grant refused after all has its keys and records released (cleanup).
	early      *fenceWrite
	earlyVoted []bool
	earlyFence int64
	// fenceExhausted: the highest counter or issued fence, when it left
	// no fence up to MaxFence (nextFence); 0 otherwise.
	fenceExhausted int64
}

func (c *Client) newAcquireTally(ctx context.Context, set *lockSet, token string) *acquireTally {
	n := len(c.masters)
	t := &acquireTally{
		c: c, ctx: ctx, set: set, token: token,
		issuedBefore: c.fenceIssued.Load(),
		check:        c.grantedCheck(),
		res:          OutcomeError{Op: "acquire", Quorum: c.need, Masters: n},
		maybeHeld:    make([]bool, n),
		voted:        make([]bool, n),
	}
	for i := range t.maybeHeld {
		t.maybeHeld[i] = true
	}
	return t
}

// tooFewUp reports whether more masters are known to be down than the
// votes needed allow, with each of them in t's failures: the attempt then
// sends nothing and fails at once (ErrQuorumUnavailable), closed and fast.
// What it saves is the SETs on the masters still up, which
// could never make a quorum and would each need a release (cleanup) —
// one round trip of a failed acquire that was all its latency. A master
// that comes back is probed at once (failure kicks the health loop).
func (t *acquireTally) tooFewUp() bool {
	c := t.c
	for _, m := range c.masters {
		if !m.up.Load() {
			t.res.Failures = append(t.res.Failures, &MasterError{Index: m.idx, Addr: m.addr, Err: ErrMasterDown})
		}
	}
	if len(t.res.Failures) > len(c.masters)-c.need {
		return true
	}
	t.res.Failures = t.res.Failures[:0]
	return false
}

// add reads one master's answer (gather's onReply) and reports whether the
// outcome is decided.
func (t *acquireTally) add(r reply) bool {
	c, n := t.c, len(t.c.masters)
	t.heard++
	t.heardBits |= masterBit(r.idx)
	if unheard(r.err) {
		t.unheard++
	}
	if r.unsent {
		// The lane dropped the vote: nothing to clean up there.
		t.maybeHeld[r.idx] = false
		t.unsent |= masterBit(r.idx)
	}
	v, parsed, err := c.judgeVote(r)
	if parsed {
		t.maybeHeld[r.idx] = v.code == 1
		if c.opts.fenceAboveEveryAnswer || v.code == 1 && err == nil {
			t.counter = max(t.counter, v.counter)
		}
		if (v.code == 0 || v.code == codeLost) && (v.extra == "g" || v.extra == "D") {
			// Evidence from any master that answered, counting or not,
			// intact or not: a record is written only after a quorum
			// voted. "D": the key is free, in the delay of a lock that
			// was granted (lockdelay.go, "Silent losses of a record").
			t.granted = append(t.granted, v.value)
		}
	}
	switch {
	case err != nil:
		t.res.Failures = append(t.res.Failures, err)
	case v.code == 1:
		t.res.Votes++
		t.voted[r.idx] = true
		if t.check && t.early == nil && t.res.Votes >= c.need && len(t.granted) == 0 && t.unheard == 0 {
			t.startEarlyWriteBack()
		}
	default:
		t.res.Refused++
		if v.extra == "d" || v.extra == "D" {
			t.res.Delayed++
		}
		if v.value > 0 {
			t.holderPTTLs = append(t.holderPTTLs, v.value)
		}
	}
	lost := t.res.Refused+len(t.res.Failures) > n-c.need
	if !t.check {
		return t.res.Votes >= c.need || lost
	}
	// Every answer is read, evidence or not: each vote's checks (data
	// loss, clock) run, so a master that lost the lock is quarantined, not
	// only refused this once. A lost attempt decides early once a granted
	// lock is seen or no quorum can answer; a key refused with neither is
	// read to the end, so that "contended" (no granted lock on any master
	// that answered, failure) is said of every master's answer.
	return lost && (len(t.granted) > 0 || len(t.res.Failures) > n-c.need) || t.heard == n
}

// more is how many more answers add needs before it can decide or start
// the early write-back (gather's more): the votes still missing for the
// quorum, while the write-back has not started (without the check the
// quorum-th vote decides); the refusals and failures still missing for
// "lost"; the answers still missing for heard == n. Each of add's
// decisions needs one of the three, so add cannot return true, nor start
// the write-back, with fewer answers. Healthy, a grant is read at the
// quorum-th answer and at the last: two wake-ups, not five.
func (t *acquireTally) more() int {
	c, n := t.c, len(t.c.masters)
	k := n - t.heard
	if t.early == nil {
		k = min(k, c.need-t.res.Votes)
	}
	return min(k, n-c.need+1-t.res.Refused-len(t.res.Failures))
}

// startEarlyWriteBack sends the fence to the masters that voted so far,
// and to those whose votes have not answered yet: each one's vote is ahead
// of the write-back on the same lane, so the record lands wherever that
// vote set the key (fence.lua writes only where the token holds it). Its
// answers are read after the other votes' (awaitEarly), until a quorum
// stored it: the two round trips overlap without a goroutine of their
// own, and the late voters' write-backs add no wait.
//
// Why the late voters too (granted.go): with the record on the quorum's
// voters alone, a granted lock's key on a late voter was bare, and a
// contender that found the key free on N − quorum masters that lost it
// plus one that never had it, and the bare copy refusing it, was granted
// when the one master left with the record answered late (a black-box
// pass: two masters' lock keys deleted every 0.3 s under load, two
// holders in 2 of 5 runs). With the record on every master holding the
// key, every one of them must fail to answer for that.
func (t *acquireTally) startEarlyWriteBack() {
	c := t.c
	fence, ok := t.nextFence()
	if !ok {
		return // writeBack refuses the grant
	}
	t.earlyFence = fence
	t.earlyVoted = slices.Clone(t.voted)
	for i := range t.earlyVoted {
		if i < 64 && t.heardBits&masterBit(i) == 0 && t.maybeHeld[i] {
			t.earlyVoted[i] = true
		}
	}
	t.early = c.sendFence(t.set, t.token, t.earlyFence, t.earlyVoted)
}

// nextFence is the fence of a grant from the answers read so far: one
// above every counter heard and every fence this Client issued
// (issuedFloor). ok is false when that is above MaxFence: the scripts
// compare counters as Lua numbers, exact only up to 2^53, so a fence above
// it could not be stored above the last one (fence.lua would leave the
// counter rounded down and the next holder would get the same fence). No
// grant is made then (fenceExhausted): fail closed. Counters get there only
// by an operator's hand (a RepairFences target near MaxFence is refused,
// RepairHeadroom): at a million grants a second, 285 years.
func (t *acquireTally) nextFence() (fence int64, ok bool) {
	floor := t.c.issuedFloor(t.counter, t.issuedBefore)
	if floor >= MaxFence {
		t.fenceExhausted = floor
		t.c.fenceExhaustedOnce(floor)
		return 0, false
	}
	return floor + 1, true
}

// awaitEarly reads the early write-back, if one started, and returns on
// how many masters it stored the fence.
func (t *acquireTally) awaitEarly() int {
	if t.early == nil {
		return 0
	}
	return t.early.read(t.ctx, t.c.quorum, false, &t.res)
}

// overGrant: a quorum voted, but the granted-lock check refuses the grant
// (a granted lock seen, or a master not heard).
func (t *acquireTally) overGrant() bool {
	return t.check && t.res.Votes >= t.c.need && (len(t.granted) > 0 || t.unheard > 0)
}

// granting: a quorum voted and nothing refuses the grant.
func (t *acquireTally) granting() bool {
	return t.res.Votes >= t.c.need && !t.overGrant()
}

// writeBack stores the fence of a grant, given that the early write-back
// stored it on written masters (the voters and the votes still awaited
// then: startEarlyWriteBack), and returns the fence and on how many
// masters it is now stored. Without an early write-back it is written back
// to the masters that voted, then, if a voter stopped answering in
// between, to the other masters that may hold the lock: their SETs are
// ahead of the write-back on the same lane.
//
// The early write-back's fence came from the answers in by then; when a
// later answer showed a counter at or above it (another key's grant
// raised that master's counter meanwhile, or the first answers' masters
// lost the last holder's write-back unseen: fence.go, "Counters of every
// master heard"), that fence is not the grant's: a new one, above every
// counter heard, is written back to the voters (a max-assign, the record
// overwritten) before the grant, one more round trip in that case only
// (Client.FenceRewrites counts them).
func (t *acquireTally) writeBack(written int) (fence int64, stored int) {
	c, n := t.c, len(t.c.masters)
	voted := t.voted
	if t.early != nil && (t.earlyFence > t.counter || !c.opts.fenceAboveEveryAnswer) {
		fence, voted = t.earlyFence, t.earlyVoted
	} else {
		var ok bool
		if fence, ok = t.nextFence(); !ok {
			return 0, 0
		}
		if t.early != nil {
			c.fenceRewrites.Add(1)
		}
		written = c.writeFence(t.ctx, t.set, t.token, fence, voted, c.quorum, false, &t.res)
	}
	if written < c.quorum {
		rest := make([]bool, n)
		more := false
		for i := range rest {
			rest[i] = t.maybeHeld[i] && !voted[i]
			more = more || rest[i]
		}
		if more {
			written += c.writeFence(t.ctx, t.set, t.token, fence, rest, c.quorum-written, true, &t.res)
		}
	}
	return fence, written
}

// failure is the error of an attempt that was not granted: granting (a
// quorum voted and nothing refused it), fenceFailed (the fence was not
// stored on a quorum), validity (what was left of the TTL) after elapsed.
func (t *acquireTally) failure(granting, fenceFailed bool, validity, elapsed time.Duration) error {
	c, n, res := t.c, len(t.c.masters), &t.res
	switch {
	case t.check && len(t.granted) > 0:
		// A granted lock holds the key on another master: a master that
		// voted here lost it (a rollback, an eviction), or its release
		// has not reached that master. Held until it ends there.
		c.grantRefusals.Add(1)
		res.Kind = ErrLockHeld
		res.RetryAfter = time.Duration(slices.Max(t.granted)) * time.Millisecond
	case t.overGrant():
		// Stopped listening (ctx) before every master answered.
		res.Kind = ErrQuorumUnavailable
	case fenceFailed:
		// A quorum voted but too few stored the fencing token in time, or
		// no fence is left (nextFence).
		res.Kind = ErrQuorumUnavailable
		if t.fenceExhausted != 0 {
			res.Failures = append(res.Failures, fmt.Errorf("%w: the fencing counter is at %d, no fence is left up to the largest, %d", ErrFenceExhausted, t.fenceExhausted, MaxFence))
		}
	case granting:
		// A quorum agreed but too late: the masters are too slow for this TTL.
		res.Kind = ErrQuorumUnavailable
		res.Failures = append(res.Failures, fmt.Errorf("validity %v ≤ 0 after %v", validity, elapsed))
	case len(res.Failures) > n-c.need:
		res.Kind = ErrQuorumUnavailable
		// A master known to be down may be back: probe now rather than at
		// the next health interval, so that it counts again within
		// milliseconds of its return.
		c.kickHealth()
	default:
		res.Kind = ErrLockHeld
		res.RetryAfter = retryAfter(t.holderPTTLs, c.quorum)
		// Here, with the check on, no refusal reported 'g' (the case
		// above), and every master answered or failed (add): by the
		// argument in granted.go no lock is granted while at most
		// N − quorum masters fail. Without the check a split cannot be
		// told from a holder whose masters failed: never contended.
		res.Contended = t.check && res.Delayed == 0 && t.heard == n
	}
	sortFailures(res.Failures)
	return res
}

// cleanup runs the compare-and-delete release on every master where the
// token may have been set (maybeHeld), and waits (bounded by the
// per-master timeout) for the answers. The releases are queued behind
// their SETs on the same lane, so none can overtake the SET it cleans up
// while that lane's connection holds. A master that deletes a key of the
// token publishes it, as a release does: another attempt may have been
// refused for that key (two attempts that split the votes, a winner
// refused by the granted-lock check while a release was on its way), and
// its waiters would otherwise sleep until the holder's end or the poll
// fallback, with the key free.
//
// A master whose vote was written (votes, the acquire's fan-out) but whose
// release did not delete a key in time keeps the release for the health loop,
// as Release does (releaseLater, retryReleases). A paused master runs what
// sat in its sockets when it resumes — the vote's SET too, possibly long
// after the acquire failed — while the release, sent over the connection
// that replaced a stalled one, may reach it first, or never when that
// connection could not be set up; the key would then be refused to
// everyone, as contended, for its whole TTL. The health loop sends the
// release again after the master answered a probe, so after whatever sat
// in its sockets before it resumed has run.
//
// A master whose vote answered after the outcome was decided (gather does
// not wait for the votes that cannot change it) and wrote nothing — it
// refused, or lost its data — is settled: the vote ran, so no SET of the
// token can land there later. It gets no release, before the fan-out or
// after the wait (a refused acquire on healthy masters sent no release
// for the health loop to send again, and logged no missed releases).
func (c *Client) cleanup(set *lockSet, token string, maybeHeld []bool, votes *fan) {
	for i, held := range maybeHeld {
		if held && wroteNothing(votes, i) {
			maybeHeld[i] = false
		}
	}
	if !slices.Contains(maybeHeld, true) {
		return
	}
	rel := set.releaseCall(c, token)
	rel.mustSend, rel.only = true, maybeHeld
	out, waiting := c.fanout(rel, time.Now())
	deleted := make([]bool, len(maybeHeld))
	timer := time.NewTimer(c.opts.perMasterTimeout)
	defer timer.Stop()
wait:
	for !out.arm(int32(waiting)) {
		select {
		case <-out.wake:
		case <-timer.C:
			break wait
		}
	}
	for i := range deleted {
		if r, ok := out.answer(i); ok {
			n, _ := r.val.(int64)
			deleted[i] = r.err == nil && n == 1
		}
	}
	for i, held := range maybeHeld {
		// Read after the wait: a vote still queued when the release was
		// sent could be written until its deadline, which has passed now.
		// Only a delete settles a master: "absent" may come over a
		// connection that replaced the vote's, before the vote ran.
		if !held || deleted[i] || votes.calls[i].written.Load() == 0 || wroteNothing(votes, i) {
			continue
		}
		if set.multi == nil {
			c.masters[i].releaseLater(set.key, token)
		}
		for _, k := range set.multi {
			c.masters[i].releaseLater(k, token)
		}
	}
}

// wroteNothing reports whether master i's vote of votes has answered, and
// that it wrote nothing there (every vote script writes only with code 1:
// acquire.lua, acquire_multi.lua).
func wroteNothing(votes *fan, i int) bool {
	r, ok := votes.answer(i)
	if !ok || r.err != nil {
		return false
	}
	v, parsed := parseVote(r.val)
	return parsed && v.code != 1
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

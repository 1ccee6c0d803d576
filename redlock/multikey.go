package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Multi-key locks: several keys taken together, all or none, with one
// token (AcquireMulti).
//
// On each master one script (acquire_multi.lua) checks every key of the set
// and then either sets them all for the token, with one expiry, or writes
// nothing: a master never holds part of a set. Its answer is one vote for
// the whole set, judged like a single key's (the data-loss, clock and
// counter checks of the vote prelude, quarantine), and the set is granted
// on the same rule: a quorum of votes, the granted-lock check of every
// other master (a granted lock on any key of the set refuses the grant),
// the fence written back with every key's record, validity = ttl − elapsed
// − drift. A refused or failed attempt releases the set on every master
// where it may have landed, the masters that timed out included, as
// Acquire does, and waits for it.
//
// # Why the set is held by at most one holder, key by key
//
// Take a key k of a granted set S, and any other lock L on k (a single key
// or another set holding k) granted while S is valid. Each was granted by a
// quorum of votes, and a master votes for S only when the script found
// every key of S free and set them all in one atomic step; the same holds
// for L. Two quorums of the same N masters share a master m: m voted for
// both, so one of them set k while the other still held it — unless one
// had ended there. That is exactly the argument for a single key (doc.go),
// applied to k; the faults that make a master forget a key (data loss,
// rollback, clock jumps) are caught by the same checks, because the vote is
// the same prelude's. So the guarantee of a single lock holds for every key
// of the set, and the set is all or nothing on every master.
//
// # Fences
//
// The set's fence comes from the same per-master counter as a single
// key's (fence.go): one global sequence, so one fence f is strictly above
// every fence issued before on any key, in particular above every earlier
// holder of each key of the set. The write-back stores f in every key's
// fence record, only where the token holds every key of the set.
//
// # No deadlock
//
// Nobody holds part of a set while waiting: an attempt takes every key or
// none on each master, and a refused attempt releases what it may have
// written before it waits. Two callers asking for overlapping sets in
// different orders therefore never wait on each other while holding: at
// worst both are refused and retry, with the jittered retry strategy.
//
// A waiting AcquireMulti (WithWait) is woken by the release of any key of
// its set, through any Client of the deployment.
//
// The keys must be distinct, at most MaxMultiKeys, and fencing must be on
// (the scripts' layout has the counter; WithFenceKey("") refuses sets).

// MaxMultiKeys is the largest number of keys of one multi-key lock.
const MaxMultiKeys = 64

// lockSet is what one acquire takes on each master: one lock key, or the
// keys of a multi-key lock.
type lockSet struct {
	key   string   // the lock key; the first key of a multi-key lock
	multi []string // every key of a multi-key lock; nil for one key
	// vote is the KEYS of the vote scripts and of the fence write-back:
	// voteKeys(key) for one key; for a set, its first key, the marker,
	// horizon and counter, then multiStride keys per lock key (multiKeys).
	vote []string
	// delayed: the acquire asks for a lock-delay; its fence write-back
	// keeps each fence record as long as the delay record (fence.lua).
	delayed bool
}

// multiStride is how many KEYS each lock key of a set has in the multi-key
// scripts: the lock key and its fence record, and its delay record when
// lock-delay is on.
func (c *Client) multiStride() int {
	if c.opts.maxLockDelay > 0 {
		return 3
	}
	return 2
}

// multiSet builds the lockSet of keys (checked by checkMultiKeys).
func (c *Client) multiSet(keys []string) *lockSet {
	stride := c.multiStride()
	prelude := c.voteKeys(keys[0])[:4]
	vote := make([]string, 0, 4+stride*len(keys))
	vote = append(vote, prelude...)
	for _, k := range keys {
		vote = append(vote, k, c.fenceRecordKey(k))
		if stride == 3 {
			vote = append(vote, c.delayRecordKey(k))
		}
	}
	return &lockSet{key: keys[0], multi: keys, vote: vote}
}

func (s *lockSet) acquireCall(c *Client, token string, ttl, lockDelay time.Duration) script {
	ttlMS, delayMS := strconv.FormatInt(ttl.Milliseconds(), 10), strconv.FormatInt(lockDelay.Milliseconds(), 10)
	// With the granted-lock check, a master this Client marked down is
	// asked too: it may be back, holding a granted lock that the masters
	// which voted lost (granted.go, "Masters marked down").
	hear := c.grantedCheck()
	if s.multi == nil {
		return script{s: c.sc.acquire, keys: s.vote, args: []any{token, ttlMS, delayMS}, hearDown: hear}
	}
	return script{s: c.sc.acquireMulti, keys: s.vote, args: []any{token, ttlMS, delayMS, strconv.Itoa(c.multiStride())}, hearDown: hear}
}

func (s *lockSet) fenceCall(c *Client, token string, fence int64) script {
	f := strconv.FormatInt(fence, 10)
	if s.multi == nil {
		if s.delayed {
			return script{s: c.sc.fence, keys: s.vote, args: []any{token, f, "1"}}
		}
		return script{s: c.sc.fence, keys: s.vote, args: []any{token, f}}
	}
	delayed := "0"
	if s.delayed {
		delayed = "1"
	}
	return script{s: c.sc.fenceMulti, keys: s.vote, args: []any{token, f, strconv.Itoa(c.multiStride()), delayed}}
}

// releaseCall is the compare-and-delete of the set by token; every key
// it deletes is published to the waiters (a release, or a failed
// attempt's clean-up).
func (s *lockSet) releaseCall(c *Client, token string) script {
	if s.multi == nil {
		keys, args := c.releaseLine(s.key, token)
		return script{s: releaseScript, keys: keys, args: args}
	}
	return script{s: releaseMultiScript, keys: s.vote[4:], args: []any{token, strconv.Itoa(c.multiStride()), c.releaseChan, releaseID(token)}}
}

// checkMultiKeys checks the keys of a multi-key lock.
func (c *Client) checkMultiKeys(keys []string) error {
	switch {
	case len(keys) == 0:
		return fmt.Errorf("%w: keys: a multi-key lock needs 1 to %d keys, got none", ErrInvalid, MaxMultiKeys)
	case len(keys) > MaxMultiKeys:
		return fmt.Errorf("%w: keys: %d keys is above the maximum of %d", ErrInvalid, len(keys), MaxMultiKeys)
	case c.opts.fenceKey == "":
		return fmt.Errorf("%w: multi-key locks need fencing (a Client made WithFenceKey(\"\") has none)", ErrInvalid)
	}
	seen := make(map[string]struct{}, len(keys))
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("%w: keys[%d] must not be empty", ErrInvalid, i)
		}
		if len(k) > MaxKeyBytes {
			return keyTooLong(fmt.Sprintf("keys[%d]", i), len(k))
		}
		if c.reservedKey(k) {
			return fmt.Errorf("%w: keys[%d] %q is one of the Client's own keys (marker, lease horizon, fencing counter, or a fence record \"<fence key>:…\")", ErrInvalid, i, k)
		}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("%w: keys[%d] %q appears more than once", ErrInvalid, i, k)
		}
		seen[k] = struct{}{}
	}
	return nil
}

// AcquireMulti obtains every key of keys for ttl with one token, or none
// of them: a multi-key lock (Redisson's MultiLock). On each master one
// script sets every key or none; the set is granted as Acquire grants one
// key (see the comment at the top of multikey.go for why every key keeps a
// single lock's guarantee), and a failed attempt leaves no key of the set
// on any master, the ones that timed out included. The Lock's Key is
// keys[0] and Keys all of them; Release, Extend, KeepAlive and Status act
// on the whole set. Its Fence is above every earlier holder's of each key.
//
// Options are Acquire's: WithWait waits, woken by the release of any key of
// the set; WithLockDelay applies to every key. keys: 1 to MaxMultiKeys
// distinct keys, in any order (the order does not matter: nothing is held
// while waiting, so overlapping sets cannot deadlock). One key is an
// ordinary Acquire.
//
// Errors: as Acquire. ErrLockHeld when any key of the set is held (or in
// its lock-delay); ErrInvalid for bad keys or a Client without fencing.
func (c *Client) AcquireMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...AcquireOption) (_ *Lock, err error) {
	defer func() { err = notObtained(err) }()
	if err := c.checkMultiKeys(keys); err != nil {
		return nil, err
	}
	if len(keys) == 1 {
		return c.Acquire(ctx, keys[0], ttl, opts...)
	}
	if err := c.checkAcquireTTL(ttl); err != nil {
		return nil, err
	}
	cfg, err := c.newAcquireConfig(ttl, opts)
	if err != nil {
		return nil, err
	}
	set := c.multiSet(slices.Clone(keys))
	// The set's own queue, woken by the release of any of its keys.
	return c.attemptThenWait(ctx, &cfg, multiQueue(set.multi), set.multi, func(ctx context.Context) (*Lock, error) {
		c.attempts.Add(1)
		token, err := c.tokenFor(ctx)
		if err != nil {
			return nil, err
		}
		return c.acquireSet(ctx, set, token, ttl, cfg.lockDelay)
	})
}

// multiQueue is the wait queue of a set: its keys, sorted, joined by a
// byte no queue of a single key starts with.
func multiQueue(keys []string) string {
	sorted := slices.Sorted(slices.Values(keys))
	return "\x00" + strings.Join(sorted, "\x00")
}

// ReleaseMulti releases the multi-key lock keys held by token: on each
// master, one script deletes every key of the set that holds the token
// (with its fence and delay records) and wakes the waiters of each. Results
// and errors as Release: the count is of masters where the token held some
// key of the set.
func (c *Client) ReleaseMulti(ctx context.Context, keys []string, token string) (int, error) {
	if err := c.checkMultiKeys(keys); err != nil {
		return 0, err
	}
	if len(keys) == 1 {
		return c.Release(ctx, keys[0], token)
	}
	if token == "" {
		return 0, fmt.Errorf("%w: token must not be empty", ErrInvalid)
	}
	return c.releaseSet(ctx, c.multiSet(keys), token)
}

// ExtendMulti is Extend for the multi-key lock keys held by token: a
// master extends the set only where the token holds every key of it (each
// key keeps max(its remaining TTL, ttl)), and counts as a vote for it only
// then. Once a quorum extended it, the set is put back whole on the
// counting masters where some key of it was gone and none is another's
// (restoreCopies, extend.go). Results and errors as Extend.
func (c *Client) ExtendMulti(ctx context.Context, keys []string, token string, ttl time.Duration) (*Lock, error) {
	if err := c.checkMultiKeys(keys); err != nil {
		return nil, err
	}
	if len(keys) == 1 {
		return c.Extend(ctx, keys[0], token, ttl)
	}
	set := c.multiSet(slices.Clone(keys))
	validUntil, fence, lockTTL, err := c.extendSet(ctx, set, token, ttl, 0)
	if err != nil {
		return nil, err
	}
	return &Lock{c: c, key: set.key, keys: set.multi, token: token, fence: fence, ttl: lockTTL, validUntil: validUntil}, nil
}

// MultiStatus is a majority read of every key of a multi-key lock.
type MultiStatus struct {
	// Held is true when every key is held by one and the same token on a
	// quorum: the set is held as one lock. A set of which only some keys
	// are held is not Held (see Keys).
	Held bool
	// Validity is the shortest Validity among the keys when Held, else 0.
	Validity time.Duration
	// Fence is the holder's fence when Held (every key's record holds the
	// same one), else 0.
	Fence int64
	// Keys is each key's Status, in the order given.
	Keys []Status
}

// StatusMulti reads every key of keys as Status does, all at once, and
// tells whether one token holds the whole set. Errors as Status: one key
// that cannot be decided makes the whole read an error (the first such,
// naming the key).
func (c *Client) StatusMulti(ctx context.Context, keys []string) (MultiStatus, error) {
	if err := c.checkMultiKeys(keys); err != nil {
		return MultiStatus{}, err
	}
	if err := c.closedErr(); err != nil {
		return MultiStatus{}, err
	}
	start := time.Now()
	fans := make([]*fan, len(keys))
	for i, k := range keys {
		fans[i], _ = c.fanout(script{s: c.sc.status, keys: c.voteKeys(k)}, start)
	}
	ms := MultiStatus{Keys: make([]Status, len(keys)), Held: true}
	hash := ""
	for i, k := range keys {
		t := c.newStatusTally()
		c.gather(ctx, fans[i], start, nil, func(r reply) bool { return t.add(r, true) }, nil)
		st, err := t.result(start)
		if err != nil {
			return MultiStatus{}, fmt.Errorf("key %q: %w", k, err)
		}
		ms.Keys[i] = st
		switch {
		case !st.Held:
			ms.Held = false
		case i == 0:
			hash, ms.Validity, ms.Fence = t.best, st.Validity, st.Fence
		case t.best != hash:
			ms.Held = false
		default:
			ms.Validity = min(ms.Validity, st.Validity)
			ms.Fence = max(ms.Fence, st.Fence)
		}
	}
	if !ms.Held {
		ms.Validity, ms.Fence = 0, 0
	}
	return ms, nil
}

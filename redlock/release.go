package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Release runs the compare-and-delete script (never a bare DEL; it deletes
// the lock's fence record with it, fence.go) on every master in parallel,
// each bounded by the per-master timeout, and returns, once every master
// answered (or its timeout passed; or ctx ended), how many masters held
// this token and deleted it. A ctx that has already ended when Release is
// called (a deferred release after a cancel) does not stop it: the release
// is sent and its answers awaited, at most the per-master timeout. A master that answers with an error or not at
// all is sent the release again once it answers a health probe
// (releaseLater). A master that is slow or stuck still receives the
// release later, after any SET queued before it.
//
// Why every master and not a quorum: a master whose delete is still on its
// way holds the key and its fence record, and another Client's acquire
// that reaches it then is refused by the granted-lock check (granted.go)
// although the release was acknowledged. Waiting costs the slowest
// healthy master's round trip instead of the quorum-th one's
// (docs/performance.md, "Release waits for every master").
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
	return c.releaseSet(ctx, &lockSet{key: key}, token)
}

// releaseSet is Release of a lock key or, with set.multi, of the keys of a
// multi-key lock (multikey.go).
func (c *Client) releaseSet(ctx context.Context, set *lockSet, token string) (int, error) {
	if err := c.closedErr(); err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		// A release is clean-up, often deferred with a context that has
		// ended: it is sent all the same (mustSend) and its answers are
		// awaited, at most the per-master timeout, so that its result says
		// what the masters did, not that every master failed.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), c.opts.perMasterTimeout)
		defer cancel()
	}
	n := len(c.masters)
	start := time.Now()
	rel := set.releaseCall(c, token)
	rel.mustSend = true
	// Masters the lock's votes never reached: not queued behind a stuck
	// pipeline (unreached.go).
	unreached := c.unreached.take(token, c.sinceEpoch())
	rel.mayDrop = unreached
	out, _ := c.fanout(rel, start)
	res := OutcomeError{Op: "release", Quorum: c.quorum, Masters: n}
	answered := 0
	c.gather(ctx, out, start, nil, func(r reply) bool {
		if r.err != nil {
			// An error (an ACL, OOM) or no answer: the master keeps the
			// lock's key and fence record; the release is sent again.
			if !c.masters[r.idx].releaseSetLater(set, token) && unreached&masterBit(r.idx) != 0 {
				// The retry set is full: queued after all, as before
				// (unreached.go).
				c.queueRelease(set, token, r.idx)
			}
			res.Failures = append(res.Failures, masterErr(c, r))
			return false
		}
		answered++
		n, _ := r.val.(int64)
		countScriptResult(&res, n)
		return false // every master is heard: see Release
	}, func() int { return n })
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

// A release whose call to a master failed (its connection broke while the
// master kept its data, a partition; the lane's queue was full) leaves the
// lock's key and fence record there until its TTL ends: once the master
// answers again, the granted-lock check (granted.go) refuses the key to
// everyone, for up to that TTL. (A release to a master that is only slow,
// paused or known down is queued on its lane and sent when it can be.) So each master keeps the releases it
// missed, and the health loop sends them again once it answers
// (retryReleases), until max TTL after the release, when the key has
// expired anyway. The set is bounded: past maxUnreleased entries, a missed
// release is only waited out, which is what plain Redlock does.

// maxUnreleased bounds the releases kept per master.
const maxUnreleased = 10_000

type unreleasedSet struct {
	mu sync.Mutex
	m  map[[2]string]int64 // {key, token} → until (Client.sinceEpoch)
}

// releaseLater keeps key's release by token for retryReleases, and
// reports whether it did (not past maxUnreleased).
func (m *master) releaseLater(key, token string) bool {
	u := &m.unreleased
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[[2]string]int64{}
	}
	kt := [2]string{key, token}
	if _, ok := u.m[kt]; !ok && len(u.m) >= maxUnreleased {
		return false
	}
	u.m[kt] = m.c.sinceEpoch() + int64(m.c.lossTTL())
	return true
}

// releaseSetLater keeps the release of set by token for retryReleases,
// key by key, and reports whether it kept every key's.
func (m *master) releaseSetLater(set *lockSet, token string) bool {
	if set.multi == nil {
		return m.releaseLater(set.key, token)
	}
	kept := true
	for _, k := range set.multi {
		kept = m.releaseLater(k, token) && kept
	}
	return kept
}

// queueRelease sends master i the release of set by token as a release
// that must be sent (queued behind whatever its lane is stuck on), and
// does not wait for it.
func (c *Client) queueRelease(set *lockSet, token string, i int) {
	rel := set.releaseCall(c, token)
	rel.mustSend = true
	rel.only = make([]bool, len(c.masters))
	rel.only[i] = true
	c.fanout(rel, time.Now())
}

// retryReleases sends again the releases m missed, now that it answered a
// probe; each is forgotten once m answers it, or once its key must have
// expired. Runs under probeMu, so the up to retryBatch releases of a round
// go in one pipeline (one round trip, not one each: a master that missed
// thousands would otherwise hold the probes up for as many round trips).
// A release m refuses (an error reply: an ACL, a script error) is kept
// for the next round, as are all of them when the pipeline fails.
func (c *Client) retryReleases(m *master) {
	todo := m.unreleased.due(c.sinceEpoch(), retryBatch)
	if len(todo) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.healthTimeout)
	defer cancel()
	// The script may not be in the master's cache (a restart since the
	// lanes loaded it): load it first, so that no call answers NOSCRIPT.
	// SCRIPT LOAD itself, not releaseScript.Load, which would rewrite the
	// hash every lane shares (probe.go, onConnect).
	if err := m.probe.ScriptLoad(ctx, releaseLua).Err(); err != nil {
		return // retried next round
	}
	cmds := make([]*redis.Cmd, len(todo))
	_, _ = m.probe.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, kt := range todo {
			cmds[i] = releaseScript.EvalSha(ctx, p, c.releaseKeys(kt[0]), kt[1], c.releaseChan, releaseID(kt[1]))
		}
		return nil
	})
	done := 0
	u := &m.unreleased
	u.mu.Lock()
	for i, cmd := range cmds {
		if cmd.Err() == nil {
			delete(u.m, todo[i])
			done++
		}
	}
	u.mu.Unlock()
	if done > 0 {
		c.opts.logger.Info("sent again releases the master may have missed (it did not answer in time, or its answer did not show a delete: a vote may still have been queued)", masterAttr(m), slog.Int("releases", done))
	}
}

// retryBatch bounds the releases one probe round sends a master again.
const retryBatch = 1000

// due forgets the releases whose keys have expired by now and returns up
// to limit of the others.
func (u *unreleasedSet) due(now int64, limit int) [][2]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.m) == 0 {
		return nil
	}
	todo := make([][2]string, 0, min(len(u.m), limit))
	for kt, until := range u.m {
		if until < now {
			delete(u.m, kt)
		} else if len(todo) < limit {
			todo = append(todo, kt)
		}
	}
	return todo
}

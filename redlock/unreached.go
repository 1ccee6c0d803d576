package redlock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Masters a lock's votes never reached.
//
// A vote that its lane answers without sending it — the master known down,
// its lane stuck on an earlier pipeline past the per-master timeout, the
// queue full, the vote's deadline passed before its pipeline, the Client
// closed (master.fail; reply.unsent) — never reaches the master: the lane
// drops it, and no later pipeline carries it. That master holds no copy of
// the lock from that vote. A release is always sent (mustSend): to a
// master whose lane is stuck it is queued behind the stuck pipeline, to
// follow any SET already in the master's socket. Under load a paused
// master collected one queued release per lock for as long as the pause
// lasted: tens of thousands of calls, the daemon's memory growing with
// the length of the pause (docs/performance.md, "daemon memory"), and as
// many useless deletes once the master resumed.
//
// A failed acquire's clean-up skips the masters its votes never reached
// (acquireTally.add: maybeHeld false). Its token never left this process,
// and the attempt's votes were the only calls that carried it (a new
// token per attempt, tokenFor), so those masters hold nothing to clean up.
//
// A granted lock's token does leave the process, and another Client (a
// second daemon behind the same load balancer) may extend it, and its
// extend's restore write the key on a master this Client never reached.
// So a grant records the masters its votes never reached (unreachedSet),
// under its token, which names the lock: a new one per acquire, and one
// for every key of a multi-key lock. Its release (Lock.Release,
// Client.Release or ReleaseMulti by keys and token, as the daemon does) is
// sent to them like any call, not as a
// release that must be sent: where the lane can write it within the
// per-master timeout it goes out at once, and where it cannot (the master
// still paused, down, its lane stuck) it is not queued but answered at
// once and kept for the health loop, which sends it again once the master
// answers a probe (releaseLater, retryReleases) — as for any release a
// master missed. Nothing this Client sent the master can be ahead of it:
//
// Claim: no call of this Client that writes the lock's key with its token
// went to a marked master before the release.
//
// Proof: only the vote scripts (acquire.lua, acquire_multi.lua) and the
// extend scripts' restores (extend.lua, extend_multi.lua) write a lock's
// key; the fence write-back writes its record only where the key already
// holds the token (fence.lua). An entry for a token is recorded only
// by the acquire that drew the token (not for a token handed over by
// withSameToken, which another Client drew): no earlier call of this
// Client carried it, and the entry marks only masters whose vote the lane
// dropped unsent. Every extend with the token — of the key, of a set
// whole, in any order, or of some of its keys or one (Client.Extend of one
// key of a set, Moving.ExtendMulti's parts, the daemon's extend of the
// keys a request names) — removes the entry before its own fan-out
// (forget), so a release after an extend of this Client must be sent
// everywhere, after the extend's calls on the same lanes. (Keyed by the
// set's keys instead, an extend of some of them left the set's entry, and
// the set's release overtook that extend's restore: found in review,
// TestExtendOfSomeKeysForgetsTheSetsRecord.) Any release with the token
// takes the entry (take) before its fan-out: a release of some keys of a
// set takes it for them, and the rest's release is then sent everywhere —
// the safe side, since no call with the token reached a marked master
// before it either.
//
// A release racing an extend of this Client for the same lock (two
// goroutines, two HTTP requests at once) may take the entry before the
// extend removes it; its call to a marked master then may be kept for the
// health loop instead of queued behind the extend's restore, and the
// retry is sent after the master answers a probe, after what sat in its
// socket — the same guarantee as for any missed release.
//
// The same argument is why a release to a marked master that the retry
// set cannot keep (it is full: maxUnreleased) is queued after all, as
// every release was before: a copy another Client restored there is then
// still deleted once the lane moves (releaseSet).
//
// Tokens are unique per acquire (TokenGenerator's contract): a generator
// that repeats one could have an earlier lock's SET of the same key and
// token still in a marked master's socket.
//
// Entries end when taken or when the lock's key and delay record have
// expired everywhere (until); the set is bounded (maxUnreached): past it
// a grant records nothing, and its release is sent as before. Masters
// from the 65th on are never marked (a bit mask of 64: masterBit).

// masterBit is master i's bit in a mask of masters: 0 from master 64 on,
// which a mask cannot mark (it is then treated as reached).
func masterBit(i int) uint64 {
	if i >= 64 {
		return 0
	}
	return 1 << i
}

// maxUnreached bounds the entries of one Client's unreachedSet.
const maxUnreached = 1 << 16

// unreachedSet maps a granted lock's token to the masters its votes never
// reached.
type unreachedSet struct {
	n         atomic.Int32 // len(m), read without the lock on the hot path
	mu        sync.Mutex
	m         map[string]unreachedLock
	nextSweep int   // sweep expired entries once len(m) reaches it (≤ maxUnreached)
	sweptAt   int64 // Client.sinceEpoch of the last sweep
}

// sweepFull is how often a full set (maxUnreached live entries: locks
// released through another daemon, or left to expire, pile up) is swept
// again: a sweep walks every entry.
const sweepFull = int64(time.Second)

type unreachedLock struct {
	masters uint64 // bit i: master i never received the vote
	until   int64  // Client.sinceEpoch after which the entry is forgotten
}

// add records that the lock of token, whose keys expire by until
// (Client.sinceEpoch), never reached the masters in mask.
func (u *unreachedSet) add(token string, mask uint64, until int64, now int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]unreachedLock{}
	}
	if len(u.m) >= u.nextSweep && (len(u.m) < maxUnreached || now-u.sweptAt >= sweepFull) {
		for tok, e := range u.m {
			if e.until < now {
				delete(u.m, tok)
			}
		}
		// At most maxUnreached: a set left full of live entries is swept
		// again (once per sweepFull), never given up on.
		u.nextSweep, u.sweptAt = min(max(1024, 2*len(u.m)), maxUnreached), now
	}
	if len(u.m) < maxUnreached {
		u.m[token] = unreachedLock{masters: mask, until: until}
	}
	u.n.Store(int32(len(u.m)))
}

// take removes the entry of token and returns its masters (0: none
// recorded, or expired by now).
func (u *unreachedSet) take(token string, now int64) uint64 {
	if u.n.Load() == 0 {
		return 0
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.m[token]
	if !ok {
		return 0
	}
	delete(u.m, token)
	u.n.Store(int32(len(u.m)))
	if e.until < now {
		return 0
	}
	return e.masters
}

// forget removes the entry of token, if any.
func (u *unreachedSet) forget(token string) {
	_ = u.take(token, 0)
}

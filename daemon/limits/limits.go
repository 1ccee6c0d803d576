package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Limits are what one account may use. Zero fields mean "no limit".
type Limits struct {
	// QuotaCalls is the number of calls allowed per QuotaWindow. Windows
	// start at multiples of QuotaWindow since the Unix epoch, by each
	// daemon's wall clock. Both or neither are set.
	QuotaCalls  int64
	QuotaWindow time.Duration
	// Rate is a token bucket's refill, in calls per second, and Burst its
	// size. Burst ≥ 1 when Rate is set.
	Rate  float64
	Burst int
	// MaxLocks caps the locks the account holds at once.
	MaxLocks int
}

// Any reports whether l limits anything.
func (l Limits) Any() bool { return l.QuotaCalls > 0 || l.Rate > 0 || l.MaxLocks > 0 }

// DefaultSyncInterval is the sync interval redlockd uses when none is
// configured.
const DefaultSyncInterval = 100 * time.Millisecond

// Limits shared by several daemons
//
// Each daemon decides alone, from what it knows, whether a call is within
// its account's limits: a refusal costs nothing on the masters, and an
// admitted call costs no extra round trip. What it knows is synced with the
// masters by a loop (Limiter.run) every sync interval, one
// pipelined batch per master per round:
//
//   - Calls (quota and rate) are G-counters. Each daemon has a random id
//     and owns one field per bucket (a quota window, or one second for the
//     rate) in a hash on every master; it writes its own absolute count
//     there, only ever raising it (scripts/count_sync.lua). A field on any
//     master is therefore never above the truth. Reading, a daemon keeps
//     for each other daemon the largest value any master has reported:
//     never an overcount, whichever masters are down, late or restarted
//     empty. Once a quorum of masters has acknowledged a daemon's write,
//     every later read that reaches a quorum sees it (two quorums share a
//     master), so with at most N−quorum masters down, a daemon's view of
//     the others lags by at most one interval plus one round trip.
//   - Held locks are a sorted set per account on every master, token →
//     end, reconciled against the lock keys themselves
//     (scripts/held_sync.lua): a lock counts on a master while its key
//     there holds its token, and leaves the count when it is released or
//     expires. The count is the largest over the masters that answered,
//     taken only from rounds a quorum answered: that is the lock keys this
//     account keeps on the most loaded master, which is what the cap
//     protects. With master groups, each lock is reconciled on the
//     masters of the group its key is placed in (PlaceBy), each group
//     keeps a set of its own, and the count is the sum of the groups'
//     counts, taken only from rounds in which every group's quorum
//     answered. Between rounds, a daemon adds the locks it granted and
//     subtracts those it released; its acquires in flight hold a slot.
//     Each lock change is reconciled again once the lock path's writes
//     have settled (Limiter.settle).
//
// Overshoot. A daemon does not see what the others admitted since their
// last round reached it, so together n daemons can admit, beyond a limit:
//
//   - quota: the calls the other n−1 admitted in the last interval plus a
//     round trip (L); with a rate limit, at most (n−1) × (burst + rate × L);
//   - rate: over any span T, at most burst + rate × T + (n−1) × (burst +
//     rate × L), and in a steady stream (n−1) × rate × L: each bucket
//     refills at the full rate and is debited what the others spent once
//     it sees it, so the long-run rate is the configured one;
//   - max_locks: the locks the other n−1 granted in the last L.
//
// With the default interval of 100 ms, two daemons and rate 200/s, burst
// 400: at most 420 calls more than one bucket would allow. A daemon
// restarted keeps nothing locally, but the counts are on the masters: its
// first round runs before it serves (Start), and its last when it
// stops.
type Limiter struct {
	log      *zap.Logger
	store    *Store
	prefix   string
	id       string // this daemon's field in the shared counters
	interval time.Duration
	quorum   int // of group 0's masters, which keep the quota and rate counts
	// groupQuorum is each master group's quorum, for its held set;
	// groupOf places a lock key in its group (nil: group 0), PlaceBy.
	groupQuorum []int
	groupOf     func(lockKey string) int
	metrics     *Metrics
	accounts    atomic.Pointer[limitAccounts]

	// settle is how old a lock change must be for its second sync: the
	// Store's timeout, twice the lock path's per-master timeout in
	// redlockd. An acquire answers at quorum, and its SETs on the other
	// masters are written within the per-master timeout or never (a
	// release's deletes likewise), so the first sync, in the next round,
	// may reach a master before them and leave the lock out of that
	// master's set (or in it, after a release) for its whole TTL. The
	// second one, once they have landed, puts that right.
	settle time.Duration

	mu      sync.Mutex // serializes rounds and SetAccounts
	backlog []map[*accountState][]heldOp
	started bool // the first round ran
	stop    chan struct{}
	done    chan struct{}
}

// limitAccounts are the accounts with any limit, as of the last SetAccounts,
// and the retired ones: those a reload removed or left without any limit,
// kept until the daemon stops. A request admitted with the keys from
// before the reload still counts against its account's state (stateFor),
// a retired state is synced while it has anything to carry (idle), and a
// reload that restores the account finds its counts as they were.
type limitAccounts struct {
	states  []*accountState // in SetAccounts order
	byName  map[string]*accountState
	retired map[string]*accountState
}

// lockID names the lock of key held by member (its held-set member: the
// token, or "<token> <key>" for a key of a multi-key lock) for matching a
// change with another of the same lock: the key and the token. A
// single-key release or extend of a key of a multi-key lock names only the
// token (it cannot tell a key of a set from a lock of its own), and is
// still the same lock as the set's acquire of that key (a review: matched
// by member, a single-key release made while a round was out was
// subtracted twice, and the account let one lock past max_locks).
func lockID(key, member string) string {
	token, _, _ := strings.Cut(member, " ")
	return token + "\x00" + key
}

// heldOp is a lock whose presence in the held set must be reconciled,
// granted, released or extended at a time.
type heldOp struct {
	key, token string
	at         time.Time
	// kind: what the change counts in acq or rel until a round takes it
	// (takeOps): an acquire one more, a release one fewer, an extend
	// nothing.
	kind opKind
}

type opKind uint8

const (
	opExtend opKind = iota
	opAcquire
	opRelease
)

// maxBacklog bounds the held-set changes kept for a master that does not
// answer, per account; older ones are dropped (their locks then leave that
// master's count when they expire).
const maxBacklog = 4096

// maxOpsPerCall bounds the locks one held_sync call reconciles.
const maxOpsPerCall = 512

// NewLimiter returns the limiter of a daemon serving the masters of store
// with lock keys under prefix; it syncs every interval once started, and
// m reports its accounts. store may be nil when no account has a limit;
// without one, nothing is synced.
func NewLimiter(log *zap.Logger, store *Store, prefix string, interval time.Duration, m *Metrics) *Limiter {
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	l := &Limiter{
		log: log, store: store, prefix: prefix, id: hex.EncodeToString(idb[:]),
		interval: interval, metrics: m,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	l.accounts.Store(&limitAccounts{byName: map[string]*accountState{}, retired: map[string]*accountState{}})
	m.limiter.Store(l)
	if store != nil {
		l.settle = store.timeout
		l.quorum = store.groupSize(0)/2 + 1
		for g := range store.Groups() {
			l.groupQuorum = append(l.groupQuorum, store.groupSize(g)/2+1)
		}
		l.backlog = make([]map[*accountState][]heldOp, store.Masters())
		for i := range l.backlog {
			l.backlog[i] = map[*accountState][]heldOp{}
		}
	}
	return l
}

// PlaceBy tells a Limiter over several master groups (NewGroupStore) the
// group of each lock key, an index in the Store's groups: the group whose
// masters hold the key, where its account's held set counts it. Call it
// before Start. Without it, every lock is counted in group 0.
func (l *Limiter) PlaceBy(groupOf func(lockKey string) int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.groupOf = groupOf
}

// placed is the group of key, within the Store's groups.
func (l *Limiter) placed(key string) int {
	if l.groupOf == nil {
		return 0
	}
	if g := l.groupOf(key); g >= 0 && g < len(l.groupQuorum) {
		return g
	}
	return 0
}

// Account is one account's name and limits, as SetAccounts takes them.
type Account struct {
	Name   string
	Limits Limits
}

// SetAccounts makes accounts' limits the ones in force (an account
// without any limit is not tracked). A reload changes limits,
// never counts: an account keeps its state (the calls in its window, its
// bucket, its held locks, the lock changes not synced yet) whatever limit
// changes, and an account removed is retired with it (see limitAccounts),
// so that adding it back restores it. An account new to this daemon, or
// back from retirement, is synced with the masters before it is served,
// once the sync loop has started (before that, the first round does it).
// The daemon calls it before it swaps its API keys, so that a request
// with a new key finds its account's state.
func (l *Limiter) SetAccounts(accounts []Account) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.accounts.Load()
	next := &limitAccounts{byName: map[string]*accountState{}, retired: maps.Clone(old.retired)}
	now := time.Now()
	var fresh []*accountState
	for _, k := range accounts {
		if !k.Limits.Any() {
			continue
		}
		st := old.byName[k.Name]
		if st == nil {
			if st = next.retired[k.Name]; st != nil {
				delete(next.retired, k.Name)
				fresh = append(fresh, st) // what it knows may be old
			}
		}
		if st == nil {
			st = l.newState(k.Name, k.Limits, now)
			fresh = append(fresh, st)
		} else {
			st.setLimits(k.Limits, now)
		}
		next.states = append(next.states, st)
		next.byName[k.Name] = st
	}
	for _, st := range old.states {
		if next.byName[st.name] != st {
			next.retired[st.name] = st
		}
	}
	if l.started && len(fresh) > 0 {
		l.roundLocked(context.Background(), fresh, now.Add(-l.settle))
	}
	l.accounts.Store(next)
}

func (l *Limiter) newState(account string, lim Limits, now time.Time) *accountState {
	st := &accountState{name: account, lim: lim, hadRate: lim.Rate > 0, others: map[string]int64{}, seen: map[int64]map[string]int64{}, ownSec: map[int64]int64{}}
	st.tokens, st.refilled = float64(lim.Burst), now
	st.keepWindowLen(lim)
	st.quotaKey = func(window time.Duration, start int64) string { return quotaKey(l.prefix, account, window, start) }
	st.heldKey = heldKey(l.prefix, account)
	st.metrics = l.metrics.accountMetrics(account)
	return st
}

// setLimits puts lim in force and keeps every count. The bucket is
// brought up to now at the old rate, then holds at most the new burst (a
// bucket that starts with the new rate starts full). A quota window of a
// new length starts where it would by the epoch, and holds the calls of
// the window in progress: the counts only ever go with the account, never
// back to zero before a window ends.
func (st *accountState) setLimits(lim Limits, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.lim
	if old == lim {
		return
	}
	if old.Rate > 0 {
		st.refill(now)
	} else if lim.Rate > 0 && !st.hadRate {
		st.tokens, st.refilled = float64(lim.Burst), now
	}
	st.hadRate = st.hadRate || lim.Rate > 0
	// kept: the window's length the counts were kept under, the old
	// quota's, or, for a quota set again after a reload removed it, the
	// one it had then (its counts stay: "those before the quota was
	// removed"; with another per they were dropped as a window gone by).
	if kept := st.windowLen; kept > 0 && lim.QuotaCalls > 0 && kept != lim.QuotaWindow {
		st.rollWindowOf(kept, now)
		st.window = windowStart(now, lim.QuotaWindow)
		// The other daemons' calls of the window in progress go to the
		// new window's bucket too, each under its daemon's own field
		// (carried): kept only here, a restart of this daemon or a
		// replica started after the reload would read the new bucket
		// without them and hand them out again. A daemon still alive
		// raises its field there to its own count when it reloads (its
		// own calls go with it), never above: the fields are max-merged,
		// so nothing counts twice.
		st.carried = st.carried[:0]
		for id, v := range st.others {
			if v > 0 {
				st.carried = append(st.carried, carriedCount{id: id, n: v})
			}
		}
	}
	st.lim = lim
	st.keepWindowLen(lim)
	if lim.Rate > 0 {
		st.tokens = min(st.tokens, float64(lim.Burst))
	}
}

// limits are the account's limits in force.
func (st *accountState) limits() Limits {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.lim
}

// stateFor returns the limits state of a request of account, whose API
// key carried lim when the request arrived: nil when lim limits nothing,
// the account's state otherwise, retired if a reload has removed the
// account (or its limits) since.
func (l *Limiter) stateFor(account string, lim Limits) *accountState {
	if !lim.Any() {
		return nil
	}
	a := l.accounts.Load()
	if st := a.byName[account]; st != nil {
		return st
	}
	return a.retired[account]
}

// accountState is what one daemon knows of one account's use.
type accountState struct {
	name     string
	quotaKey func(window time.Duration, start int64) string
	heldKey  string
	metrics  *accountMetrics

	mu  sync.Mutex
	lim Limits // replaced by a reload (setLimits)
	// Quota: the current window and the calls in it.
	window    int64            // start, Unix ms
	windowLen time.Duration    // the length window was started with (kept while a reload removes the quota)
	own       int64            // this daemon's calls
	ownSynced int64            // own as a quorum of masters acknowledged it
	others    map[string]int64 // other daemons' calls, the largest value read
	othersSum int64
	// carried: the other daemons' calls a reload that changed the window's
	// length brought into the window in progress (setLimits); written
	// under their ids to its bucket with every sync until it ends.
	carried []carriedCount
	// Rate: the bucket, and the calls per second for the shared counter.
	tokens    float64
	refilled  time.Time
	hadRate   bool                       // the bucket has been in use
	ownSec    map[int64]int64            // second → this daemon's calls, the last rateSpan seconds
	rateRead  int64                      // the last second a round read
	seen      map[int64]map[string]int64 // second → other daemon → calls read
	baselined bool                       // the first read of the others was taken as a baseline
	// Held locks.
	held      int64 // from the last round a quorum answered: the sum of heldByGroup
	heldKnown bool
	// heldByGroup is each master group's count, from the last round that
	// group's quorum answered (one entry without groups).
	heldByGroup []int64
	// lastFresh is how many of the ops the last takeOps returned were
	// recorded since the round before (the rest are rechecks).
	lastFresh int
	reserved  int64 // acquires in flight
	acq, rel  int64 // granted / released since the round in flight started
	sentAcq   int64 // granted / released that the round in flight reports
	sentRel   int64
	ops       []heldOp       // not yet sent; a zero heldOp was dropped
	pending   map[string]int // token → index in ops of the acquires not yet sent
	recheck   []heldOp       // sent once, to be sent again once settled
	// inflight: the tokens the round in flight carries ops for; released:
	// those of them released meanwhile. Such a release is subtracted
	// (rel) while the round runs, and once it ends only if the round
	// still counted the lock: a round whose masters already saw the key
	// gone left the lock out of held, and subtracting it again would let
	// an acquire past max_locks.
	inflight map[string]bool
	released []string
	// releasing counts the releases of each lock (lockID) that have
	// started and not ended (Admission.Releasing, ended by lockChanged or
	// Admission.ReleaseEnded); uncounted holds those of them that a round which
	// carried a change of theirs found out of the masters' count (its best
	// answer). The masters delete a lock's key before its Release returns
	// and the release is recorded: a round that runs and ends in between
	// leaves the lock out of held, and its release, recorded after, must
	// not be subtracted again. It was: the count fell one below the locks
	// held until the next round, and one acquire more than max_locks was
	// let in (a black-box pass: 6 of max_locks 5 held at once, 24 clients,
	// one daemon). A round that counts the lock again takes it out of
	// uncounted.
	releasing map[string]int
	uncounted map[string]bool
}

// rateSpan is how many seconds of the shared rate counter a round reads
// at most (and how long its buckets live): every second since the last
// round, so that a round delayed by a slow master misses nobody's calls.
const rateSpan = 5

// admit charges one call to st, or refuses it (quota, then rate) without
// charging. remain is remain_quota after the call (-1 without a quota).
func (st *accountState) admit(now time.Time) (remain int64, r Refusal) {
	st.mu.Lock()
	defer st.mu.Unlock()
	remain = -1
	if st.lim.QuotaCalls > 0 {
		st.rollWindow(now)
		used := st.own + st.othersSum
		if used >= st.lim.QuotaCalls {
			end := time.UnixMilli(st.window).Add(st.lim.QuotaWindow)
			return 0, Refusal{
				Reason:     QuotaExhausted,
				Msg:        "not enough calls, 0 left: the quota of " + fmtInt(st.lim.QuotaCalls) + " calls per " + fmtWindow(st.lim.QuotaWindow) + " is used up; it resets at " + end.UTC().Format(time.RFC3339),
				RetryAfter: end.Sub(now),
			}
		}
		remain = st.lim.QuotaCalls - used - 1
	}
	if st.lim.Rate > 0 {
		st.refill(now)
		if st.tokens < 1 {
			wait := time.Duration((1 - st.tokens) / st.lim.Rate * float64(time.Second))
			if st.lim.QuotaCalls > 0 {
				remain++ // not charged
			}
			return remain, Refusal{
				Reason:     RateLimited,
				Msg:        "rate limited: more than " + fmtRate(st.lim.Rate) + " calls per second (burst " + fmtInt(int64(st.lim.Burst)) + ") for this account; retry after " + fmtInt(max(int64((wait+time.Second-1)/time.Second), 1)) + " s (Retry-After)",
				RetryAfter: wait,
			}
		}
		st.tokens--
		st.ownSec[now.Unix()]++
	}
	if st.lim.QuotaCalls > 0 {
		st.own++
	}
	return remain, Refusal{}
}

// refund gives back a call admit charged, for a call refused before it
// reached the masters (too many waiters or locks).
func (st *accountState) refund(now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lim.QuotaCalls > 0 && st.window == windowStart(now, st.lim.QuotaWindow) && st.own > 0 {
		st.own--
	}
	if st.lim.Rate > 0 {
		st.tokens = min(st.tokens+1, float64(st.lim.Burst))
		if st.ownSec[now.Unix()] > 0 {
			st.ownSec[now.Unix()]--
		}
	}
}

// remain is remain_quota without a call, for answers refused before admit
// was reached, and for the metric.
func (st *accountState) remain(now time.Time) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lim.QuotaCalls <= 0 {
		return -1
	}
	st.rollWindow(now)
	return max(st.lim.QuotaCalls-st.own-st.othersSum, 0)
}

func windowStart(now time.Time, w time.Duration) int64 {
	ms := now.UnixMilli()
	wm := w.Milliseconds()
	return ms - ms%wm
}

// keepWindowLen records lim's quota window as the length the counts are
// kept under; a lim without a quota leaves the last one (setLimits).
func (st *accountState) keepWindowLen(lim Limits) {
	if lim.QuotaCalls > 0 {
		st.windowLen = lim.QuotaWindow
	}
}

func (st *accountState) rollWindow(now time.Time) { st.rollWindowOf(st.lim.QuotaWindow, now) }

// rollWindowOf starts the window of length w that now is in, with no
// calls, unless it is the one in progress.
func (st *accountState) rollWindowOf(w time.Duration, now time.Time) {
	if start := windowStart(now, w); start != st.window {
		st.window, st.own, st.othersSum = start, 0, 0
		clear(st.others)
		st.carried = st.carried[:0]
	}
}

func (st *accountState) refill(now time.Time) {
	if d := now.Sub(st.refilled); d > 0 {
		st.tokens = min(st.tokens+d.Seconds()*st.lim.Rate, float64(st.lim.Burst))
		st.refilled = now
	}
}

// reserveLocks takes keys held-lock slots for an acquire of a multi-key
// lock (each key counts against max_locks), all or none; each ends with a
// lockDone.
func (st *accountState) reserveLocks(keys int) (Refusal, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lim.MaxLocks > 0 && keys > st.lim.MaxLocks {
		return Refusal{Reason: SetAboveMaxLocks, Msg: "keys: " + fmtInt(int64(keys)) + " keys is above this account's max_locks (" + fmtInt(int64(st.lim.MaxLocks)) + "): each key counts, so the set can never be held; send at most " + fmtInt(int64(st.lim.MaxLocks)) + " keys"}, false
	}
	if n := st.heldEstimate(); st.lim.MaxLocks > 0 && n+int64(keys) > int64(st.lim.MaxLocks) {
		msg := "too many locks: this account holds " + fmtInt(n) + " and its limit (max_locks) is " + fmtInt(int64(st.lim.MaxLocks)) + "; release some, or wait for them to expire"
		if keys > 1 {
			msg = "too many locks: this account holds " + fmtInt(n) + ", this lock has " + fmtInt(int64(keys)) + " keys (each counts) and the limit (max_locks) is " + fmtInt(int64(st.lim.MaxLocks)) + "; release some, or wait for them to expire"
		}
		return Refusal{Reason: TooManyLocks, Msg: msg, RetryAfter: time.Second}, false
	}
	st.reserved += int64(keys)
	return Refusal{}, true
}

// heldEstimate is the locks the account holds, as far as this daemon
// knows, plus its acquires in flight. st.mu is held.
func (st *accountState) heldEstimate() int64 {
	return max(st.held+st.sentAcq+st.acq-st.sentRel-st.rel, 0) + st.reserved
}

// lockDone ends a reservation: granted with a lease, or not (token "").
func (st *accountState) lockDone(key, token string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.reserved--
	if token != "" {
		st.acq++
		if st.pending == nil {
			st.pending = map[string]int{}
		}
		st.pending[lockID(key, token)] = len(st.ops)
		st.ops = append(st.ops, heldOp{key: key, token: token, at: time.Now(), kind: opAcquire})
	}
}

// lockChanged records a change of a lock: Released, Extended, or NotHeld
// (a release that found it gone: counted as nothing, synced as an extend).
// Released and NotHeld end the release's mark (endRelease).
// A lock granted and released before its grant was synced never reaches
// the masters' sets: both changes are dropped, which keeps short locks
// from costing the masters anything more.
func (st *accountState) lockChanged(key, token string, c Change) {
	st.mu.Lock()
	defer st.mu.Unlock()
	id := lockID(key, token)
	released := c == Released
	gone := released && st.uncounted[id]
	if c != Extended {
		st.endRelease(id)
	}
	if i, ok := st.pending[id]; ok && released {
		delete(st.pending, id)
		st.ops[i] = heldOp{}
		st.acq--
		return
	}
	if gone {
		// A round already found the lock out of the masters' count
		// (uncounted): the release is synced, not subtracted again.
		st.ops = append(st.ops, heldOp{key: key, token: token, at: time.Now(), kind: opExtend})
		return
	}
	if released {
		st.rel++
		// A release made while a round is out (inflight is set from
		// takeOps to merge) may already be out of what that round counts:
		// merge stops subtracting it if the round sent any change of its
		// lock to the master it counts from, this round's or a backlog's
		// for a master that missed an earlier one, and that master no
		// longer counted it. Only the round's own changes were looked at
		// once, and a backlog's removal was then subtracted twice: the
		// account's count fell one below what it held for a round, and
		// one lock more than max_locks was let in.
		if st.inflight != nil {
			st.released = append(st.released, id)
		}
	}
	kind := opExtend
	if released {
		kind = opRelease
	}
	st.ops = append(st.ops, heldOp{key: key, token: token, at: time.Now(), kind: kind})
}

// startRelease notes a release of the lock id that has started
// (releasing). st.mu is held.
func (st *accountState) startRelease(id string) {
	if st.releasing == nil {
		st.releasing = map[string]int{}
	}
	st.releasing[id]++
}

// endRelease notes a release of the lock id that has ended, and forgets
// the lock's uncounted mark once none is left. st.mu is held.
func (st *accountState) endRelease(id string) {
	n, ok := st.releasing[id]
	switch {
	case !ok:
	case n > 1:
		st.releasing[id] = n - 1
	default:
		delete(st.releasing, id)
		delete(st.uncounted, id)
	}
}

// takeOps returns the lock changes a round syncs: every one recorded
// since the last round (which sentAcq and sentRel then count), and, again,
// those synced once and recorded at or before cutoff (see
// Limiter.settle). st.mu is held.
func (st *accountState) takeOps(cutoff time.Time, room int) []heldOp {
	// The changes recorded since the last round, at most room of them
	// (first, ahead of the rechecks): a change a round cannot send in its
	// call (maxOpsPerCall) waits in a backlog, counted nowhere — out of acq
	// and rel, not yet in the masters' count — and a burst of acquires (a
	// few multi-key locks of 64 keys) let the account past max_locks. The
	// rest stay here, and in acq and rel, for the next round.
	n := min(len(st.ops), max(room, 0))
	var out []heldOp
	for _, op := range st.ops[:n] {
		if op.token != "" { // else granted and released before it was synced
			out = append(out, op)
		}
	}
	fresh := len(out)
	st.ops = slices.Clone(st.ops[n:])
	if st.pending == nil {
		st.pending = map[string]int{}
	}
	clear(st.pending)
	var acqLeft, relLeft int64
	for i, op := range st.ops {
		switch {
		case op.kind == opAcquire && op.token != "":
			acqLeft++
			st.pending[lockID(op.key, op.token)] = i
		case op.kind == opRelease:
			relLeft++
		}
	}
	st.sentAcq, st.sentRel = st.acq-acqLeft, st.rel-relLeft
	st.acq, st.rel = acqLeft, relLeft
	keep := st.recheck[:0]
	for _, op := range st.recheck {
		if op.at.After(cutoff) {
			keep = append(keep, op)
		} else {
			out = append(out, op)
		}
	}
	clear(st.recheck[len(keep):])
	st.recheck = append(keep, out[:fresh]...)
	st.lastFresh = fresh
	st.inflight = make(map[string]bool, len(out))
	for _, op := range out {
		st.inflight[op.token] = true
	}
	st.released = st.released[:0]
	return out
}

// run syncs every interval until stop is closed.
func (l *Limiter) run() {
	defer close(l.done)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.round(context.Background())
		}
	}
}

// roundState is what one round sends for one account.
type roundState struct {
	st        *accountState
	window    int64
	own       int64 // the quota count sent
	quotaOp   int   // index in counts, -1 when none
	rateSecs  []int64
	rateOps   []int
	heldCalls []int      // per master: index in held[i], -1 when none
	ids       [][]string // per master: the lockIDs of its heldCall's locks, in order
	ops       []heldOp
	// sentAcq and sentRel per master group: the acquires and releases
	// of the round's own changes (st.sentAcq, st.sentRel split by the
	// group of each lock), so that a group without a quorum keeps its
	// changes counted locally while the others are read (mergeHeld).
	sentAcqG, sentRelG []int64
}

// round runs one sync with the masters: writes this daemon's counts and
// lock changes, reads everyone's, for the accounts in force and those
// retired. It reports whether a quorum answered.
func (l *Limiter) round(ctx context.Context) bool {
	if l.store == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.accounts.Load()
	states := a.states
	now := time.Now()
	for _, st := range a.retired {
		if l.pending(st) || !st.idle(now) {
			states = append(states, st)
		}
	}
	return l.roundLocked(ctx, states, now.Add(-l.settle))
}

// roundLocked runs one round for states, with the lock changes recorded
// at or before cutoff; l.mu is held.
func (l *Limiter) roundLocked(ctx context.Context, states []*accountState, cutoff time.Time) bool {
	if len(states) == 0 {
		return true
	}
	now := time.Now()
	n := l.store.Masters()
	var counts []countOp
	held := make([][]heldCall, n)
	rs := make([]roundState, len(states))
	for ai, st := range states {
		l.prepare(&rs[ai], st, now, cutoff, &counts, held)
	}

	rctx, cancel := context.WithTimeout(ctx, max(4*l.store.timeout, time.Second))
	replies := l.store.sync(rctx, l.id, counts, held)
	cancel()

	answered := 0 // of group 0, which keeps the counts
	groupAnswered := make([]int, len(l.groupQuorum))
	for i, rep := range replies {
		if rep.ok {
			g := l.store.GroupOf(i)
			groupAnswered[g]++
			if g == 0 {
				answered++
			}
			continue
		}
		l.keepForLater(i, rs, held[i])
	}
	quorum := answered >= l.quorum
	// Each group's held count is read from the rounds its own quorum
	// answers; a group without one keeps its part of the round's changes
	// counted locally (mergeHeld).
	groupOK := make([]bool, len(groupAnswered))
	for g, n := range groupAnswered {
		groupOK[g] = n >= l.groupQuorum[g]
	}
	l.metrics.round(quorum)
	if !quorum {
		var errs []error
		for _, rep := range replies {
			if rep.err != nil {
				errs = append(errs, rep.err)
			}
		}
		l.log.Debug("limits sync: no quorum of masters answered", zap.Int("answered", answered), zap.Errors("errors", errs))
	}
	for ai := range rs {
		l.merge(&rs[ai], replies, quorum, groupOK, now)
	}
	return quorum
}

// prepare fills r with what the round sends for st: its quota count and
// rate counts (appended to counts), and its lock changes for each master
// (appended to held, a master's backlog first).
func (l *Limiter) prepare(r *roundState, st *accountState, now, cutoff time.Time, counts *[]countOp, held [][]heldCall) {
	r.st, r.quotaOp = st, -1
	st.mu.Lock()
	if st.lim.QuotaCalls > 0 {
		st.rollWindow(now)
		r.window, r.own = st.window, st.own
		end := time.UnixMilli(st.window).Add(st.lim.QuotaWindow)
		r.quotaOp = len(*counts)
		*counts = append(*counts, countOp{key: st.quotaKey(st.lim.QuotaWindow, st.window), own: st.own, ttlMS: end.Sub(now).Milliseconds() + 60_000, carried: slices.Clone(st.carried)})
	}
	if st.lim.Rate > 0 {
		sec := now.Unix()
		for s := range st.ownSec {
			if s <= sec-rateSpan {
				delete(st.ownSec, s)
			}
		}
		for s := max(st.rateRead-1, sec-rateSpan+1); s <= sec; s++ {
			r.rateSecs = append(r.rateSecs, s)
			r.rateOps = append(r.rateOps, len(*counts))
			*counts = append(*counts, countOp{key: rateKey(l.prefix, st.name, s), own: st.ownSec[s], ttlMS: rateSpan * 1000})
		}
	}
	// Room for the account's new changes in every master's call once its
	// backlog is in: the smallest backlog (a master that does not answer
	// keeps one of up to maxBacklog, which must not hold the others up).
	least := maxOpsPerCall
	for i := range held {
		least = min(least, len(l.backlog[i][st]))
	}
	r.ops = st.takeOps(cutoff, maxOpsPerCall-least)
	groups := max(len(l.groupQuorum), 1)
	r.sentAcqG, r.sentRelG = make([]int64, groups), make([]int64, groups)
	if groups == 1 {
		r.sentAcqG[0], r.sentRelG[0] = st.sentAcq, st.sentRel
	} else {
		for _, op := range r.ops[:st.lastFresh] {
			switch op.kind {
			case opAcquire:
				r.sentAcqG[l.placed(op.key)]++
			case opRelease:
				r.sentRelG[l.placed(op.key)]++
			}
		}
	}
	st.mu.Unlock()
	r.heldCalls = make([]int, len(held))
	var opGroup []int // r.ops' groups, with several groups
	if len(l.groupQuorum) > 1 {
		opGroup = make([]int, len(r.ops))
		for j := range r.ops {
			opGroup[j] = l.placed(r.ops[j].key)
		}
	}
	for i := range held {
		mine := r.ops
		if opGroup != nil {
			// Master i reconciles the locks of its own group only: a
			// lock elsewhere is not on it, and would leave its set.
			mine = nil
			for j := range r.ops {
				if opGroup[j] == l.store.GroupOf(i) {
					mine = append(mine, r.ops[j])
				}
			}
		}
		ops := append(l.backlog[i][st], mine...)
		if len(ops) > maxOpsPerCall {
			// The rest waits in the backlog for the next round.
			l.backlog[i][st] = ops[maxOpsPerCall:]
			ops = ops[:maxOpsPerCall]
		} else {
			delete(l.backlog[i], st)
		}
		hc := heldCall{key: st.heldKey}
		ids := make([]string, 0, len(ops))
		for _, op := range ops {
			hc.lockKeys = append(hc.lockKeys, op.key)
			hc.tokens = append(hc.tokens, op.token)
			ids = append(ids, lockID(op.key, op.token))
		}
		r.heldCalls[i] = len(held[i])
		r.ids = append(r.ids, ids)
		held[i] = append(held[i], hc)
	}
}

// keepForLater keeps the held-set changes master i missed (held, what the
// round sent it) in its backlog, for the next round.
func (l *Limiter) keepForLater(i int, rs []roundState, held []heldCall) {
	for ai := range rs {
		r := &rs[ai]
		if r.heldCalls == nil {
			continue
		}
		hc := held[r.heldCalls[i]]
		b := l.backlog[i][r.st]
		for j := range hc.lockKeys {
			b = append(b, heldOp{key: hc.lockKeys[j], token: hc.tokens[j]})
		}
		if len(b) > maxBacklog {
			b = b[len(b)-maxBacklog:]
		}
		l.backlog[i][r.st] = b
	}
}

// pending reports whether a master has not been sent some of st's lock
// changes. l.mu is held.
func (l *Limiter) pending(st *accountState) bool {
	for _, b := range l.backlog {
		if len(b[st]) > 0 {
			return true
		}
	}
	return false
}

// idle reports whether a retired account has nothing left to sync: no
// lock change not sent, no acquire in flight, its quota count acknowledged
// by a quorum (or its window over), and a full bucket with no call in the
// seconds a round reads. Its counts are then all on the masters; rounds
// skip it until a late request (admitted before the reload) changes that.
func (st *accountState) idle(now time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.ops) > 0 || len(st.recheck) > 0 || st.reserved > 0 || st.acq > 0 || st.rel > 0 || st.sentAcq > 0 || st.sentRel > 0 {
		return false
	}
	if st.lim.QuotaCalls > 0 && st.own > st.ownSynced && st.window == windowStart(now, st.lim.QuotaWindow) {
		return false
	}
	if st.lim.Rate > 0 {
		st.refill(now)
		if st.tokens < float64(st.lim.Burst) || len(st.ownSec) > 0 {
			return false
		}
	}
	return true
}

// merge folds one round's answers into an account's state: the quota
// counts, the rate counts and the held-lock count, each where the account
// has that limit.
func (l *Limiter) merge(r *roundState, replies []masterReply, quorum bool, groupOK []bool, now time.Time) {
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if r.quotaOp >= 0 && st.window == r.window {
		l.mergeQuota(r, replies, quorum)
	}
	if len(r.rateOps) > 0 {
		l.mergeRate(r, replies, quorum, now)
	}
	if r.heldCalls != nil {
		l.mergeHeld(r, replies, groupOK)
	}
}

// mergeQuota takes the quota window's counts of the other daemons, and
// this daemon's own as acknowledged. st.mu is held.
func (l *Limiter) mergeQuota(r *roundState, replies []masterReply, quorum bool) {
	st := r.st
	for _, rep := range replies {
		if !rep.ok || r.quotaOp >= len(rep.counts) { // a group that keeps no counts
			continue
		}
		for id, v := range rep.counts[r.quotaOp] {
			switch {
			case id == l.id:
				// This daemon's own field is never above what it
				// admitted: one above its count (calls this state
				// did not carry, e.g. counted under a quota a reload
				// then removed and set again) is taken as its count.
				st.own = max(st.own, v)
			case v > st.others[id]:
				st.othersSum += v - st.others[id]
				st.others[id] = v
			}
		}
	}
	if quorum {
		st.ownSynced = max(st.ownSynced, r.own)
	}
}

// mergeRate debits the bucket with what the other daemons spent in the
// seconds the round read. st.mu is held.
func (l *Limiter) mergeRate(r *roundState, replies []masterReply, quorum bool, now time.Time) {
	st := r.st
	debit := int64(0)
	for i, sec := range r.rateSecs {
		seen := st.seen[sec]
		if seen == nil {
			seen = map[string]int64{}
			st.seen[sec] = seen
		}
		for _, rep := range replies {
			if !rep.ok || r.rateOps[i] >= len(rep.counts) { // a group that keeps no counts
				continue
			}
			for id, v := range rep.counts[r.rateOps[i]] {
				if id != l.id && v > seen[id] {
					debit += v - seen[id]
					seen[id] = v
				}
			}
		}
	}
	for sec := range st.seen {
		if sec <= r.rateSecs[len(r.rateSecs)-1]-rateSpan {
			delete(st.seen, sec)
		}
	}
	if quorum {
		st.rateRead = r.rateSecs[len(r.rateSecs)-1]
	}
	// The first reading is a baseline: a bucket starts full, as if
	// nobody had called before.
	if st.baselined {
		st.refill(now)
		// The debt is bounded, so that a burst through other daemons
		// delays this one by at most two bursts' worth.
		st.tokens = max(st.tokens-float64(debit), -float64(st.lim.Burst))
	}
	st.baselined = st.baselined || quorum
}

// mergeHeld takes the held-lock count from a round a quorum answered (the
// largest over the masters; with master groups, for each group whose
// quorum answered, the largest over its masters, and the account's count
// is the sum of every group's last such count), or keeps the round's
// changes counted locally until one does (with groups, the changes of the
// groups whose quorum did not answer). groupOK says, per group, whether
// its quorum answered. st.mu is held.
func (l *Limiter) mergeHeld(r *roundState, replies []masterReply, groupOK []bool) {
	st := r.st
	groups := len(groupOK)
	if len(st.heldByGroup) != groups {
		st.heldByGroup = make([]int64, groups)
		st.heldByGroup[0] = st.held
	}
	best := make([]int64, groups)
	bi := make([]int, groups)
	for g := range bi {
		bi[g] = -1
	}
	for i, rep := range replies {
		g := 0
		if l.store != nil {
			g = l.store.GroupOf(i)
		}
		if rep.ok && groupOK[g] && (bi[g] < 0 || rep.held[r.heldCalls[i]] > best[g]) {
			best[g], bi[g] = rep.held[r.heldCalls[i]], i
		}
	}
	read := false
	for g, ok := range groupOK {
		if ok {
			read = true
			st.heldByGroup[g] = best[g]
		}
	}
	if !read {
		st.acq += st.sentAcq
		st.rel += st.sentRel
	} else {
		sum := int64(0)
		for _, n := range st.heldByGroup {
			sum += n
		}
		st.held, st.heldKnown = sum, true
		// A release the round's best answer (of its group) no longer
		// counted is already out of held: stop subtracting it.
		counted := map[string]bool{}
		for _, i := range bi {
			if i < 0 {
				continue // a group whose quorum did not answer
			}
			for j, id := range r.ids[i] {
				counted[id] = replies[i].counted[r.heldCalls[i]][j]
			}
		}
		for _, id := range st.released {
			if c, sent := counted[id]; sent && !c {
				st.rel--
				st.uncount(id)
			}
		}
		// A lock being released that the round left out: its release,
		// recorded after this, is not subtracted (uncounted). One the
		// round counted is in held again.
		for id, c := range counted {
			switch {
			case c:
				delete(st.uncounted, id)
			case st.releasing[id] > 0:
				if st.uncounted == nil {
					st.uncounted = map[string]bool{}
				}
				st.uncounted[id] = true
			}
		}
		// The changes of the groups not read stay counted here.
		for g, ok := range groupOK {
			if !ok && g < len(r.sentAcqG) {
				st.acq += r.sentAcqG[g]
				st.rel += r.sentRelG[g]
			}
		}
	}
	st.sentAcq, st.sentRel = 0, 0
	st.inflight, st.released = nil, st.released[:0]
}

// uncount makes the release of tok still waiting in st.ops count nothing
// any more (rel no longer counts it: mergeHeld), so that takeOps, which
// keeps in rel what st.ops still holds, does not count it again. st.mu is
// held.
func (st *accountState) uncount(id string) {
	for i := range st.ops {
		if st.ops[i].kind == opRelease && lockID(st.ops[i].key, st.ops[i].token) == id {
			st.ops[i].kind = opExtend
			return
		}
	}
}

// Start runs a first round, so that a daemon (re)started knows what the
// others used before it serves, and starts the loop.
func (l *Limiter) Start() {
	if l.store == nil {
		close(l.done)
		return
	}
	if !l.round(context.Background()) {
		l.log.Warn("limits: no quorum of masters answered the first sync; counting from what this daemon sees until one does")
	}
	l.mu.Lock()
	l.started = true
	l.mu.Unlock()
	go l.run()
}

// Close stops the loop and writes this daemon's last counts.
func (l *Limiter) Close() {
	if l.store == nil {
		return
	}
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.accounts.Load()
	states := a.states
	for _, st := range a.retired {
		states = append(states, st)
	}
	// Every request has ended: once the lock path's last writes have
	// settled, every change goes, the second time too.
	var last time.Time
	for _, st := range states {
		st.mu.Lock()
		for _, ops := range [][]heldOp{st.recheck, st.ops} {
			for _, op := range ops {
				if op.at.After(last) {
					last = op.at
				}
			}
		}
		st.mu.Unlock()
	}
	time.Sleep(time.Until(last.Add(l.settle)))
	l.roundLocked(context.Background(), states, time.Now())
}

func fmtWindow(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmtInt(int64(d/(24*time.Hour))) + "d"
	case d%time.Hour == 0:
		return fmtInt(int64(d/time.Hour)) + "h"
	case d%time.Minute == 0:
		return fmtInt(int64(d/time.Minute)) + "m"
	}
	return d.String()
}

func fmtRate(r float64) string {
	if r == math.Trunc(r) {
		return fmtInt(int64(r))
	}
	return strconv.FormatFloat(r, 'g', -1, 64)
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }
